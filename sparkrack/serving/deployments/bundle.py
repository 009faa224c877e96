"""Everything the serve play applies for an inventory: every deployment's objects and the gateway.

:func:`render_serving` is the one entry point the Ansible filter and ``sparkrack render
--inventory`` share. Each deployment's objects depend on that deployment alone, so adding or
removing one leaves the others byte-identical; only the gateway's route table changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem, SparkrackError
from sparkrack.inputs.inventory import load_inventory
from sparkrack.serving.context import ServingContext, context_from_inventory
from sparkrack.serving.deployments import gateway
from sparkrack.serving.deployments.load import KEY, Deployment, load_deployments, source_of
from sparkrack.serving.engines import engine_of
from sparkrack.serving.objects.ranks import (
    deployment_objects,
    names,
    namespace,
    serving_selector,
    statefulset_name,
)
from sparkrack.serving.profile.images import FETCH_IMAGE_NEEDS
from sparkrack.serving.render import render_command
from sparkrack.serving.switch.objects import (
    fetch_facts,
    fetch_objects,
    fetch_selector,
    prepull_jobs,
    prepull_selector,
)

DEPLOYMENT_VARS = (KEY, "serving_profile", "serving_profile_file", "serving_spark")


@dataclass(frozen=True)
class Serving:
    """An inventory's deployments and the context they render in."""

    deployments: list[Deployment]
    ctx: ServingContext

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
    inventory: str, gid: dict[str, int] | None = None, *, check_memory: bool = True
) -> Serving:
    """The deployments of an inventory directory, every check passed."""
    ctx = context_from_inventory(inventory, gid)
    inv = load_inventory(inventory)
    variables = {name: inv.var(name) for name in DEPLOYMENT_VARS}
    found = load_deployments(variables, ctx, source_of(inventory), check_memory=check_memory)
    return checked(Serving(found, ctx), source_of(inventory))


def from_vars(variables: Mapping[str, Any], ctx: ServingContext, source: str) -> Serving:
    return checked(Serving(load_deployments(variables, ctx, source), ctx), source)


def checked(serving: Serving, source: str) -> Serving:
    """Refuse deployments across Sparks without an image for the weight copy."""
    spread = [d.name for d in serving.deployments if len(d.sparks) > 1]
    if spread and not serving.ctx.fetch_image:
        raise SparkrackError(
            Problem(
                source,
                "serving_fetch_image",
                f"is not set; {', '.join(spread)} copy their weights to every Spark with rsync",
                f"set serving_fetch_image to an image with {FETCH_IMAGE_NEEDS}, pinned by digest "
                "(README: What happens on a switch)",
                "fetch-image",
            )
        )
    return serving


def deployment_plan(d: Deployment, ctx: ServingContext) -> dict[str, Any]:
    """What the serve play prints for one deployment: ranks, Sparks, VF, addresses, rank 0's command."""
    dctx = d.context(ctx)
    eng = engine_of(d.profile.data)
    ranks = []
    for r in eng.ranks(dctx):
        row: dict[str, Any] = {"rank": r.rank, "node": str(r.node.name)}
        row["spark_index"] = r.node.spark_index
        if eng.uses_fabric:
            vfs = r.node.rail_vfs(d.vf if d.vf is not None else ctx.plan.serving_vf_index)
            row["vf"] = vfs[0].index
            row["fabric_address"] = vfs[0].address
            row["rdma_device"] = ",".join(vf.rdma_device for vf in vfs)
        ranks.append(row)
    return {
        "deployment": d.name,
        "profile": d.profile.name,
        "model": d.profile.model,
        "alias": d.alias,
        "image": d.profile.image,
        "engine": eng.name,
        "transport": d.profile.transport if eng.uses_fabric else "none (single Spark)",
        "vf": d.vf,
        "dist_init_addr": (
            f"{dctx.head_address}:{ctx.dist_port}" if eng.uses_fabric else "none (single Spark)"
        ),
        "ranks": ranks,
        "command_rank0": render_command(d.profile, dctx, 0),
    }


def render_serving(serving: Serving, key_secret: str | None = None) -> dict[str, Any]:
    """Every object to apply (namespace, each deployment's, the gateway's) and per-deployment
    facts the serve play needs (pods, selector, NCCL gate, plan)."""
    ctx = serving.ctx
    secret = key_secret or contract.SERVING_DEFAULTS["serving_gateway_key_secret"]
    per: list[dict[str, Any]] = []
    docs: list[dict[str, Any]] = [namespace(ctx)]
    fetch: list[dict[str, Any]] = []
    for d in serving.deployments:
        dctx = d.context(ctx)
        objects = deployment_objects(d.profile, dctx)
        docs += objects
        fetch += fetch_objects(d.profile, dctx)
        eng = engine_of(d.profile.data)
        pods = [f"{statefulset_name(d.profile, dctx, r.rank)}-0" for r in eng.ranks(dctx)]
        per.append(
            {
                "name": d.name,
                "profile": d.profile.name,
                "model": d.profile.model,
                "served_name": d.served_name(),
                "alias": d.alias,
                "transport": d.profile.transport,
                "nccl_check": eng.uses_fabric,
                "selector": serving_selector(d.profile, dctx),
                "api_service": names(d.profile, dctx)["api"],
                "head_pod": pods[0],
                "pods": pods,
                "plan": deployment_plan(d, ctx),
                "manifests": objects,
                **fetch_facts(d.profile, dctx),
            }
        )
    prepull = prepull_jobs([(d.profile, d.context(ctx)) for d in serving.deployments], ctx)
    gateway_docs = gateway.manifests(serving.deployments, ctx, secret)
    docs += gateway_docs
    listed = [d.name for d in serving.deployments]
    return {
        "namespace": ctx.namespace,
        "deployments": per,
        "names": listed,
        "gateway": {"manifests": gateway_docs, "service": contract.API_SERVICE},
        "manifests": docs,
        "contract": contract.contract_fact(),
        # Objects of deployments that left the list: removed by label, never from a kept list.
        "prune_selectors": [
            f"{contract.LABEL_COMPONENT}={contract.COMPONENT_SERVING}",
            f"{contract.LABEL_DEPLOYMENT} notin ({','.join(listed)})",
        ],
        "summary": summary(per, ctx, len(docs) + len(prepull) + len(fetch)),
        # A switch, in order: prepull (wait Complete) -> fetch (wait Complete) -> prune + apply
        # manifests. Jobs are immutable: delete the old ones by selector before applying.
        "prepull": prepull,
        "fetch": fetch,
        "switch": {
            "order": ["prepull", "fetch", "manifests"],
            "prepull_selector": prepull_selector(),
            "prepull_timeout": ctx.prepull_timeout,
            "fetch_selector": fetch_selector(),
            "fetch_timeout": ctx.fetch_timeout,
            "fetch_secret": ctx.fetch_secret,
            "fetch_secret_keys": {
                "password": contract.FETCH_PASSWORD_KEY,
                "secrets": contract.FETCH_SECRETS_KEY,
            },
            "fetch_image": ctx.fetch_image,
        },
    }


def in_apply_order(rendered: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every object of :func:`render_serving`'s result in the order a switch applies them: the
    namespace, the pre-pull Jobs, the fetch objects, then the deployments and the gateway."""
    first, *rest = rendered["manifests"]
    return [first, *rendered["prepull"], *rendered["fetch"], *rest]


def summary(per: Sequence[Mapping[str, Any]], ctx: ServingContext, objects: int) -> list[str]:
    """The serving plan as lines for the play's output."""
    lines = []
    for d in per:
        plan = d["plan"]
        lines.append(
            f"deployment {d['name']}: {d['profile']} ({d['model']}, alias {d['alias']}) on "
            f"{len(plan['ranks'])} Spark(s), {plan['engine']} image {plan['image']}, NCCL "
            f"transport {plan['transport']}, VF {plan['vf']}, dist-init-addr "
            f"{plan['dist_init_addr']}"
        )
        lines += [f"  rank {r['rank']}: {r}" for r in plan["ranks"]]
        lines.append(f"  command of rank 0: {plan['command_rank0']}")
        copy = f", copied to {', '.join(d['copy_to'])}" if d["copy_to"] else ""
        lines.append(
            f"  weights: {d['model']}@{d['revision']} fetched once by Job {d['fetch_job']} "
            f"({d['need_bytes'] / 1e9:.0f} GB free disk asked){copy}"
        )
    lines.append(
        f"{objects} manifests validated; clients call Service {contract.API_SERVICE}."
        f"{ctx.namespace}:{ctx.api_port} (LiteLLM {gateway.LITELLM_VERSION}, routes by alias)"
    )
    return lines
