"""K3s ``/etc/rancher/k3s/config.yaml`` as data, and the kubeconfig rewrite.

The roles write these dicts with ``to_nice_yaml``; nothing about the node (IP, labels, taints,
server URL) is computed in a template. Agents get their node IP and Spark labels from the address
plan; the join token never appears here (it sits in a root-only ``token-file``).

Hardening (K3s' hardening guide): the server encrypts Secrets at rest, reads the Pod Security
admission configuration :func:`pod_security_config` (``restricted`` unless a namespace says
otherwise), and accepts agents with their own join secret (``agent-token-file``): the agents hold
the agent token, never the server token, which is cluster admin. Agents run the kubelet with
``protect-kernel-defaults``: it refuses to start on a kernel whose settings differ from
:data:`KUBELET_SYSCTLS`, which the spark_base role writes. The server's kernel settings are not
managed by sparkrack (an x86 machine of the owner's), so it does not set the flag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from sparkrack import contract
from sparkrack.contract import CLUSTER_CIDR, K3S_API_PORT, NODE_PORT_RANGE, SERVICE_CIDR
from sparkrack.errors import Problem, SparkrackError
from sparkrack.fabric.addressplan import FabricPlan, NodeInput
from sparkrack.inputs import safeyaml
from sparkrack.k8s.common import (
    LABEL_GPU_PRESENT,
    LABEL_RANK,
    LABEL_ROLE,
    LABEL_SPARK_INDEX,
    ROLE_CONTROL_PLANE,
    ROLE_SPARK,
)
from sparkrack.planner import memory as planner

TOKEN_FILE = contract.K3S_TOKEN_FILE
RULE = "k3s-options"
_TAINT_RE = re.compile(
    r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?(=[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
    r":(NoSchedule|PreferNoSchedule|NoExecute)$"
)
_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
KUBELET_SYSCTLS = contract.KUBELET_SYSCTLS
PSA_EXEMPT_NAMESPACES = ("kube-system",)
"""Namespaces whose pods the default restricted level does not judge: K3s' own system pods and
the add-ons sparkrack puts there (Multus, the NVIDIA device plugin). Every other namespace sets its
own level with labels (the serving namespace: privileged; contract.POD_SECURITY_LEVEL)."""
_IFACE_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,15}$")


@dataclass(frozen=True)
class K3sNodeOptions:
    """What the inventory may set for one node's K3s config (``k3s_server_*``/``k3s_agent_*``)."""

    flannel_iface: str | None = None
    taints: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    # Containerd runtime for pods without a RuntimeClass (agents; "nvidia" from the driver role).
    default_runtime: str | None = None
    # Server only: bundled components to switch off.
    disable: Sequence[str] = ("traefik", "servicelb")


def _check_options(opts: K3sNodeOptions, source: str, prefix: str) -> list[Problem]:
    problems: list[Problem] = []
    if opts.flannel_iface is not None and not _IFACE_RE.match(opts.flannel_iface):
        problems.append(
            Problem(
                source,
                f"{prefix}flannel_iface",
                f"{opts.flannel_iface!r} is not an interface name",
                "name the management NIC as `ip link` shows it, or leave it null",
            )
        )
    if isinstance(opts.taints, str) or not isinstance(opts.taints, Sequence):
        problems.append(
            Problem(
                source, f"{prefix}taints", "must be a list", "e.g. ['dedicated=llm:NoSchedule']"
            )
        )
    else:
        for taint in opts.taints:
            if not isinstance(taint, str) or not _TAINT_RE.match(taint):
                problems.append(
                    Problem(
                        source,
                        f"{prefix}taints",
                        f"{taint!r} is not key[=value]:Effect",
                        "e.g. dedicated=llm:NoSchedule (Effect: NoSchedule|PreferNoSchedule|NoExecute)",
                    )
                )
    if not isinstance(opts.labels, Mapping):
        problems.append(
            Problem(source, f"{prefix}labels", "must be a mapping", "e.g. {zone: rack1}")
        )
    else:
        for key, value in opts.labels.items():
            if (
                not isinstance(key, str)
                or not _LABEL_KEY_RE.match(key)
                or key.startswith("sparkrack.io/")
            ):
                problems.append(
                    Problem(
                        source,
                        f"{prefix}labels.{key}",
                        "is not a valid label key, or is reserved (sparkrack.io/* is set by sparkrack)",
                        "use a Kubernetes label key outside sparkrack.io/",
                    )
                )
            if not isinstance(value, str) or len(value) > 63:
                problems.append(
                    Problem(
                        source,
                        f"{prefix}labels.{key}",
                        "value must be a string of <= 63 chars",
                        "quote it",
                    )
                )
    if opts.default_runtime is not None and not re.match(
        r"^[a-z0-9][-a-z0-9]*$", opts.default_runtime
    ):
        problems.append(
            Problem(
                source,
                f"{prefix}default_runtime",
                f"{opts.default_runtime!r} is not a runtime name",
                "e.g. nvidia",
            )
        )
    return [replace(p, rule=RULE) for p in problems]


# Share of the planner's OS headroom kept as the kubelet's hard memory eviction threshold; the
# rest is system-reserved. Together they are the whole headroom, so the node's allocatable memory
# is the planner's usable memory (capacity - headroom): pods are scheduled against exactly the
# memory the planner budgets, and the kubelet evicts before the OS loses its share.
EVICTION_SHARE = 0.25
# The kubelet drops its default disk thresholds once eviction-hard is given: restate them.
DISK_EVICTION_HARD = (
    "nodefs.available<10%",
    "nodefs.inodesFree<5%",
    "imagefs.available<15%",
    "imagefs.inodesFree<5%",
)


@dataclass(frozen=True)
class MemoryGuard:
    """The kubelet's memory reservation on a Spark, split from the planner's OS headroom (MB)."""

    system_reserved_mb: int
    eviction_hard_mb: int

    def kubelet_args(self) -> list[str]:
        return [
            f"system-reserved=memory={self.system_reserved_mb}M",
            "eviction-hard="
            + ",".join([f"memory.available<{self.eviction_hard_mb}M", *DISK_EVICTION_HARD]),
        ]


def memory_guard(os_headroom_gb: float | None = None) -> MemoryGuard:
    """Reservation and eviction threshold from the OS headroom (default: the planner's)."""
    headroom = planner.DEFAULT_OS_HEADROOM_GB if os_headroom_gb is None else os_headroom_gb
    total_mb = round(headroom * 1000)
    eviction_mb = round(total_mb * EVICTION_SHARE)
    if eviction_mb < 100 or total_mb - eviction_mb <= 0:
        raise SparkrackError(
            Problem(
                "sparkrack/planner/memory.py",
                "DEFAULT_OS_HEADROOM_GB",
                f"{headroom:g} GB leaves no room for a system reservation and an eviction "
                "threshold of at least 100 MB",
                "keep the OS headroom at 1 GB or more",
            )
        )
    return MemoryGuard(total_mb - eviction_mb, eviction_mb)


def _label_list(labels: Mapping[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(labels.items())]


def server_url(control_plane: NodeInput) -> str:
    return f"https://{control_plane.node_ip}:{K3S_API_PORT}"


def server_config(
    control_plane: NodeInput, opts: K3sNodeOptions, source: str = "k3s_server"
) -> dict[str, Any]:
    """config.yaml of the K3s server (x86 control plane, no GPU)."""
    problems = _check_options(opts, source, "k3s_server_")
    if problems:
        raise SparkrackError(problems)
    config: dict[str, Any] = {
        "node-name": control_plane.name,
        "node-ip": control_plane.node_ip,
        "advertise-address": control_plane.node_ip,
        "tls-san": [control_plane.node_ip],
        "write-kubeconfig-mode": "0600",
        "cluster-cidr": CLUSTER_CIDR,
        "service-cidr": SERVICE_CIDR,
        "service-node-port-range": f"{NODE_PORT_RANGE[0]}-{NODE_PORT_RANGE[1]}",
        "disable": list(opts.disable),
        "agent-token-file": contract.K3S_AGENT_SECRET_FILE,
        "secrets-encryption": True,
        "kube-apiserver-arg": [f"admission-control-config-file={contract.K3S_PSA_CONFIG_FILE}"],
        "node-label": _label_list({**opts.labels, LABEL_ROLE: ROLE_CONTROL_PLANE}),
    }
    if opts.flannel_iface:
        config["flannel-iface"] = opts.flannel_iface
    if opts.taints:
        config["node-taint"] = list(opts.taints)
    return config


def agent_config(
    plan: FabricPlan,
    node_name: str,
    control_plane: NodeInput,
    opts: K3sNodeOptions,
    source: str = "k3s_agent",
) -> dict[str, Any]:
    """config.yaml of the K3s agent on Spark ``node_name``: node IP and labels from the plan,
    memory reservation and eviction threshold from the planner's OS headroom."""
    problems = _check_options(opts, source, "k3s_agent_")
    if problems:
        raise SparkrackError(problems)
    node = plan.node(node_name)
    labels = {
        **opts.labels,
        LABEL_ROLE: ROLE_SPARK,
        LABEL_SPARK_INDEX: str(node.spark_index),
        LABEL_RANK: str(node.rank),
        LABEL_GPU_PRESENT: "true",
    }
    config: dict[str, Any] = {
        "server": server_url(control_plane),
        "token-file": TOKEN_FILE,
        "node-name": node.name,
        "node-ip": node.node_ip,
        "node-label": _label_list(labels),
        "kubelet-arg": memory_guard().kubelet_args(),
        "protect-kernel-defaults": True,
    }
    if opts.flannel_iface:
        config["flannel-iface"] = opts.flannel_iface
    if opts.taints:
        config["node-taint"] = list(opts.taints)
    if opts.default_runtime:
        config["default-runtime"] = opts.default_runtime
    return config


OPTION_KEYS = ("flannel_iface", "taints", "labels", "default_runtime", "disable")
"""Each is the role variable ``k3s_server_<key>`` / ``k3s_agent_<key>`` of the inventory."""


def option_problems(raw: Mapping[str, Any], source: str, prefix: str) -> list[Problem]:
    """What the K3s role would refuse in these options (``prefix``: ``k3s_server_`` or
    ``k3s_agent_``), before a node is touched."""
    try:
        return _check_options(options_from(raw), source, prefix)
    except (SparkrackError, TypeError) as exc:
        if isinstance(exc, SparkrackError):
            return [replace(p, rule=RULE) for p in exc.problems]
        return [
            Problem(source, f"{prefix}*", f"cannot be read: {exc}", "see the role's defaults", RULE)
        ]


def pod_security_config(extra_exempt: Sequence[str] = ()) -> dict[str, Any]:
    """The kube-apiserver's Pod Security admission configuration: every level ``restricted`` by
    default (enforce, audit, warn), :data:`PSA_EXEMPT_NAMESPACES` and ``extra_exempt`` exempt."""
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {
                "name": "PodSecurity",
                "configuration": {
                    "apiVersion": "pod-security.admission.config.k8s.io/v1",
                    "kind": "PodSecurityConfiguration",
                    "defaults": {
                        mode: level
                        for m in ("enforce", "audit", "warn")
                        for mode, level in ((m, "restricted"), (f"{m}-version", "latest"))
                    },
                    "exemptions": {
                        "usernames": [],
                        "runtimeClasses": [],
                        "namespaces": sorted({*PSA_EXEMPT_NAMESPACES, *extra_exempt}),
                    },
                },
            }
        ],
    }


def options_from(raw: Mapping[str, Any] | None) -> K3sNodeOptions:
    """Options from a plain mapping (the role passes its variables); None values = defaults."""
    raw = {k: v for k, v in (raw or {}).items() if v is not None}
    known = set(OPTION_KEYS)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SparkrackError(
            Problem(
                "k3s options",
                ", ".join(unknown),
                "unknown option",
                f"known: {', '.join(sorted(known))}",
            )
        )
    if raw.get("flannel_iface") == "":
        raw.pop("flannel_iface")
    if raw.get("default_runtime") == "":
        raw.pop("default_runtime")
    return K3sNodeOptions(**raw)


def rewrite_kubeconfig(text: str, server: str, name: str = "sparkrack") -> str:
    """The K3s admin kubeconfig with ``server`` pointing at the control plane (not 127.0.0.1).

    Cluster, user and context are renamed to ``name`` so it merges cleanly with other configs.
    """
    data = safeyaml.loads(text, "/etc/rancher/k3s/k3s.yaml")
    if not isinstance(data, dict) or not data.get("clusters") or not data.get("users"):
        raise SparkrackError(
            Problem(
                "/etc/rancher/k3s/k3s.yaml",
                "clusters/users",
                "is not a kubeconfig with one cluster and one user",
                "check that K3s wrote its admin kubeconfig",
            )
        )
    cluster = data["clusters"][0]
    user = data["users"][0]
    cluster["name"] = name
    cluster.setdefault("cluster", {})["server"] = server
    user["name"] = name
    data["clusters"] = [cluster]
    data["users"] = [user]
    data["contexts"] = [{"name": name, "context": {"cluster": name, "user": name}}]
    data["current-context"] = name
    dumped: str = yaml.safe_dump(data, sort_keys=False)
    return dumped


_VERSION_RE = re.compile(r"^v\d+\.\d+\.\d+(-rc\d+)?\+k3s\d+$")
K3S_RELEASES = "https://github.com/k3s-io/k3s/releases/download"
K3S_RAW = "https://raw.githubusercontent.com/k3s-io/k3s"
_ARCH = {"x86_64": ("amd64", "k3s"), "aarch64": ("arm64", "k3s-arm64")}


def release_assets(version: str, machine: str) -> dict[str, str]:
    """Names and URLs of the pinned K3s release for ``machine`` (``ansible_architecture``).

    The ``+`` of the version is percent-encoded in URLs (GitHub needs ``v1.35.3%2Bk3s1``).
    """
    if not isinstance(version, str) or not _VERSION_RE.match(version):
        raise SparkrackError(
            Problem(
                "group_vars",
                "k3s_version",
                f"{version!r} is not a K3s release tag",
                "pin a release like v1.35.3+k3s1",
            )
        )
    if machine not in _ARCH:
        raise SparkrackError(
            Problem(
                "facts",
                "ansible_architecture",
                f"{machine!r} is not supported by sparkrack's K3s roles",
                "run the control plane on x86_64 and the agents on aarch64 (DGX Spark)",
            )
        )
    arch, binary = _ARCH[machine]
    tag = version.replace("+", "%2B")
    base = f"{K3S_RELEASES}/{tag}"
    return {
        "arch": arch,
        "binary": binary,
        "binary_url": f"{base}/{binary}",
        "sha256sum_file": f"sha256sum-{arch}.txt",
        "sha256sum_url": f"{base}/sha256sum-{arch}.txt",
        "images": f"k3s-airgap-images-{arch}.tar.zst",
        "images_url": f"{base}/k3s-airgap-images-{arch}.tar.zst",
        "install_script_url": f"{K3S_RAW}/{tag}/install.sh",
    }


def sha256_from_sums(text: str, filename: str, source: str = "sha256sum file") -> str:
    """The sha256 listed for ``filename`` in a ``sha256sum``-format file (``<hash>  <name>``)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == filename:
            digest = parts[0].lower()
            if re.fullmatch(r"[0-9a-f]{64}", digest):
                return digest
    raise SparkrackError(
        Problem(
            source,
            filename,
            "has no sha256 line in the release checksum file",
            "use the sha256sum-<arch>.txt of the same K3s release as the binary",
        )
    )
