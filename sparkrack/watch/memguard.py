"""The memory guard: one per Spark, it stops the largest engine pod before the host wedges.

A GB10's 128 GB are shared by the CPU and the GPU; when they run out the host stops answering
and leaves nothing to read. Memory pressure (PSI, ``/proc/pressure/memory``) rises before that:
``full`` is the share of time every task stalled on memory. The guard reads it and ``MemFree``
(``/proc/meminfo``, through the settle step's reader ``memsettle.parse_meminfo``), not
``MemAvailable``: the page cache that ``MemAvailable`` counts is not memory the NVIDIA allocator
can take back in time (src:gb10-memavailable-bug). Below the floor — less free than
:attr:`Floor.free_bytes` (the planner's OS headroom by default) or ``full avg10`` at
:attr:`Floor.full_avg10` percent or more — it deletes the engine pod using the most memory on
its node, and records why in an Event on that pod. Engine pods are those
:data:`sparkrack.contract.ENGINE_SELECTOR` selects (the serving ranks); a fabric-check pod carries
a rank label too, but not the serving component.

:func:`decide` is pure (the tests feed it real-format ``/proc`` files); :func:`pod_usage` reads
each pod's ``memory.current`` from the node's cgroup v2 tree; :class:`Guard` makes the API
calls. What a pod uses is its memory cgroup's charge when a cgroup tree is given and the pod's
cgroup is found there; else the rank's planned unified memory, which the render writes on every
rank pod; else its containers' memory requests. The guard's DaemonSet mounts no cgroup tree (a
pod of the agents' namespace may mount no host path), so in the cluster it ranks by the plan:
an engine's CUDA pool, most of what it holds, is allocated up front at the planned size, and
whether the GB10 charges it to the pod's memory cgroup at all is not verified.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrack import contract
from sparkrack.inputs.forms import memory_bytes
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.planner.memory import DEFAULT_OS_HEADROOM_GB, GB
from sparkrack.serving.scripts import memsettle

DEFAULT_FULL_AVG10 = float(SERVING_DEFAULTS["serving_memguard_psi_full"])
"""PSI ``full`` avg10 (percent) at which the guard acts (``serving_memguard_psi_full``)."""
EVENT_REASON = "SparkrackMemoryGuard"


@dataclass(frozen=True)
class Pressure:
    """What the node's /proc says now."""

    some_avg10: float
    full_avg10: float
    free_bytes: float
    """``MemFree``: what the guard decides on."""
    available_bytes: float
    """``MemAvailable``: shown in the evidence, never decided on."""
    total_bytes: float


@dataclass(frozen=True)
class Floor:
    free_bytes: float = DEFAULT_OS_HEADROOM_GB * GB
    """Act when MemFree is below this (default: the planner's OS headroom)."""
    full_avg10: float = DEFAULT_FULL_AVG10
    """Act when PSI full avg10 reaches this percentage."""


@dataclass(frozen=True)
class PodMemory:
    name: str
    namespace: str
    uid: str
    bytes: float
    source: str
    """``cgroup`` (memory.current), ``plan`` (the rank's planned unified memory) or
    ``requests``."""


@dataclass
class Decision:
    stop: PodMemory | None
    reasons: list[str] = field(default_factory=list)
    """Why the node is below its floor (empty: it is not)."""

    def message(self, pressure: Pressure) -> str:
        """The evidence, one line: what was read, what crossed the floor, what was stopped."""
        read = (
            f"MemFree {pressure.free_bytes / GB:.1f} GB of {pressure.total_bytes / GB:.1f} GB "
            f"(MemAvailable {pressure.available_bytes / GB:.1f} GB), PSI some avg10 {pressure.some_avg10:.2f}%, "
            f"full avg10 {pressure.full_avg10:.2f}%"
        )
        if not self.reasons:
            return f"above the floor: {read}"
        why = "; ".join(self.reasons)
        if self.stop is None:
            return f"below the floor ({why}) but no engine pod on this node: {read}"
        return (
            f"stopped {self.stop.namespace}/{self.stop.name}, the largest engine pod on this "
            f"node ({self.stop.bytes / GB:.1f} GB, from its {self.stop.source}): {why}; {read}"
        )


def parse_psi(text: str) -> tuple[float, float]:
    """(some avg10, full avg10) of ``/proc/pressure/memory``; ValueError when it is not one."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"(some|full)\s+avg10=([0-9.]+)\s", line)
        if m:
            found[m.group(1)] = float(m.group(2))
    if "some" not in found:
        raise ValueError("no 'some avg10=' line: not /proc/pressure/memory")
    return found["some"], found.get("full", 0.0)


def read_pressure(proc: Path) -> Pressure:
    some, full = parse_psi((proc / "pressure" / "memory").read_text())
    mem = memsettle.parse_meminfo((proc / "meminfo").read_text())
    return Pressure(some, full, mem.free, mem.available, mem.total)


def below(pressure: Pressure, floor: Floor) -> list[str]:
    """Why the node is below its floor (empty: it is not)."""
    reasons = []
    if pressure.free_bytes < floor.free_bytes:
        reasons.append(
            f"MemFree {pressure.free_bytes / GB:.1f} GB < floor {floor.free_bytes / GB:.1f} GB"
        )
    if pressure.full_avg10 >= floor.full_avg10:
        reasons.append(f"PSI full avg10 {pressure.full_avg10:.2f}% >= {floor.full_avg10:g}%")
    return reasons


def decide(pressure: Pressure, floor: Floor, pods: list[PodMemory]) -> Decision:
    """Below the floor: stop the pod using the most memory (ties: by name, so the choice is
    the same every time); above it: nothing."""
    reasons = below(pressure, floor)
    if not reasons or not pods:
        return Decision(None, reasons)
    return Decision(max(pods, key=lambda p: (p.bytes, p.name)), reasons)


def pod_usage(cgroup_root: Path, uids: list[str]) -> dict[str, float]:
    """uid -> bytes charged to the pod's memory cgroup (``memory.current``), for the pods whose
    cgroup is found under ``cgroup_root/kubepods*`` (systemd: ``..-pod<uid with _>.slice``,
    cgroupfs: ``pod<uid>``)."""
    wanted = {uid.replace("-", "_"): uid for uid in uids} | {uid: uid for uid in uids}
    found: dict[str, float] = {}
    for top in sorted(cgroup_root.glob("kubepods*")):
        for path in top.rglob("memory.current"):
            m = re.search(r"pod([0-9a-f_-]{36})(?:\.slice)?$", path.parent.name)
            if m and m.group(1) in wanted:
                try:
                    found[wanted[m.group(1)]] = float(path.read_text().strip())
                except (OSError, ValueError):
                    continue
    return found


def planned_bytes(pod: Any) -> float | None:
    """The rank's planned unified memory (:data:`sparkrack.contract.PLANNED_MEMORY_ANNOTATION`),
    None when the pod carries no readable figure."""
    text = ((pod.metadata.annotations or {}) if pod.metadata else {}).get(
        contract.PLANNED_MEMORY_ANNOTATION, ""
    )
    return float(text) if text.isdigit() and len(text) <= 15 else None


def requested_bytes(pod: Any) -> float:
    total = 0.0
    for c in pod.spec.containers or []:
        requests = (c.resources.requests if c.resources else None) or {}
        size = memory_bytes(str(requests.get("memory", "0")))
        total += size or 0.0
    return total


class Guard:
    """The API side: list the engine pods on the node, delete the chosen one, record why."""

    def __init__(self, api: Any, node: str, namespace: str, grace_s: int = 10) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api)
        self.node = node
        self.namespace = namespace
        """The serving namespace: the only one whose pods the guard lists and stops."""
        self.grace_s = grace_s

    def pods(self, cgroup_root: Path | None = None) -> list[PodMemory]:
        found: list[Any] = self.core.list_namespaced_pod(
            self.namespace,
            label_selector=contract.ENGINE_SELECTOR,
            field_selector=f"spec.nodeName={self.node}",
        ).items
        live = [p for p in found if p.metadata.deletion_timestamp is None]
        usage = pod_usage(cgroup_root, [p.metadata.uid for p in live]) if cgroup_root else {}
        out = []
        for p in live:
            uid = p.metadata.uid
            if uid in usage:
                out.append(
                    PodMemory(p.metadata.name, p.metadata.namespace, uid, usage[uid], "cgroup")
                )
            elif (planned := planned_bytes(p)) is not None:
                out.append(PodMemory(p.metadata.name, p.metadata.namespace, uid, planned, "plan"))
            else:
                out.append(
                    PodMemory(
                        p.metadata.name, p.metadata.namespace, uid, requested_bytes(p), "requests"
                    )
                )
        return out

    def check(self, pressure: Pressure, floor: Floor, cgroup_root: Path | None = None) -> Decision:
        """One look: decide, and when a pod is to be stopped, record why and delete it."""
        pods = self.pods(cgroup_root) if below(pressure, floor) else []
        decision = decide(pressure, floor, pods)
        if decision.stop is not None:
            self._record(decision, pressure)
            self.core.delete_namespaced_pod(
                decision.stop.name, decision.stop.namespace, grace_period_seconds=self.grace_s
            )
        return decision

    def _record(self, decision: Decision, pressure: Pressure) -> None:
        pod = decision.stop
        assert pod is not None
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body: Any = {
            "metadata": {"generateName": f"{pod.name}.memguard-", "namespace": pod.namespace},
            "involvedObject": {
                "kind": "Pod",
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
                "apiVersion": "v1",
            },
            "reason": EVENT_REASON,
            "message": decision.message(pressure)[:1024],
            "type": "Warning",
            "source": {"component": "sparkrack-memguard", "host": self.node},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self.core.create_namespaced_event(pod.namespace, body)
