"""Every sparkrack Jinja filter, in one table: the one module Ansible imports.

``filter_plugins/sparkrack_filters.py`` re-exports :class:`FilterModule`; sparkrack must be installed
in the Python that runs ansible-playbook (``make setup`` / ``pip install .`` do that), so no
plugin edits ``sys.path``. Each filter only converts Ansible's values to the typed call of
the owning module and turns a :class:`~sparkrack.errors.SparkrackError` into an
``AnsibleFilterError`` that keeps the file/key/fix lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

from ansible.errors import AnsibleFilterError

from sparkrack.errors import Problem, SparkrackError, printable
from sparkrack.fabric.addressplan import FabricPlan, NodeInput, nodes_from_hostvars
from sparkrack.fabric.layout import compute_plan
from sparkrack.fabric.nccl import (
    ALL_RAILS,
    Sweep,
    Verdict,
    check_transport,
    fabric_sweeps,
    gate,
    gate_sweeps,
)
from sparkrack.fabric.ncclenv import TRANSPORTS, Transport
from sparkrack.fabric.netplan import fabric_interfaces, netplan_config
from sparkrack.fabric.rdma import pair_rounds, rail_verdict
from sparkrack.inputs.variable_table import contract_fact
from sparkrack.k3s import config as k3s
from sparkrack.k8s import render_addons, validated, waits
from sparkrack.k8s.fabric_check import render_fabric_check, sweep_selector
from sparkrack.k8s.options import options_from
from sparkrack.k8s.reconcile import (
    dry_run_objects,
    job_plan,
    refusals,
    stale_serving,
    stale_watchdogs,
)
from sparkrack.node.driverlock import check_driver_version

T = TypeVar("T")


def _guard(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except SparkrackError as exc:
        raise AnsibleFilterError(f"{what} refused:\n{exc}") from None


def _plan(plan_fact: Mapping[str, Any]) -> FabricPlan:
    """The ``sparkrack_plan`` fact the preflight play computed: read, never recomputed."""
    return FabricPlan.from_dict(plan_fact)


def _node(host: str, hostvars: Any) -> NodeInput:
    return nodes_from_hostvars([host], hostvars)[0]


def _text(log: Any) -> str:
    return "\n".join(log) if isinstance(log, list) else str(log or "")


# --- the contract and the address plan ---------------------------------------------------------


def contract(home: str) -> dict[str, Any]:
    """``{{ lookup('env', 'HOME') | sparkrack_contract }}``: every cross-boundary name, once."""
    return contract_fact(home)


def fabric_plan(
    fabric: Any, hosts: list[str], hostvars: Any, source: str = "inventory"
) -> dict[str, Any]:
    """``{{ fabric | sparkrack_fabric_plan(groups['sparks'], hostvars) }}`` -> the plan as a dict."""
    return _guard(
        "address plan",
        lambda: compute_plan(fabric, nodes_from_hostvars(hosts, hostvars), source=source).to_dict(),
    )


def inventory_check(groups: Any, hostvars: Any, sources: list[str]) -> list[str]:
    """``{{ groups | sparkrack_inventory_check(hostvars, ansible_inventory_sources) }}``: what
    ``sparkrack check`` runs, on the inventory this play loaded (each host's variables before
    templating, as the CLI reads them) -> the report's lines; refused on any problem."""
    from sparkrack.inputs.inventory import inventory_of
    from sparkrack.preflight.check import check_inventory

    def run() -> list[str]:
        hosts = sorted({str(h) for members in dict(groups).values() for h in members})
        raw = {h: hostvars.raw_get(h) for h in hosts}
        inv = inventory_of(dict(groups), raw, list(sources), hostvars.raw_get("localhost"))
        report = check_inventory(inv)
        if not report.ok:
            raise SparkrackError(report.problems)
        return report.text()

    return _guard("inventory check", run)


# --- node roles -------------------------------------------------------------------------------


def netplan(
    plan: Any, host: str, management_interfaces: list[str] | None = None, renderer: str = "networkd"
) -> dict[str, Any]:
    """``{{ sparkrack_plan | sparkrack_netplan(inventory_hostname, [mgmt_if]) | to_nice_yaml }}``."""
    return _guard(
        "fabric netplan", lambda: netplan_config(plan, host, management_interfaces or [], renderer)
    )


def fabric_interface_names(plan: Any, host: str) -> list[str]:
    return _guard("fabric interfaces", lambda: fabric_interfaces(plan, host))


def gid_standin(vfs: list[Mapping[str, Any]], root: str, v2_index: int) -> dict[str, Any]:
    """``{{ vfs | sparkrack_gid_standin(root, index) }}`` -> ``{directories, files}`` of a GID
    table in the kernel's layout for the VFs in use (the lab's stand-in for sysfs)."""
    from sparkrack.fabric.gidstandin import files

    targets = [(str(v["rdma_device"]), str(v["address"]), str(v["netdev"])) for v in vfs]
    folders, written = _guard("GID stand-in", lambda: files(root, targets, int(v2_index)))
    return {"directories": folders, "files": written}


def driver_check(text: str, expected: str, source: str = "group_vars") -> str:
    return _guard("NVIDIA driver", lambda: check_driver_version(text, expected, source))


def rdma_rounds(order: list[str]) -> list[dict[str, dict[str, str]]]:
    """``{{ sparkrack_plan.order | sparkrack_rdma_rounds }}``: ib_write_bw pairs, round by round."""
    return pair_rounds([str(h) for h in order])


def rdma_rail(
    output: str,
    netdev: str,
    rdma_device: str,
    rdma_links: str,
    sysfs_lines: str,
    floor_gbps: float,
    source: str = "rdma preflight",
) -> dict[str, Any]:
    """Judge one rail: ``sysfs_lines`` are ``key=value`` lines (speed, current_link_width, ...)."""
    sysfs = dict(line.split("=", 1) for line in str(sysfs_lines).splitlines() if "=" in line)
    return rail_verdict(
        str(output), netdev, rdma_device, str(rdma_links), sysfs, float(floor_gbps), source
    )


# --- K3s --------------------------------------------------------------------------------------


def k3s_server_url(control_plane: str, hostvars: Any) -> str:
    return k3s.server_url(_node(control_plane, hostvars))


def k3s_server_config(
    control_plane: str, hostvars: Any, options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return _guard(
        "K3s server config",
        lambda: k3s.server_config(_node(control_plane, hostvars), k3s.options_from(options)),
    )


def k3s_pod_security_config(_: Any = None, extra_exempt: Sequence[str] = ()) -> dict[str, Any]:
    """The kube-apiserver's Pod Security admission configuration (sparkrack.k3s.config)."""
    return _guard("Pod Security admission config", lambda: k3s.pod_security_config(extra_exempt))


def k3s_agent_config(
    plan_fact: Mapping[str, Any],
    hostvars: Any,
    host: str,
    control_plane: str,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return _guard(
        "K3s agent config",
        lambda: k3s.agent_config(
            _plan(plan_fact), host, _node(control_plane, hostvars), k3s.options_from(options)
        ),
    )


def k3s_release(version: str, machine: str) -> dict[str, str]:
    return _guard("K3s release", lambda: k3s.release_assets(version, machine))


def sha256_from_sums(text: str, filename: str) -> str:
    return _guard("air-gap checksum", lambda: k3s.sha256_from_sums(text, filename))


def kubeconfig_rewrite(text: str, server: str) -> str:
    return _guard("kubeconfig", lambda: k3s.rewrite_kubeconfig(text, server))


def k3s_node(
    config: Mapping[str, Any],
    machine: str,
    capacity: Mapping[str, Any] | None = None,
    server: bool = False,
) -> dict[str, Any]:
    """``{{ config | sparkrack_k3s_node(ansible_architecture) }}``: the Node its kubelet
    registers (capacity None = a DGX Spark's)."""
    from sparkrack.k3s.node import registered_node

    reported = None if capacity is None else {str(k): str(v) for k, v in capacity.items()}
    return _guard("K3s node", lambda: registered_node(config, str(machine), reported, bool(server)))


# --- cluster add-ons and the fabric gate ------------------------------------------------------


def cluster_manifests(
    plan_fact: Mapping[str, Any],
    options: Mapping[str, Any] | None = None,
    source: str = "cluster add-ons",
) -> list[dict[str, Any]]:
    """Multus + namespace + NADs + device plugin, rendered from the plan and validated."""
    return _guard(
        "cluster add-on manifests",
        lambda: render_addons(_plan(plan_fact), options_from(options), source),
    )


def fabric_check_sweeps(
    plan_fact: Mapping[str, Any],
    options: Mapping[str, Any] | None = None,
    transport: str = "roce",
) -> list[dict[str, Any]]:
    """The gate's sweeps in the order they run: ``[{name, devices, selector, manifests}]`` (every
    rail at once, then each rail alone when there are several), manifests validated."""

    def run() -> list[dict[str, Any]]:
        if transport not in TRANSPORTS:
            raise SparkrackError(
                Problem(
                    "fabric_check", "fabric_check_transport", f"{transport!r}", "roce or socket"
                )
            )
        plan, opts = _plan(plan_fact), options_from(options)
        return [
            {
                "name": sweep.name,
                "devices": list(sweep.devices),
                "selector": sweep_selector(sweep),
                "manifests": validated(
                    render_fabric_check(plan, opts, transport, sweep=sweep),
                    f"fabric check {sweep.name}",
                ),
            }
            for sweep in fabric_sweeps(plan)
        ]

    return _guard("fabric-check sweeps", run)


def _verdict_fact(verdict: Verdict) -> dict[str, Any]:
    report = verdict.report
    return {
        "passed": verdict.passed,
        "problems": [str(p) for p in verdict.problems],
        "warnings": [str(p) for p in verdict.warnings],
        "small_messages": verdict.small_message_line(),
        "transport": report.transport,
        "link_layer": report.link_layer,
        "ib_devices": list(report.ib_devices),
        "rails": [
            {"device": dev, "used": used, "channels": channels}
            for dev, used, channels in verdict.rail_use()
        ],
        "floor_gbps": verdict.floor_gbps,
        "small_floor_gbps": verdict.small_floor_gbps,
        "nccl_version": report.nccl_version,
        "busbw_gbps": report.busbw_gbps,
        "avg_busbw_gbps": report.avg_busbw_gbps,
        "evidence": list(report.lines[:20]),
    }


def fabric_gate(
    logs: str | Mapping[str, str],
    requested: str,
    min_busbw_gbps: float | str | None = None,
    plan_fact: Mapping[str, Any] | None = None,
    min_small_busbw_gbps: float | str | None = None,
) -> dict[str, Any]:
    """Judge the fabric check's NCCL logs: ``{passed, problems, warnings, sweeps, ...}``.

    ``logs``: the log of every sweep by its name (``sparkrack_fabric_check_sweeps``), or one log
    (the all-rails sweep alone). With ``plan_fact`` every rail's serving VF must carry traffic
    and the default floor scales with the rails; ``min_busbw_gbps`` None = that default;
    ``min_small_busbw_gbps`` is one rail's small-message floor. The top-level keys other than
    ``passed``, ``problems``, ``warnings`` and ``sweeps`` describe the all-rails sweep.
    """
    if requested not in TRANSPORTS:
        raise AnsibleFilterError(
            f"fabric gate: requested transport {requested!r} is not roce|socket"
        )
    floor = None if min_busbw_gbps in (None, "") else float(min_busbw_gbps)
    small = None if min_small_busbw_gbps in (None, "") else float(min_small_busbw_gbps)
    transport: Transport = "roce" if requested == "roce" else "socket"
    if not plan_fact:
        if not isinstance(logs, str):
            raise AnsibleFilterError("fabric gate: logs by sweep need the plan (sparkrack_plan)")
        alone = gate(logs, transport, floor, min_small_busbw_gbps=small)
        judged = [(Sweep(ALL_RAILS, (), alone.rails), alone)]
    else:
        sweeps = _guard("fabric gate", lambda: fabric_sweeps(_plan(plan_fact)))
        if isinstance(logs, str):
            sweeps, logs = sweeps[:1], {ALL_RAILS: logs}
        by_name = {str(k): str(v) for k, v in logs.items()}
        judged = gate_sweeps(by_name, sweeps, transport, floor, small)
    facts = [{"name": s.name, "devices": list(s.devices), **_verdict_fact(v)} for s, v in judged]
    return {
        **facts[0],
        "passed": all(f["passed"] for f in facts),
        "problems": [p for f in facts for p in f["problems"]],
        "warnings": [w for f in facts for w in f["warnings"]],
        "sweeps": facts,
    }


# --- serving ----------------------------------------------------------------------------------


def serving_render(
    deployments: Mapping[str, Any],
    plan_fact: Mapping[str, Any],
    hostvars: Any,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """``{{ serving_vars | sparkrack_serving_render(sparkrack_plan, hostvars, settings) }}``

    ``serving_vars`` holds ``serving_deployments``/``serving_profile``/``serving_profile_file``/
    ``serving_spark``; ``sparkrack_plan`` is the address plan preflight computed (read here,
    never recomputed). -> the one render ``sparkrack render`` prints too
    (:func:`sparkrack.serving.deployments.bundle.render_serving`): every deployment validated for
    its Sparks, every manifest validated, and per deployment the facts the serve play needs.
    """
    from dataclasses import replace

    from sparkrack.inputs.inventory import CONTROL_PLANE_GROUP
    from sparkrack.serving import context_from_vars
    from sparkrack.serving.context import api_server
    from sparkrack.serving.deployments.bundle import from_vars, render_serving

    def run() -> dict[str, Any]:
        # The roce role's discovered index (hostvar roce_gid_index) stays out of the pods: each
        # rank reads its own at start (sparkrack.fabric.gidtable).
        control_plane = [
            str(h) for h in hostvars if CONTROL_PLANE_GROUP in hostvars[h].get("group_names", [])
        ]
        ctx = replace(
            context_from_vars(_plan(plan_fact), dict(settings)),
            api_server=api_server(sorted(control_plane), hostvars),
        )
        found = from_vars(dict(deployments), ctx, "inventory serving_deployments")
        return render_serving(found, source="serving")

    return _guard("serving", run)


def api_dry_run_objects(
    manifests: list[dict[str, Any]], replaced: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """``{{ manifests | sparkrack_dry_run_objects(stale) }}``: objects + template pods to dry-run."""
    return dry_run_objects(manifests, replaced or [])


def api_refusals(result: Mapping[str, Any], definitions: list[dict[str, Any]]) -> list[str]:
    """``{{ dry_run | sparkrack_api_refusals(definitions) }}``: ``Kind/ns/name: reason`` lines."""
    return refusals(definitions, result)


def jobs_plan(rendered: list[dict[str, Any]], live: list[dict[str, Any]]) -> dict[str, Any]:
    """``{{ objects | sparkrack_job_plan(live_jobs) }}``: stamped objects, Jobs to delete first."""
    return job_plan(rendered, live)


def wait_verdict(
    objects: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]], name: str = ""
) -> dict[str, str]:
    """``{{ resources | sparkrack_wait_verdict(pods, name) }}``: done, waiting or failed
    (:mod:`sparkrack.k8s.waits`), with the object and the reason."""
    return _guard("wait", lambda: waits.verdict(list(objects or []), list(pods or []), name))


def serving_stale(
    rendered: list[dict[str, Any]],
    live: list[Mapping[str, Any]],
    applied_first: list[dict[str, Any]] | None = None,
    secrets: list[Mapping[str, Any]] | None = None,
) -> list[Any]:
    """``{{ manifests | sparkrack_stale_serving(found.results, fetch, secrets) }}`` with
    ``found`` the sparkrack_k8s_labelled of kinds and ``secrets`` the serving Secrets, listed by a task
    whose result is hidden: the serving objects to remove, in removal order (names only)."""
    by_kind = {str(r["item"]): list(r.get("resources") or []) for r in live}
    by_kind["Secret"] = [{"metadata": s.get("metadata") or {}} for s in secrets or []]
    return stale_serving(rendered, by_kind, applied_first or [])


def watchdog_stale(
    live: list[Mapping[str, Any]],
    deployments: list[str],
    guard: bool,
    namespaces: list[str] | None,
    evidence: bool,
) -> list[Any]:
    """``{{ found.results | sparkrack_stale_watchdogs(keep, guard, namespaces, evidence) }}``
    with ``found`` the sparkrack_k8s_labelled of the watchdog's kinds in every namespace: the
    watchdogs of deployments not in ``keep``, unless ``guard`` the memory guard's objects, and
    unless ``evidence`` the evidence volume, of ``namespaces`` only."""
    by_kind = {str(r["item"]): list(r.get("resources") or []) for r in live}
    return stale_watchdogs(
        by_kind, deployments, bool(guard), namespaces or (), evidence=bool(evidence)
    )


def fetch_secret_data(password: str) -> dict[str, str]:
    """``{{ password | sparkrack_fetch_secret_data }}``: the rsync Secret's keys, one password."""
    from sparkrack.serving.switch.plan import rsync_secret_data

    return rsync_secret_data(str(password))


def head_manifest(
    deployment: Mapping[str, Any], pods: list[Mapping[str, Any]], namespace: str
) -> dict[str, Any]:
    """``{{ deployment | sparkrack_head_manifest(fetch_pods, namespace) }}``: the manifest
    sha256 the head's download reported, as the ConfigMap the receivers mount (state done,
    waiting or failed, with the reason)."""
    from sparkrack.serving.switch.digest import head_manifest as read

    return _guard("manifest", lambda: read(deployment, list(pods or []), str(namespace)))


def switch_timeline(
    deployments: list[Mapping[str, Any]],
    jobs: list[Mapping[str, Any]],
    pods: list[Mapping[str, Any]],
    prepull: list[str] | None = None,
    started: str | None = None,
) -> list[str]:
    """``{{ serving_rendered.deployments | sparkrack_switch_timeline(jobs, pods, prepull_names,
    started) }}`` -> the lines of every deployment's switch timeline (measured vs predicted)."""
    from sparkrack.serving.switch.timeline import timelines

    return [
        printable(line)
        for line in timelines(deployments, jobs or [], pods or [], prepull or [], started)
    ]


def nccl_problems(log: Any, requested: str) -> list[str]:
    """``{{ head_log | sparkrack_nccl_problems('roce') }}`` -> problem lines (empty = transport ok)."""
    problems = check_transport(_text(log), cast(Transport, requested), source="head NCCL log")
    return [str(p) for p in problems]


def diagnose_lines(log: Any) -> list[str]:
    """``{{ rank_log | sparkrack_diagnose }}`` -> one text block per known failure signature."""
    from sparkrack.diagnose.signatures import diagnose

    return [printable(str(f), keep_newlines=True) for f in diagnose(_text(log))]


def redact_lines(log: Any) -> list[str]:
    """``{{ rank_log | sparkrack_redact }}`` -> the log's lines, printable, keys redacted
    (:func:`sparkrack.diagnose.redact.redact`: SGLang logs its API keys at start-up)."""
    from sparkrack.diagnose.redact import redact

    return [printable(line) for line in redact(_text(log)).splitlines()]


def image_archive(path: str) -> dict[str, str]:
    """The sparkrack image archive's name, manifest digest and reference (every blob checked)."""
    from sparkrack.serving.image_archive import read

    found = _guard("image archive", lambda: read(path))
    return {"name": found.name, "digest": found.digest, "reference": found.reference}


NODE_SCRIPTS: Final = ("memsettle.py", "gidtable.py")
"""The in-pod scripts a role also runs on the node itself."""


def node_script(name: str) -> str:
    """``{{ 'memsettle.py' | sparkrack_node_script }}`` -> the script's text, exactly as the
    pods get it (one file, one owner)."""
    from pathlib import Path

    from sparkrack.fabric import gidtable
    from sparkrack.serving import scripts

    if name not in NODE_SCRIPTS:
        raise AnsibleFilterError(f"sparkrack_node_script: {name!r} is not one of {NODE_SCRIPTS}")
    if name == "gidtable.py":
        return Path(gidtable.__file__).read_text(encoding="utf-8")
    return scripts.text(name)


def converge_flush(
    read: Mapping[str, Any] | None,
    node: str,
    kubeconfig_exists: bool,
    flush_on_serving: bool = False,
    check_mode: bool = False,
) -> dict[str, Any]:
    """``{{ spark_base_engine_pods | sparkrack_converge_flush(inventory_hostname, exists, switch,
    ansible_check_mode) }}`` -> ``{flush, why}``: whether the converge's settle step may drop this
    Spark's page cache."""
    from sparkrack.node.settle import converge_flush as decide

    decision = _guard(
        "settle step",
        lambda: decide(
            str(node), read, bool(kubeconfig_exists), bool(flush_on_serving), bool(check_mode)
        ),
    )
    return {"flush": decision.flush, "why": decision.why}


FILTERS: Final[dict[str, Callable[..., Any]]] = {
    "sparkrack_contract": contract,
    "sparkrack_node_script": node_script,
    "sparkrack_converge_flush": converge_flush,
    "sparkrack_image_archive": image_archive,
    "sparkrack_fabric_plan": fabric_plan,
    "sparkrack_inventory_check": inventory_check,
    "sparkrack_netplan": netplan,
    "sparkrack_fabric_interfaces": fabric_interface_names,
    "sparkrack_gid_standin": gid_standin,
    "sparkrack_driver_check": driver_check,
    "sparkrack_rdma_rounds": rdma_rounds,
    "sparkrack_rdma_rail": rdma_rail,
    "sparkrack_k3s_server_url": k3s_server_url,
    "sparkrack_k3s_server_config": k3s_server_config,
    "sparkrack_k3s_pod_security_config": k3s_pod_security_config,
    "sparkrack_k3s_agent_config": k3s_agent_config,
    "sparkrack_k3s_release": k3s_release,
    "sparkrack_sha256_from_sums": sha256_from_sums,
    "sparkrack_kubeconfig_rewrite": kubeconfig_rewrite,
    "sparkrack_k3s_node": k3s_node,
    "sparkrack_cluster_manifests": cluster_manifests,
    "sparkrack_fabric_gate": fabric_gate,
    "sparkrack_fabric_check_sweeps": fabric_check_sweeps,
    "sparkrack_serving_render": serving_render,
    "sparkrack_fetch_secret_data": fetch_secret_data,
    "sparkrack_dry_run_objects": api_dry_run_objects,
    "sparkrack_api_refusals": api_refusals,
    "sparkrack_job_plan": jobs_plan,
    "sparkrack_wait_verdict": wait_verdict,
    "sparkrack_stale_serving": serving_stale,
    "sparkrack_stale_watchdogs": watchdog_stale,
    "sparkrack_switch_timeline": switch_timeline,
    "sparkrack_head_manifest": head_manifest,
    "sparkrack_nccl_problems": nccl_problems,
    "sparkrack_diagnose": diagnose_lines,
    "sparkrack_redact": redact_lines,
}


class FilterModule:
    """What Ansible's filter loader asks for."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return dict(FILTERS)
