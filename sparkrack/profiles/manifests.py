"""Profile + address plan -> every Kubernetes object of the serving group.

Objects: Namespace; ConfigMap with the launcher/patch engine (``sparkrack.patches``) and the
group guard; a headless Service and the OpenAI-API Service; one StatefulSet per rank pinned to
its Spark. The HF token is only *referenced* (``secretKeyRef``); the Secret itself is created by
the serve play from a vaulted variable. Labels follow contracts.md so the previous model is
removed by label selector, never from a hand-kept list.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sparkrack.addressplan import NodePlan, pod_network_annotation
from sparkrack.cluster import common
from sparkrack.profiles.profile import Profile
from sparkrack.profiles.render import (
    HF_CACHE_MOUNT,
    ServingContext,
    render_argv,
    render_env,
)

PART_OF = common.PART_OF
COMPONENT = "sparkrack.io/component"
PROFILE = "sparkrack.io/profile"
RANK = common.LABEL_RANK
SPARK_INDEX = common.LABEL_SPARK_INDEX
LAUNCHER_MOUNT = "/opt/sparkrack"
GUARD_FILE = "group_guard.py"
SMOKE_FILE = "smoke_chat.py"
HF_TOKEN_KEY = "token"
PROBE_PERIOD = 10


def slug(name: str) -> str:
    """Profile name -> DNS-1123 label fragment (``qwen3.5-397b`` -> ``qwen3-5-397b``)."""
    text = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return text[:40].rstrip("-") or "profile"


def serving_labels(profile: Profile) -> dict[str, str]:
    return {**PART_OF, COMPONENT: "serving", PROFILE: profile.name[:63]}


def serving_selector(profile: Profile | None = None) -> str:
    """Label selector of the serving objects (of one profile, or of all profiles)."""
    base = f"{COMPONENT}=serving"
    return f"{base},{PROFILE}={profile.name}" if profile else base


def names(profile: Profile) -> dict[str, str]:
    s = slug(profile.name)
    return {
        "headless": f"sparkrack-{s}",
        "api": "sparkrack-openai",
        "launcher": f"sparkrack-{s}-launcher",
    }


def statefulset_name(profile: Profile, rank: int) -> str:
    return f"sparkrack-{slug(profile.name)}-r{rank}"


def node_selector(node: NodePlan) -> dict[str, str]:
    """Pin a pod to its Spark twice: the K3s node name and the spark-index label the K3s roles
    set from the same address plan. A cluster where the two disagree leaves the pod Pending
    instead of running a rank on the wrong Spark (with another Spark's VF address)."""
    return {common.HOSTNAME_LABEL: str(node.name), common.LABEL_SPARK_INDEX: str(node.spark_index)}


def _meta(name: str, ns: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": ns, "labels": dict(labels)}


def launcher_files() -> dict[str, str]:
    """ConfigMap contents: the patch engine + launcher (patches team) and the group guard."""
    from sparkrack.patches import configmap_files

    files = dict(configmap_files())
    for name in (GUARD_FILE, SMOKE_FILE):
        if name in files:  # pragma: no cover - the patch engine must not ship these names
            raise ValueError(f"{name} is already in sparkrack.patches.configmap_files()")
        files[name] = (Path(__file__).parent / name).read_text()
    return files


def _probes(profile: Profile, ctx: ServingContext, rank: int) -> dict[str, Any]:
    startup_failures = max(1, ctx.startup_timeout // PROBE_PERIOD)
    live_period = 30
    live_failures = max(2, ctx.liveness_timeout // live_period)
    if rank == 0:
        return {
            # Weight load + CUDA graph capture: seed 002 measured ~490 s for Ultra's weights alone.
            "startupProbe": {
                "httpGet": {"path": "/health", "port": "http"},
                "periodSeconds": PROBE_PERIOD,
                "timeoutSeconds": 30,
                "failureThreshold": startup_failures,
            },
            "readinessProbe": {
                "httpGet": {"path": "/health", "port": "http"},
                "periodSeconds": 15,
                "timeoutSeconds": 30,
                "failureThreshold": 3,
            },
            "livenessProbe": {
                "httpGet": {"path": "/health_generate", "port": "http"},
                "periodSeconds": live_period,
                "timeoutSeconds": 30,
                "failureThreshold": live_failures,
            },
        }
    head = f"http://{ctx.head_address}:{ctx.api_port}"
    guard = ["python3", f"{LAUNCHER_MOUNT}/{GUARD_FILE}"]
    return {
        "startupProbe": {
            "exec": {"command": [*guard, "startup", "--head", head]},
            "periodSeconds": PROBE_PERIOD,
            "timeoutSeconds": 15,
            "failureThreshold": startup_failures,
        },
        "livenessProbe": {
            "exec": {"command": [*guard, "live", "--head", head]},
            "periodSeconds": live_period,
            "timeoutSeconds": 15,
            "failureThreshold": live_failures,
        },
    }


def _container(profile: Profile, ctx: ServingContext, node: NodePlan) -> dict[str, Any]:
    from sparkrack.patches import container_entrypoint

    env: list[dict[str, Any]] = [
        {"name": k, "value": v} for k, v in render_env(profile, ctx, node.rank).items()
    ]
    env.append(
        {
            "name": "HF_TOKEN",
            "valueFrom": {
                "secretKeyRef": {"name": ctx.hf_token_secret, "key": HF_TOKEN_KEY, "optional": True}
            },
        }
    )
    ports = [{"name": "dist", "containerPort": ctx.dist_port}]
    if node.rank == 0:
        ports.insert(0, {"name": "http", "containerPort": ctx.api_port})
    return {
        "name": "sglang",
        "image": profile.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(container_entrypoint(profile.patches, profile.architecture)),
        "args": render_argv(profile, ctx, node.rank),
        "env": env,
        "ports": ports,
        # Seed 003: without privileged mode /dev/infiniband stays invisible and NCCL silently
        # falls back to sockets.
        "securityContext": {"privileged": True},
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "hf-cache", "mountPath": HF_CACHE_MOUNT},
            {"name": "launcher", "mountPath": LAUNCHER_MOUNT, "readOnly": True},
        ],
        **_probes(profile, ctx, node.rank),
    }


def _statefulset(profile: Profile, ctx: ServingContext, node: NodePlan) -> dict[str, Any]:
    labels = serving_labels(profile)
    selector = {**labels, RANK: str(node.rank)}
    pod_labels = {**selector, SPARK_INDEX: str(node.spark_index)}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(
            statefulset_name(profile, node.rank), ctx.namespace, {**labels, RANK: str(node.rank)}
        ),
        "spec": {
            "serviceName": names(profile)["headless"],
            "replicas": 1,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {
                        "k8s.v1.cni.cncf.io/networks": pod_network_annotation(node, ctx.namespace)
                    },
                },
                "spec": {
                    "nodeSelector": node_selector(node),
                    "terminationGracePeriodSeconds": 30,
                    "containers": [_container(profile, ctx, node)],
                    "volumes": [
                        {
                            "name": "dshm",
                            "emptyDir": {"medium": "Memory", "sizeLimit": ctx.shm_size},
                        },
                        {
                            "name": "hf-cache",
                            "hostPath": {"path": ctx.hf_cache, "type": "DirectoryOrCreate"},
                        },
                        {
                            "name": "launcher",
                            "configMap": {"name": names(profile)["launcher"], "defaultMode": 0o555},
                        },
                    ],
                },
            },
        },
    }


def services(
    object_names: dict[str, str],
    namespace: str,
    labels: dict[str, str],
    api_selector: dict[str, str],
    api_port: int,
    headless_port: tuple[str, int],
) -> list[dict[str, Any]]:
    """The headless Service (stable pod DNS, ready or not) and the OpenAI-API Service.

    ``headless_port`` is the named port the headless Service publishes: SGLang's ``dist`` port for
    the multi-Spark group, the ``http`` port for a single-Spark engine.
    """
    port_name, port = headless_port
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(object_names["headless"], namespace, labels),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": dict(labels),
                "ports": [{"name": port_name, "port": port, "targetPort": port_name}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(object_names["api"], namespace, labels),
            "spec": {
                "type": "ClusterIP",
                "selector": dict(api_selector),
                "ports": [{"name": "http", "port": api_port, "targetPort": "http"}],
            },
        },
    ]


def render_manifests(profile: Profile, ctx: ServingContext) -> list[dict[str, Any]]:
    if profile.engine != "sglang":
        from sparkrack.profiles.engines import single

        return single.render_manifests(profile, ctx)
    labels = serving_labels(profile)
    n = names(profile)
    ns = ctx.namespace
    head_selector = {**labels, RANK: "0"}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": dict(PART_OF)},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(n["launcher"], ns, labels),
            "data": launcher_files(),
        },
    ]
    docs += services(n, ns, labels, head_selector, ctx.api_port, ("dist", ctx.dist_port))
    docs += [_statefulset(profile, ctx, node) for node in ctx.plan.nodes]
    return docs
