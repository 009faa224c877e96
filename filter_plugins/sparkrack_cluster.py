"""Jinja filters for the K3s roles, the cluster add-ons and the fabric gate.

Thin wrappers: rendering, validation and log parsing live in sparkrack.cluster / sparkrack.nccl.
Every manifest list returned here has passed offline schema validation; a refusal raises
AnsibleFilterError listing file, key, problem and fix.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from ansible.errors import AnsibleFilterError  # noqa: E402

from sparkrack.addressplan import (  # noqa: E402
    FabricPlan,
    NodeInput,
    nodes_from_hostvars,
)
from sparkrack.cluster import (  # noqa: E402
    k3s,  # noqa: E402
    render_addons,
    validated,
)
from sparkrack.cluster.fabric_check import Transport, render_fabric_check  # noqa: E402
from sparkrack.cluster.options import options_from  # noqa: E402
from sparkrack.errors import Problem, SparkrackError  # noqa: E402
from sparkrack.nccl import Requested, gate  # noqa: E402

T = TypeVar("T")


def _guard(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except SparkrackError as exc:
        raise AnsibleFilterError(f"{what} refused:\n{exc}") from None


def _plan(plan_fact: Mapping[str, Any]) -> FabricPlan:
    """The ``sparkrack_plan`` fact set by playbooks/preflight.yml: read, never recomputed."""
    return FabricPlan.from_dict(plan_fact)


def _node(host: str, hostvars: Any) -> NodeInput:
    return nodes_from_hostvars([host], hostvars)[0]


def node_ip(host: str, hostvars: Any) -> str:
    """``{{ inventory_hostname | sparkrack_node_ip(hostvars) }}`` — the K3s node IP of any host."""
    return _node(host, hostvars).node_ip


def k3s_server_url(control_plane: str, hostvars: Any) -> str:
    return k3s.server_url(_node(control_plane, hostvars))


def k3s_server_config(
    control_plane: str, hostvars: Any, options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return _guard(
        "K3s server config",
        lambda: k3s.server_config(_node(control_plane, hostvars), k3s.options_from(options)),
    )


def k3s_agent_config(
    plan_fact: Mapping[str, Any],
    hostvars: Any,
    host: str,
    control_plane: str,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        plan = _plan(plan_fact)
        return k3s.agent_config(
            plan, host, _node(control_plane, hostvars), k3s.options_from(options)
        )

    return _guard("K3s agent config", run)


def k3s_release(version: str, machine: str) -> dict[str, str]:
    return _guard("K3s release", lambda: k3s.release_assets(version, machine))


def sha256_from_sums(text: str, filename: str) -> str:
    return _guard("air-gap checksum", lambda: k3s.sha256_from_sums(text, filename))


def kubeconfig_rewrite(text: str, server: str) -> str:
    return _guard("kubeconfig", lambda: k3s.rewrite_kubeconfig(text, server))


def cluster_manifests(
    plan_fact: Mapping[str, Any],
    options: Mapping[str, Any] | None = None,
    source: str = "cluster add-ons",
) -> list[dict[str, Any]]:
    """Multus + namespace + NADs + device plugin, rendered from the plan and validated."""

    def run() -> list[dict[str, Any]]:
        plan = _plan(plan_fact)
        return render_addons(plan, options_from(options), source)

    return _guard("cluster add-on manifests", run)


def fabric_check_manifests(
    plan_fact: Mapping[str, Any],
    options: Mapping[str, Any] | None = None,
    transport: str = "roce",
    gid_indexes: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    def run() -> list[dict[str, Any]]:
        if transport not in ("roce", "socket"):
            raise SparkrackError(
                Problem(
                    "fabric_check", "fabric_check_transport", f"{transport!r}", "roce or socket"
                )
            )
        plan = _plan(plan_fact)
        gids = {k: (None if v in (None, "") else int(v)) for k, v in (gid_indexes or {}).items()}
        docs = render_fabric_check(plan, options_from(options), cast(Transport, transport), gids)
        return validated(docs, "fabric check")

    return _guard("fabric-check manifests", run)


def fabric_gate(
    text: str,
    requested: str,
    min_busbw_gbps: float | str | None = None,
    plan_fact: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Parse the NCCL log and judge it: ``{passed, problems, transport, busbw_gbps, rails, ...}``.

    With ``plan_fact`` every rail's serving VF must carry traffic and the default floor scales
    with the rails; ``min_busbw_gbps`` None = that default.
    """
    if requested not in ("roce", "socket"):
        raise AnsibleFilterError(
            f"fabric gate: requested transport {requested!r} is not roce|socket"
        )
    hcas: tuple[str, ...] = ()
    if plan_fact:
        plan = _guard("fabric gate", lambda: _plan(plan_fact))
        hcas = tuple(vf.rdma_device for vf in plan.head.rail_vfs(plan.serving_vf_index))
    floor = None if min_busbw_gbps in (None, "") else float(min_busbw_gbps)
    verdict = gate(text, cast(Requested, requested), floor, hcas=hcas)
    report = verdict.report
    return {
        "passed": verdict.passed,
        "problems": [str(p) for p in verdict.problems],
        "transport": report.transport,
        "link_layer": report.link_layer,
        "ib_devices": list(report.ib_devices),
        "rails": [
            {"device": dev, "used": used, "channels": channels}
            for dev, used, channels in verdict.rail_use()
        ],
        "floor_gbps": verdict.floor_gbps,
        "nccl_version": report.nccl_version,
        "busbw_gbps": report.busbw_gbps,
        "avg_busbw_gbps": report.avg_busbw_gbps,
        "evidence": list(report.lines[:20]),
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sparkrack_node_ip": node_ip,
            "sparkrack_k3s_server_url": k3s_server_url,
            "sparkrack_k3s_server_config": k3s_server_config,
            "sparkrack_k3s_agent_config": k3s_agent_config,
            "sparkrack_k3s_release": k3s_release,
            "sparkrack_kubeconfig_rewrite": kubeconfig_rewrite,
            "sparkrack_sha256_from_sums": sha256_from_sums,
            "sparkrack_cluster_manifests": cluster_manifests,
            "sparkrack_fabric_check_manifests": fabric_check_manifests,
            "sparkrack_fabric_gate": fabric_gate,
        }
