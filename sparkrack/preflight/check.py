"""Everything an inventory asks for, checked before a host or the cluster changes.

:func:`check_inventory` is what ``sparkrack check -i INV`` prints and what the preflight play
runs (through the Ansible adapter): the inventory's variables against their forms
(:mod:`sparkrack.inputs.variables`), its groups and the address plan, every deployment with its
profile's rules, the memory per Spark, every object the serve play would apply against the
API server's rules, the images and the secrets, and the real engine parser when its
environment is cached. It reports every problem it can find at once, one line per
deployment, and a verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from sparkrack.errors import Problem, SparkrackError, printable
from sparkrack.fabric.addressplan import FabricPlan
from sparkrack.inputs.imageref import pin_state, unreachable
from sparkrack.inputs.inventory import Inventory
from sparkrack.inputs.variables import check_variables

SECRETS = ("vault_hf_token", "vault_gateway_key")
RULE_IMAGE = "image-unreachable"
RULE_SECRET = "inventory-secret"
RULE_UNDIGESTED = "privileged-image-tag"
EXAMPLE_PULLABLE = "ghcr.io/<you>/sparkrack:<version>@sha256:<digest>"
MODEL_VARS = ("serving_deployments", "serving_profile", "serving_profile_file")


@dataclass
class Report:
    """What :func:`check_inventory` found: lines to print, problems, warnings."""

    inventory: str
    lines: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    deployments: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def refuse(self, found: Iterable[Problem]) -> None:
        for p in found:
            if p not in self.problems:
                self.problems.append(p)

    def warn(self, found: Iterable[Problem]) -> None:
        for p in found:
            if p not in self.warnings:
                self.warnings.append(p)

    def verdict(self) -> str:
        if self.problems:
            return (
                f"check: REFUSED, {len(self.problems)} problem(s): nothing may change until "
                "they are fixed"
            )
        return (
            f"check: OK, {self.deployments} deployment(s), {len(self.warnings)} warning(s): "
            "ansible-playbook site.yml may run"
        )

    def to_dict(self) -> dict[str, Any]:
        """The report as ``check --json`` prints it."""
        return {
            "inventory": self.inventory,
            "ok": self.ok,
            "deployments": self.deployments,
            "lines": self.lines,
            "warnings": [asdict(w) for w in self.warnings],
            "problems": [asdict(p) for p in self.problems],
            "verdict": self.verdict(),
        }

    def text(self) -> list[str]:
        """Every line in order: the findings, the warnings, the problems, the verdict."""
        return [
            *self.lines,
            *(f"warning: {w}" for w in self.warnings),
            *(str(p) for p in self.problems),
            self.verdict(),
        ]


def check_inventory(inv: Inventory, *, engine_check: bool = True) -> Report:
    """Every check of :mod:`this module <sparkrack.preflight.check>` on ``inv``;
    ``engine_check=False`` leaves the real-parser check out (it says so)."""
    report = Report(str(inv.path))
    found = check_variables(inv)
    report.refuse(found.problems)
    report.warn(found.warnings)
    control_plane = ", ".join(printable(h) for h in inv.control_plane) or "none"
    report.lines.append(
        f"inventory {printable(str(inv.path))}: {len(inv.sparks)} Spark(s), control plane "
        f"{control_plane}"
    )
    try:
        plan = inv.plan()
    except SparkrackError as exc:
        report.refuse(exc.problems)
        report.lines.append("fabric: refused (see below); deployments not checked")
        return report
    report.lines.append(_fabric_line(plan))
    if any(p.key.startswith("serving_") for p in report.problems):
        report.lines.append("deployments: not checked until the serving_* variables are right")
        return report
    _node_options(inv, report)
    _deployments(inv, report, engine_check)
    _secrets(inv, report)
    return report


def _node_options(inv: Inventory, report: Report) -> None:
    """What the K3s and add-on roles would refuse in their options, before a node changes."""
    from sparkrack.k3s import config as k3s
    from sparkrack.k8s.options import options_from

    for prefix, hosts in (("k3s_server_", inv.control_plane), ("k3s_agent_", inv.sparks)):
        for host in hosts:
            raw = {
                key: inv.var(prefix + key, host=host)
                for key in k3s.OPTION_KEYS
                if inv.var(prefix + key, host=host) is not None
            }
            source = next((inv.source(prefix + k, host) for k in raw), str(inv.path))
            report.refuse(k3s.option_problems(raw, source, prefix))
    try:
        options_from(inv.var("cluster_addons"), inv.source("cluster_addons"))
    except SparkrackError as exc:
        report.refuse(exc.problems)


def _fabric_line(plan: FabricPlan) -> str:
    return (
        f"fabric: {', '.join(plan.rail_subnets)} mtu {plan.mtu}, {plan.vf_count} VFs on "
        f"{', '.join(plan.rails)} (in use {', '.join(map(str, plan.vfs_in_use))}); "
        f"{len(plan.nodes)} Sparks planned"
    )


def _deployments(inv: Inventory, report: Report, engine_check: bool) -> None:
    from sparkrack.serving.deployments import gateway
    from sparkrack.serving.deployments.bundle import from_inventory, render_serving
    from sparkrack.serving.deployments.load import RULE_MEMORY, format_table, memory_table
    from sparkrack.serving.switch.plan import loading_barrier_warnings

    if not any(inv.var(name) for name in MODEL_VARS):
        report.lines.append("deployments: none (no serving_profile or serving_deployments)")
        report.warn(
            [
                Problem(
                    str(inv.path),
                    "serving_profile",
                    "names no model: the nodes can be provisioned, the serve play refuses to run",
                    "set serving_profile: <name> or serving_deployments (model_profiles/*.yml)",
                    "deployments",
                )
            ]
        )
        return
    try:
        found = from_inventory(inv, check_memory=False)
    except SparkrackError as exc:
        report.refuse(exc.problems)
        report.lines.append("deployments: refused (see below)")
        return
    report.warn(found.warnings)
    report.deployments = len(found.deployments)
    rows, over = memory_table(found.deployments)
    gb = {(row.spark, name): part for row in rows for name, part in row.parts}
    for d in found.deployments:
        res = d.res
        topology = d.profile.data.get("topology") or {}
        shape = "/".join(f"{k}{topology.get(k, 1)}" for k in ("tp", "pp", "ep"))
        vf = "" if d.vf is None else f", VF {d.vf}"
        per = gb.get((d.sparks[0], d.name), 0.0)
        report.warn(loading_barrier_warnings(res, found.source))
        report.lines.append(
            f"deployment {d.name}: {d.profile.name} ({res.engine.name} {shape}) on "
            f"{', '.join(d.sparks)}{vf}, {per:.1f} GB per Spark, alias {d.alias}, image "
            f"{d.profile.image} ({pin_state(d.profile.image)})"
        )
    report.warn(undigested_privileged(inv, found))
    for row in rows:
        mark = "OVER" if row.over else "ok"
        report.lines.append(f"memory {row.spark}: {row.total_gb:.1f} / {row.usable_gb:g} GB {mark}")
    if over:
        report.refuse(
            [
                Problem(
                    found.source,
                    "serving_deployments" if inv.var("serving_deployments") else "serving_profile",
                    f"the deployments over-commit the unified memory of {', '.join(over)}:\n"
                    + format_table(rows),
                    "lower a memory fraction, move a deployment to other Sparks, or drop one",
                    RULE_MEMORY,
                )
            ]
        )
        return
    report.refuse(_unreachable_images(inv, found))
    if found.ctx.fetch_image:
        image = found.ctx.fetch_image
        report.lines.append(f"image weight copy: {image} ({pin_state(image)})")
    if found.ctx.watchdog is not None:
        image = found.ctx.watchdog.image
        report.lines.append(f"image stall watchdog: {image} ({pin_state(image)})")
    report.lines.append(f"image gateway: {gateway.IMAGE} ({pin_state(gateway.IMAGE)})")
    try:
        rendered = render_serving(found)
    except SparkrackError as exc:
        report.refuse(exc.problems)
        return
    report.lines.append(
        f"manifests: {len(rendered['manifests']) + len(rendered['fetch'])} objects "
        f"rendered and valid ({len(rendered['prepull'])} pre-pull Jobs)"
    )
    if engine_check:
        report.lines += _engine_check(found.deployments, report)
    else:
        report.lines.append("engine check: NOT RUN (--no-engine-check)")


def undigested_privileged(inv: Inventory, found: Any) -> list[Problem]:
    """One warning naming every image that runs privileged (an engine on the fabric) by a tag,
    which ``serving_allow_undigested_privileged: true`` lets through: whoever can move the
    tag chooses what runs as root on the Sparks."""
    if not found.ctx.trust.allow_undigested_privileged:
        return []
    images = sorted(
        {
            d.profile.image
            for d in found.deployments
            if d.res.engine.uses_fabric and "@sha256:" not in d.profile.image
        }
    )
    if not images:
        return []
    return [
        Problem(
            inv.source("serving_allow_undigested_privileged"),
            "serving_allow_undigested_privileged",
            f"lets {', '.join(printable(i) for i in images)} run privileged by tag: whoever can "
            "move the tag chooses what runs as root on the Sparks",
            "pin each by digest (image: <repo>:<tag>@sha256:<digest>) and set "
            "serving_allow_undigested_privileged: false",
            RULE_UNDIGESTED,
        )
    ]


def _unreachable_images(inv: Inventory, found: Any) -> list[Problem]:
    """Every image the deployments run that no node can pull (:func:`imageref.unreachable`):
    refused here, before a node changes, instead of a Job waiting on ImagePullBackOff. The
    image of ``serving_image_archive`` is imported into every node's containerd, never pulled:
    its reference (``sparkrack.invalid/…@sha256:…``) is not held to the pull rules."""
    named: list[tuple[str, str, str]] = []
    if found.ctx.fetch_image:
        named.append(
            (inv.source("serving_fetch_image"), "serving_fetch_image", found.ctx.fetch_image)
        )
    if found.ctx.watchdog is not None:
        named.append(
            (
                inv.source("serving_watchdog_image"),
                "serving_watchdog_image",
                found.ctx.watchdog.image,
            )
        )
    for d in found.deployments:
        named.append((d.profile.source, f"image (deployment {d.name})", d.profile.image))
    problems = []
    for file, key, image in named:
        if found.ctx.image_reference and image == found.ctx.image_reference:
            continue
        why = unreachable(image)
        if why is not None:
            problems.append(
                Problem(
                    file,
                    key,
                    f"{printable(image)} {why}",
                    "name an image the nodes can pull: your registry's, pinned by digest "
                    f"(e.g. {EXAMPLE_PULLABLE})",
                    RULE_IMAGE,
                )
            )
    return problems


def _engine_check(deployments: list[Any], report: Report) -> list[str]:
    """The real-parser check of every rank, from the cache only; says when it could not run."""
    from sparkrack.serving.enginecheck.check import (
        check_resolved,
        extra_args_problems,
        problems_of,
    )

    lines = []
    for d in deployments:
        res = d.res
        version = res.engine.upstream_version(res.profile) or "unknown"
        try:
            problems = extra_args_problems(res.profile, res.engine, offline=True)
            if not problems:
                problems = problems_of(
                    check_resolved([res], offline=True), {res.profile.name: res.profile.source}
                )
        except SparkrackError as exc:
            why = exc.problems[0].message if exc.problems else "unavailable"
            lines.append(
                f"engine check {d.name}: NOT RUN, {res.engine.name} {version}: {why} "
                "(sparkrack validate --engine-check builds it once, online)"
            )
            continue
        report.refuse(problems)
        verdict = "refused (see below)" if problems else "ok"
        lines.append(f"engine check {d.name}: {res.engine.name} {version} {verdict}")
    return lines


def _secrets(inv: Inventory, report: Report) -> None:
    """Which secrets the inventory holds (never their values) and how they are stored."""
    parts = []
    for name in SECRETS:
        value = inv.var(name)
        if value is None:
            parts.append(f"{name} not set")
            continue
        file = inv.source(name)
        vaulted = file in inv.files.vault_files or any(
            f == file and k == name for f, k in inv.files.vault_values
        )
        parts.append(f"{name} set ({'ansible-vault' if vaulted else 'NOT encrypted'})")
    report.lines.append("secrets: " + "; ".join(parts))
    if report.deployments and not inv.var("vault_gateway_key"):
        report.refuse(
            [
                Problem(
                    _group_vars_all(inv),
                    "vault_gateway_key",
                    "is not set: the serve play refuses to apply the gateway without it, after "
                    "the node and K3s plays have run",
                    "create group_vars/all/vault.yml with `ansible-vault create`, holding "
                    "vault_gateway_key: <a long random string> (clients send it as their API "
                    "key); if group_vars/all.yml exists, move it to group_vars/all/main.yml "
                    "first",
                    RULE_SECRET,
                )
            ]
        )


def _group_vars_all(inv: Inventory) -> str:
    """Where the inventory's ``all`` variables live: the file or folder an owner edits."""
    folder = inv.path / "group_vars"
    for name in ("all", "all.yml", "all.yaml"):
        if (folder / name).exists():
            return str(folder / name)
    return str(folder / "all")
