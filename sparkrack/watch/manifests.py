"""The watchdog as a cluster component: per serving deployment, a one-replica Deployment running
``sparkrack watch`` on the control-plane node, with a Role that grants exactly what its actions
need.

Why a Deployment and not a sidecar of rank 0: the watchdog deletes every rank pod of a stalled
group; as a sidecar it would kill itself in the act, lose its in-flight evidence and share the
fate of a wedged pod. On the control-plane node it needs no GPU and none of a Spark's unified
memory, outlives every restart it makes, and keeps its state (restart times) in annotations of
the deployment's rank-0 StatefulSet anyway. Evidence goes to a hostPath on that node, bounded by
the bundle format's rotation and size cap (:mod:`sparkrack.diagnose.bundle`).

The image must carry sparkrack (``pip install sparkrack``: aiohttp and the Kubernetes client);
no image is named here, the inventory gives one pinned by digest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sparkrack import contract
from sparkrack.planner.memory import DEFAULT_OS_HEADROOM_GB
from sparkrack.watch.memguard import DEFAULT_FULL_AVG10

COMPONENT = "watchdog"
METRICS_PORT = 9464
EVIDENCE_MOUNT = "/var/lib/sparkrack/evidence"


@dataclass(frozen=True)
class WatchdogSettings:
    image: str
    stall_s: float = 10.0
    interval_s: float = 10.0
    max_restarts: int = 3
    restart_window_s: float = 1800.0
    restart_grace_s: float = 600.0
    evidence_dir: str = EVIDENCE_MOUNT
    """Host directory of the evidence bundles on the control-plane node."""
    canary: bool = False
    """Probe with the answer canary (``watch --probe canary``): wrong answers are not healthy."""


def name(deployment: str) -> str:
    return f"{contract.OBJECT_PREFIX}-{deployment}-{COMPONENT}"


def rules() -> list[dict[str, Any]]:
    """What the watchdog's actions call, nothing more (no Secrets, no writes beyond these)."""
    return [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "patch"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["list", "patch"]},
    ]


def account(meta: dict[str, Any], granted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ServiceAccount, a Role granting ``granted`` and their RoleBinding, all named and
    labelled by ``meta``."""
    obj, namespace = meta["name"], meta["namespace"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": dict(meta),
            "rules": granted,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": obj},
            "subjects": [{"kind": "ServiceAccount", "name": obj, "namespace": namespace}],
        },
    ]


def manifests(
    deployment: str, namespace: str, url: str, alias: str, settings: WatchdogSettings
) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding and the Deployment of one serving deployment's
    watchdog (``url``: the deployment's OpenAI-API Service)."""
    obj = name(deployment)
    labels = {
        **contract.PART_OF,
        contract.LABEL_COMPONENT: COMPONENT,
        contract.LABEL_DEPLOYMENT: deployment,
    }
    meta = {"name": obj, "namespace": namespace, "labels": dict(labels)}
    s = settings
    args = [
        "watch",
        "--url",
        url,
        "--name",
        deployment,
        "--deployment",
        deployment,
        "--namespace",
        namespace,
        "--alias",
        alias,
        "--stall-after",
        f"{s.stall_s:g}",
        "--interval",
        f"{s.interval_s:g}",
        "--max-restarts",
        str(s.max_restarts),
        "--restart-window",
        f"{s.restart_window_s:g}",
        "--restart-grace",
        f"{s.restart_grace_s:g}",
        "--evidence",
        EVIDENCE_MOUNT,
        "--metrics-host",
        "0.0.0.0",
        "--metrics-port",
        str(METRICS_PORT),
    ]
    if s.canary:
        args += ["--probe", "canary"]
    pod = {
        "serviceAccountName": obj,
        "nodeSelector": {contract.LABEL_ROLE: contract.ROLE_CONTROL_PLANE},
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
        "containers": [
            {
                "name": COMPONENT,
                "image": s.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sparkrack"],
                "args": args,
                "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
                "resources": {
                    "requests": {"cpu": "10m", "memory": "64Mi"},
                    "limits": {"memory": "256Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "evidence", "mountPath": EVIDENCE_MOUNT}],
            }
        ],
        "volumes": [
            {
                "name": "evidence",
                # Must exist, owned by the pod's user: created by the play that deploys this.
                "hostPath": {"path": s.evidence_dir, "type": "Directory"},
            }
        ],
    }
    return [
        *account(meta, rules()),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": dict(meta),
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": dict(labels)},
                "template": {
                    "metadata": {
                        "labels": dict(labels),
                        "annotations": {
                            contract.PROMETHEUS_SCRAPE_ANNOTATION: "true",
                            contract.PROMETHEUS_PATH_ANNOTATION: "/metrics",
                            contract.PROMETHEUS_PORT_ANNOTATION: str(METRICS_PORT),
                        },
                    },
                    "spec": pod,
                },
            },
        },
    ]


# --- the memory guard: one pod per Spark --------------------------------------------------------

MEMGUARD: Final = "memguard"
HOST_PROC: Final = "/host/proc"
HOST_CGROUP: Final = "/host/sys/fs/cgroup"


@dataclass(frozen=True)
class MemguardSettings:
    image: str
    floor: str = f"{DEFAULT_OS_HEADROOM_GB:g}G"
    """MemAvailable below which the guard acts (the planner's OS headroom by default)."""
    psi_full: float = DEFAULT_FULL_AVG10
    interval_s: float = 2.0
    grace_s: int = 10


def memguard_rules() -> list[dict[str, Any]]:
    """List the serving pods, delete one, record why: nothing more."""
    return [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]


def memguard_manifests(namespace: str, settings: MemguardSettings) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding and the DaemonSet of the memory guard: one pod on every
    Spark, reading the host's /proc and cgroup tree read-only, acting on ``namespace``'s pods.

    A DaemonSet and not a sidecar: the guard must outlive the pod it stops and watch a Spark
    with no engine on it yet. Requests equal to limits (Guaranteed QoS) put it last in the
    kernel OOM killer's order, after the engine pods."""
    obj = f"{contract.OBJECT_PREFIX}-{MEMGUARD}"
    labels = {**contract.PART_OF, contract.LABEL_COMPONENT: MEMGUARD}
    meta = {"name": obj, "namespace": namespace, "labels": dict(labels)}
    s = settings
    args = [
        "memguard",
        "--node",
        "$(NODE_NAME)",
        "--namespace",
        namespace,
        "--proc",
        HOST_PROC,
        "--cgroup",
        HOST_CGROUP,
        "--floor",
        s.floor,
        "--psi-full",
        f"{s.psi_full:g}",
        "--interval",
        f"{s.interval_s:g}",
        "--grace",
        str(s.grace_s),
    ]
    resources = {"cpu": "20m", "memory": "96Mi"}
    pod = {
        "serviceAccountName": obj,
        "nodeSelector": {contract.LABEL_ROLE: contract.ROLE_SPARK},
        "tolerations": [{"operator": "Exists"}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
        "containers": [
            {
                "name": MEMGUARD,
                "image": s.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sparkrack"],
                "args": args,
                "env": [
                    {
                        "name": "NODE_NAME",
                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                    }
                ],
                "resources": {"requests": dict(resources), "limits": dict(resources)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "proc", "mountPath": HOST_PROC, "readOnly": True},
                    {"name": "cgroup", "mountPath": HOST_CGROUP, "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "proc", "hostPath": {"path": "/proc", "type": "Directory"}},
            {"name": "cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}},
        ],
    }
    return [
        *account(meta, memguard_rules()),
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": dict(meta),
            "spec": {
                "selector": {"matchLabels": dict(labels)},
                "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
            },
        },
    ]
