"""Everything the serve play applies for an inventory: every deployment's objects and the gateway.

:func:`render_serving` is the one entry point the Ansible filter and ``sparkrack render
--inventory`` share. Each deployment's objects depend on that deployment alone, so adding or
removing one leaves the others byte-identical; only the gateway's route table changes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem, SparkrackError
from sparkrack.inputs.inventory import Inventory, load_inventory
from sparkrack.inputs.variable_table import SETTINGS, contract_fact
from sparkrack.k8s.reconcile import WATCHDOG_KINDS
from sparkrack.k8s.validate import validate_manifests
from sparkrack.serving.context import ServingContext, context_of
from sparkrack.serving.deployments import gateway
from sparkrack.serving.deployments.load import KEY, Deployment, SourceFiles, load_deployments
from sparkrack.serving.deployments.plan import deployment_plan, summary
from sparkrack.serving.objects import agents as watchdog
from sparkrack.serving.objects.connections import connection_problems
from sparkrack.serving.objects.network import default_deny
from sparkrack.serving.objects.pod import agents_namespace, namespace
from sparkrack.serving.objects.ranks import deployment_objects
from sparkrack.serving.resolution import Resolution, serving_selector
from sparkrack.serving.switch.objects import (
    jobs_selector,
    prepull_jobs,
    switch_objects,
    timeline_pods_selector,
)
from sparkrack.serving.trust import trust_problems

DEPLOYMENT_VARS = (KEY, "serving_profile", "serving_profile_file", "serving_spark")


@dataclass(frozen=True)
class DeploymentSet:
    """An inventory's deployments and the context they render in."""

    deployments: list[Deployment]
    ctx: ServingContext
    warnings: list[Problem] = field(default_factory=list)
    """What is reported without refusing; every command that shows the deployments prints it."""
    source: str = "inventory"
    """The file the deployments were written in (refusals of their objects name it)."""

    def deployment(self, name: str) -> Deployment:
        for d in self.deployments:
            if d.name == name:
                return d
        raise SparkrackError(
            Problem(
                "--deployment",
                name,
                "is not a deployment of the inventory",
                f"use one of: {', '.join(d.name for d in self.deployments)}",
                "deployments",
            )
        )


def from_inventory(
    inventory: str | Inventory,
    gid: dict[str, int] | None = None,
    *,
    check_memory: bool = True,
    switch: Mapping[str, str] | None = None,
) -> DeploymentSet:
    """The deployments of an inventory (a directory, or one loaded already), every check
    passed; each refusal names the file its variable was written in. ``switch`` (deployment ->
    profile) is the one-line inventory edit that switches a deployment's profile."""
    inv = inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
    ctx = context_of(inv, gid)
    variables = {name: inv.var(name) for name in DEPLOYMENT_VARS}
    if switch:
        variables[KEY] = [
            {**d, "profile": switch.get(d.get("name"), d.get("profile"))}
            for d in variables[KEY] or []
        ]
    home = inv.source(KEY if inv.var(KEY) else "serving_profile")
    written = {n: inv.source(n) for n in (*DEPLOYMENT_VARS, *SETTINGS) if inv.where(n)}
    warnings: list[Problem] = []
    found = load_deployments(
        variables, ctx, SourceFiles(home, written), check_memory=check_memory, warnings=warnings
    )
    return DeploymentSet(found, ctx, warnings, home)


def from_vars(
    variables: Mapping[str, Any], ctx: ServingContext, source: str | Mapping[str, str]
) -> DeploymentSet:
    warnings: list[Problem] = []
    found = load_deployments(variables, ctx, source, warnings=warnings)
    home = source if isinstance(source, str) else source.get(KEY, "inventory")
    return DeploymentSet(found, ctx, warnings, home)


def single(res: Resolution) -> DeploymentSet:
    """One resolved profile on its context's Sparks, named after the profile (``sparkrack render
    PROFILE``): the profile's own checks only, none of the inventory's deployments."""
    return DeploymentSet([Deployment(res, res.profile.model)], res.ctx)


def render_serving(deployments: DeploymentSet, *, source: str | None = None) -> dict[str, Any]:
    """The one render of a set of deployments, which the serve role's filter and ``sparkrack
    render`` share: every object to apply (namespace, each deployment's, the gateway's, the
    pre-pull and fetch Jobs), all validated against the Kubernetes schemas (a refusal names
    ``source``), and per deployment the facts the serve play needs (pods, selector, NCCL gate,
    plan)."""
    ctx = deployments.ctx
    untrusted = [
        p
        for d in deployments.deployments
        for p in trust_problems(d.profile, d.res.engine, ctx.trust)
    ]
    if untrusted:
        raise SparkrackError(untrusted)
    per: list[dict[str, Any]] = []
    agents = ctx.agents_namespace
    docs: list[dict[str, Any]] = [
        namespace(ctx),
        agents_namespace(ctx),
        default_deny(ctx.namespace),
        default_deny(agents),
    ]
    if ctx.watchdog is not None:
        docs += watchdog.evidence_volume(ctx.watchdog.evidence_dir, agents)
    fetch: list[dict[str, Any]] = []
    for d in deployments.deployments:
        res = d.res
        switch = switch_objects(res)
        objects = deployment_objects(res, switch.init_containers) + watchdog_objects(d)
        dropped = connection_problems(res, objects)
        if dropped:
            raise SparkrackError(dropped)
        docs += objects
        fetch += switch.objects
        pods = [res.names.pod(r.rank) for r in res.ranks]
        per.append(
            {
                "name": d.name,
                "profile": d.profile.name,
                "model": d.profile.model,
                "served_name": d.served_name(),
                "alias": d.alias,
                "transport": d.profile.transport,
                "nccl_check": res.engine.uses_fabric,
                "selector": res.selector,
                "api_service": res.names.api,
                # The key Secret the serve play creates once, and the head's variable holding
                # the key its smoke client sends (empty: the engine checks none).
                "key_secret": res.names.keys,
                # Labels of the deployment's Secrets (keys, rsync password): its name without
                # its profile, so they are removed with the deployment, kept across a switch.
                "secret_labels": {
                    **contract.PART_OF,
                    contract.LABEL_COMPONENT: contract.COMPONENT_SERVING,
                    contract.LABEL_DEPLOYMENT: d.name,
                },
                "api_key_env": res.engine.client_key_env or "",
                "head_pod": pods[0],
                "pods": pods,
                # The engine's container in each rank's pod (a gated head has its gate beside
                # it): what the play's exec and log reads name.
                "container": res.engine.name,
                "plan": deployment_plan(d),
                "manifests": objects,
                **switch.facts,
            }
        )
    prepull = prepull_jobs([d.res for d in deployments.deployments], ctx)
    gateway_docs = gateway.manifests(deployments.deployments, ctx)
    docs += gateway_docs
    # One memory guard per Spark, beside the watchdogs (same image).
    docs += (
        watchdog.memguard_manifests(ctx.namespace, ctx.memguard, ctx.api_server, agents)
        if ctx.memguard
        else []
    )
    listed = [d.name for d in deployments.deployments]
    rendered = {
        "namespace": ctx.namespace,
        "agents_namespace": agents,
        "deployments": per,
        "names": listed,
        "gateway": {"manifests": gateway_docs, "service": contract.API_SERVICE},
        # What the sparkrack_image role imported into every node (empty: no archive).
        "image_archive_reference": ctx.image_reference,
        "manifests": docs,
        "contract": contract_fact(),
        # Objects of deployments that left the list: removed by label, never from a kept list.
        # The watchdogs and the memory guard: their kinds (removal order) and labels, the
        # deployments that keep a watchdog, whether the guard stays, the evidence directory the
        # play gives the pod's user on the control-plane node.
        "watchdog": {
            "enabled": ctx.watchdog is not None,
            "kinds": list(WATCHDOG_KINDS),
            "selector": f"{contract.LABEL_COMPONENT} in "
            f"({contract.COMPONENT_WATCHDOG},{contract.COMPONENT_MEMGUARD})",
            "keep": listed if ctx.watchdog is not None else [],
            "namespaces": [ctx.namespace, agents],
            "guard": ctx.memguard is not None,
            "evidence_dir": ctx.watchdog.evidence_dir if ctx.watchdog else "",
            "owner": contract.SERVING_UID,
        },
        "prune_selectors": [
            serving_selector(),
            f"{contract.LABEL_DEPLOYMENT} notin ({','.join(listed)})",
        ],
        # What is reported without refusing, repeated where the plan is shown.
        "warnings": [str(w) for w in deployments.warnings],
        "summary": summary(per, ctx, len(docs) + len(prepull) + len(fetch))
        + [f"warning: {w}" for w in deployments.warnings],
        # A switch, in order: prepull (wait Complete) -> fetch (wait Complete) -> prune + apply
        # manifests. Jobs are immutable: delete the old ones by selector before applying.
        "prepull": prepull,
        "fetch": fetch,
        "switch": {
            "order": ["prepull", "fetch", "manifests"],
            "jobs_selector": jobs_selector(),
            "timeline_pods_selector": timeline_pods_selector(),
            "prepull_timeout": ctx.prepull_timeout,
            "fetch_timeout": ctx.fetch_timeout,
            "fetch_secret": ctx.fetch_secret,
            "fetch_secret_keys": {
                "password": contract.FETCH_PASSWORD_KEY,
                "secrets": contract.FETCH_SECRETS_KEY,
            },
            "fetch_image": ctx.fetch_image,
            # The fetch and receiver containers write the HF cache as this user (not root): the
            # play gives it the cache directory on these Sparks before the fetch.
            "cache_owner": contract.SERVING_UID,
            "cache_nodes": sorted(
                {str(n.name) for d in deployments.deployments for n in d.res.nodes}
            ),
        },
    }
    problems = validate_manifests(in_apply_order(rendered), source=source or deployments.source)
    if problems:
        raise SparkrackError(problems)
    return rendered


def watchdog_objects(d: Deployment) -> list[dict[str, Any]]:
    """The deployment's stall watchdog (none without ``serving_watchdog_image``): it probes
    rank 0 by its stable pod name, which the watchdog's routing changes never touch."""
    res, ctx = d.res, d.res.ctx
    if ctx.watchdog is None:
        return []
    head = f"{res.names.pod(0)}.{res.names.headless}.{ctx.namespace}.svc"
    return watchdog.manifests(
        d.name,
        ctx.namespace,
        f"http://{head}:{ctx.api_port}",
        d.alias,
        ctx.watchdog,
        {**res.labels, contract.LABEL_RANK: "0"},
        ctx.api_port,
        res.names.keys if res.engine.client_key_env else None,
        len(res.ranks),
        ctx.api_server,
        ctx.agents_namespace,
    )


def in_apply_order(
    rendered: Mapping[str, Any], deployment: str | None = None
) -> list[dict[str, Any]]:
    """Every object of :func:`render_serving`'s result in the order a switch applies them: the
    namespaces, the pre-pull Jobs, the fetch objects, then the deployments and the gateway. With
    ``deployment``: the namespaces and what every deployment shares (each namespace's default
    deny, the watchdogs' evidence volume), that deployment's fetch objects, then its own
    objects."""
    manifests = rendered["manifests"]
    count = next(i for i, doc in enumerate(manifests) if doc["kind"] != "Namespace")
    first, rest = manifests[:count], manifests[count:]
    if deployment is None:
        return [*first, *rendered["prepull"], *rendered["fetch"], *rest]
    shared = list(
        itertools.takewhile(
            lambda doc: contract.LABEL_DEPLOYMENT not in (doc["metadata"].get("labels") or {}),
            rest,
        )
    )
    [own] = [d for d in rendered["deployments"] if d["name"] == deployment]
    fetch = [
        doc
        for doc in rendered["fetch"]
        if doc["metadata"]["labels"].get(contract.LABEL_DEPLOYMENT) == deployment
    ]
    return [*first, *shared, *fetch, *own["manifests"]]
