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
from typing import Any

from sparkrack import contract

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
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": dict(meta),
            "rules": rules(),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": obj},
            "subjects": [{"kind": "ServiceAccount", "name": obj, "namespace": namespace}],
        },
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
