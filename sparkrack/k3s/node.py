"""The Node object a K3s node's kubelet registers, computed from the rendered config.yaml.

On real hardware the kubelet registers itself. In the lab (no K3s binary) the K3s roles register
this object for KWOK, which then reports the node's status and runs its pods' lifecycle: the
name, labels and taints are the ones the rendered config would give, the capacity is what the
hardware reports, and allocatable is capacity minus the kubelet reservations of that config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sparkrack.errors import Problem, SparkrackError
from sparkrack.planner import memory as planner

SPARK_CAPACITY: dict[str, str] = {
    # NVIDIA DGX Spark: a 20-core Arm CPU (10 Cortex-X925 + 10 Cortex-A725) and one GB10 GPU in
    # 128 GB of unified memory (src:super-guide). nvidia.com/gpu is what the device plugin advertises.
    "cpu": "20",
    "memory": str(round(planner.GB10_MEMORY_GB * planner.GB)),
    "pods": "110",
    "nvidia.com/gpu": "1",
}
"""What a DGX Spark's kubelet and the NVIDIA device plugin report."""
KUBELET_MAX_PODS = "110"

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_QUANTITY = re.compile(r"^(\d+)([KMGT]i?|)$")
_FACTOR = {
    "": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
SOURCE = "K3s node registration"
_NODE_INFO_FROM_THE_MACHINE = (
    "bootID",
    "containerRuntimeVersion",
    "kernelVersion",
    "kubeProxyVersion",
    "kubeletVersion",
    "machineID",
    "osImage",
    "systemUUID",
)


def _bytes(quantity: str, key: str) -> int:
    match = _QUANTITY.match(quantity.strip())
    if not match:
        raise SparkrackError(
            Problem(SOURCE, key, f"{quantity!r} is not a memory quantity", "e.g. 6000M or 8Gi")
        )
    return int(match.group(1)) * _FACTOR[match.group(2)]


def reserved_memory(kubelet_args: list[str]) -> int:
    """Bytes the kubelet keeps from pods: system-reserved and kube-reserved memory plus the
    hard eviction threshold on ``memory.available``."""
    total = 0
    for arg in kubelet_args:
        key, _, value = arg.partition("=")
        if key in ("system-reserved", "kube-reserved"):
            for item in value.split(","):
                name, _, amount = item.partition("=")
                if name == "memory":
                    total += _bytes(amount, f"kubelet-arg {key}")
        elif key == "eviction-hard":
            for item in value.split(","):
                if item.startswith("memory.available<"):
                    total += _bytes(item.split("<", 1)[1], "kubelet-arg eviction-hard")
    return total


def _taint(text: str) -> dict[str, str]:
    spec, _, effect = text.rpartition(":")
    key, _, value = spec.partition("=")
    taint = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint


def registered_node(
    config: Mapping[str, Any],
    machine: str,
    capacity: Mapping[str, str] | None = None,
    server: bool = False,
) -> dict[str, Any]:
    """The Node the kubelet of ``config`` (a rendered K3s config.yaml) registers.

    ``machine`` is ``ansible_architecture``; ``capacity`` what the hardware reports (default: a
    DGX Spark's). A server carries K3s' control-plane role label, as K3s sets it.
    """
    name = str(config.get("node-name") or "")
    if not name or machine not in _ARCH:
        raise SparkrackError(
            Problem(
                SOURCE,
                "node-name" if not name else "ansible_architecture",
                f"cannot register a node from node-name={name!r} on {machine!r}",
                "render the config with sparkrack.k3s.config (node-name set) on x86_64 or aarch64",
            )
        )
    arch = _ARCH[machine]
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "node.kubernetes.io/instance-type": "k3s",
    }
    if server:
        labels["node-role.kubernetes.io/control-plane"] = "true"
    for item in config.get("node-label", []):
        key, _, value = str(item).partition("=")
        labels[key] = value
    reported = dict(capacity or SPARK_CAPACITY)
    reported.setdefault("pods", KUBELET_MAX_PODS)
    allocatable = dict(reported)
    if "memory" in reported:
        left = _bytes(reported["memory"], "capacity.memory") - reserved_memory(
            [str(a) for a in config.get("kubelet-arg", [])]
        )
        allocatable["memory"] = str(max(left, 0))
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": reported,
            "allocatable": allocatable,
            "addresses": [
                {"type": "InternalIP", "address": str(config.get("node-ip", ""))},
                {"type": "Hostname", "address": name},
            ],
            # What the kubelet reads from the machine; empty until one runs (KWOK keeps them).
            "nodeInfo": {
                "architecture": arch,
                "operatingSystem": "linux",
                **dict.fromkeys(_NODE_INFO_FROM_THE_MACHINE, ""),
            },
        },
    }
    taints = [_taint(str(t)) for t in config.get("node-taint", [])]
    if taints:
        node["spec"]["taints"] = taints
    return node
