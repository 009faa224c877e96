"""Profile + serving context -> every Kubernetes object of one deployment, for any engine.

Objects: Namespace; one ConfigMap per file set the engine needs (SGLang's launcher with the SM121
patch engine and group guard, TensorRT-LLM's config file); a headless Service and the OpenAI-API
Service; one StatefulSet per rank, pinned to its Spark. The engine says what runs (argv, env,
probes, files, init containers, JIT caches); the pod plumbing — HF-token Secret reference,
volumes, node pinning, the fabric attachment of engines whose ranks form an NCCL group, the init
containers that wait for the fetched weights and for free memory, the node's JIT-cache directory
of the image — is written here once. The fetch and pre-pull Jobs are built from these helpers in
:mod:`sparkrack.serving.switch`.

Kubernetes expands ``$(VAR)`` in a container's command, args and env values; every ``$`` of a
rendered word is written as ``$$`` so a profile value can never pull the HF token (or any other
variable of the pod) into the server's argv.
"""

from __future__ import annotations

import math
from typing import Any

from sparkrack import contract
from sparkrack.fabric.addressplan import NodePlan, pod_network_annotation
from sparkrack.observe.scrape import pod_relabelings
from sparkrack.serving.capacity import planned_gb
from sparkrack.serving.core import Profile, ServingContext
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.base import Engine, FileSet, Rank, hf_token_env
from sparkrack.serving.fetchplan import UNPINNED, memwait_argv, wait_argv
from sparkrack.serving.images import image_slug

TERMINATION_GRACE_SECONDS = 30
SWITCH_VOLUME = "switch"
JIT_VOLUME = "jit-cache"


def no_expansion(word: str) -> str:
    """``word`` as Kubernetes must see it so that it reaches the process unchanged."""
    return word.replace("$", "$$")


def deployment_name(profile: Profile, ctx: ServingContext) -> str:
    """The deployment's name: the inventory's, else the profile's name as a DNS label."""
    return ctx.deployment or contract.slug(profile.name)


def serving_labels(profile: Profile, ctx: ServingContext) -> dict[str, str]:
    return {
        **contract.PART_OF,
        contract.LABEL_COMPONENT: contract.COMPONENT_SERVING,
        contract.LABEL_DEPLOYMENT: deployment_name(profile, ctx),
        contract.LABEL_PROFILE: contract.label_value(profile.name),
    }


def serving_selector(profile: Profile | None = None, ctx: ServingContext | None = None) -> str:
    """Label selector of the serving objects (of one deployment, or of all of them)."""
    base = f"{contract.LABEL_COMPONENT}={contract.COMPONENT_SERVING}"
    if profile is None or ctx is None:
        return base
    return f"{base},{contract.LABEL_DEPLOYMENT}={deployment_name(profile, ctx)}"


def names(profile: Profile, ctx: ServingContext) -> dict[str, str]:
    """Object names of one deployment (every name starts with its deployment's name)."""
    s = f"{contract.OBJECT_PREFIX}-{deployment_name(profile, ctx)}"
    return {
        "headless": s,
        "api": f"{s}-api",
        "launcher": f"{s}-launcher",
        "switch": f"{s}-switch",
        "fetch": f"{s}-fetch",
    }


def receiver_name(profile: Profile, ctx: ServingContext, node: NodePlan) -> str:
    """The receiver Job of one non-head Spark of a deployment."""
    return f"{names(profile, ctx)['headless']}-recv-{node.spark_index}"


def jit_cache_dir(ctx: ServingContext, image: str) -> str:
    """The host directory of one image's JIT caches on every Spark (one per image: a new image
    never reads kernels an older one compiled)."""
    return f"{ctx.jit_cache}/{image_slug(image)}"


def rank_nodes(eng: Engine, ctx: ServingContext) -> list[NodePlan]:
    """The Sparks a deployment's ranks run on, head first."""
    seen: dict[str, NodePlan] = {}
    for rank in eng.ranks(ctx):
        seen.setdefault(rank.node.name, rank.node)
    return list(seen.values())


def memwait_gb(profile: Profile, ctx: ServingContext) -> float:
    """What a rank waits to see free on its Spark: the planner's footprint per Spark, rounded
    up to 0.1 GB (the same number the deployments' memory table sums)."""
    gb = planned_gb(profile, len(rank_nodes(engine_of(profile.data), ctx)))
    return math.ceil(gb * 10) / 10


def switch_init_containers(profile: Profile, ctx: ServingContext) -> list[dict[str, Any]]:
    """Before a rank starts: the fetch step's marker of (model, revision) is on its Spark, then
    MemAvailable covers its planned footprint. Both run the fetch step from the switch ConfigMap
    in the serving image (python3 is all they need), bounded by their own timeouts."""
    mounts = [
        {"name": "hf-cache", "mountPath": contract.HF_CACHE_MOUNT, "readOnly": True},
        {"name": SWITCH_VOLUME, "mountPath": contract.SWITCH_MOUNT, "readOnly": True},
    ]
    wait = wait_argv(
        contract.HF_HUB_CACHE_MOUNT,
        profile.model,
        profile.revision or UNPINNED,
        timeout_s=ctx.fetch_timeout,
    )
    memwait = memwait_argv(memwait_gb(profile, ctx), timeout_s=ctx.memwait_timeout)
    return [
        {
            "name": name,
            "image": profile.image,
            "imagePullPolicy": "IfNotPresent",
            "command": [no_expansion(w) for w in argv],
            "volumeMounts": mounts,
        }
        for name, argv in (("wait-weights", wait), ("wait-memory", memwait))
    ]


def statefulset_name(profile: Profile, ctx: ServingContext, rank: int) -> str:
    return f"{contract.OBJECT_PREFIX}-{deployment_name(profile, ctx)}-r{rank}"


def configmap_name(profile: Profile, ctx: ServingContext, files: FileSet) -> str:
    return f"{contract.OBJECT_PREFIX}-{deployment_name(profile, ctx)}-{files.volume}"


def node_selector(node: NodePlan) -> dict[str, str]:
    """Pin a pod to its Spark twice: the K3s node name and the spark-index label the K3s roles
    set from the same address plan. A cluster where the two disagree leaves the pod Pending
    instead of running a rank on the wrong Spark (with another Spark's VF address)."""
    return {
        contract.HOSTNAME_LABEL: str(node.name),
        contract.LABEL_SPARK_INDEX: str(node.spark_index),
    }


def meta(name: str, ns: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": ns, "labels": dict(labels)}


def metrics_annotations(eng: Engine, ctx: ServingContext, rank: Rank) -> dict[str, str]:
    """``prometheus.io/*`` annotations of a pod that serves the engine's metrics (rank 0 of an
    engine with a Prometheus endpoint; SGLang's other ranks run no HTTP server)."""
    if eng.metrics_path is None or rank.rank != 0:
        return {}
    return {
        contract.PROMETHEUS_SCRAPE_ANNOTATION: "true",
        contract.PROMETHEUS_PATH_ANNOTATION: eng.metrics_path,
        contract.PROMETHEUS_PORT_ANNOTATION: str(ctx.api_port),
    }


def pod_monitor(profile: Profile, ctx: ServingContext) -> dict[str, Any] | None:
    """A Prometheus Operator ``PodMonitor`` for the deployment's metrics pod (None: the engine
    has no Prometheus endpoint). Optional: apply it only where the operator's CRDs exist."""
    eng = engine_of(profile.data)
    if eng.metrics_path is None:
        return None
    labels = serving_labels(profile, ctx)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": meta(names(profile, ctx)["headless"], ctx.namespace, labels),
        "spec": {
            "selector": {"matchLabels": {**labels, contract.LABEL_RANK: "0"}},
            "podMetricsEndpoints": [
                {
                    "port": eng.metrics_port,
                    "path": eng.metrics_path,
                    "relabelings": pod_relabelings(),
                }
            ],
        },
    }


def _container(eng: Engine, profile: Profile, ctx: ServingContext, rank: Rank) -> dict[str, Any]:
    argv = eng.argv(profile, ctx, rank)
    command, args = eng.container_command(profile, argv)
    env: list[dict[str, Any]] = [
        {"name": k, "value": no_expansion(v)} for k, v in eng.env(profile, ctx, rank).items()
    ]
    env.append(hf_token_env(ctx))
    ports: list[dict[str, Any]] = []
    if rank.rank == 0:
        ports.append({"name": "http", "containerPort": ctx.api_port})
    if eng.uses_fabric:
        ports.append({"name": "dist", "containerPort": ctx.dist_port})
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "hf-cache", "mountPath": contract.HF_CACHE_MOUNT},
    ]
    mounts += [
        {"name": fs.volume, "mountPath": fs.mount, "readOnly": True} for fs in eng.files(profile)
    ]
    if eng.jit_caches:
        mounts.append({"name": JIT_VOLUME, "mountPath": contract.JIT_CACHE_MOUNT})
    mounts += eng.extras(profile, ctx).mounts
    container: dict[str, Any] = {
        "name": eng.name,
        "image": profile.image,
        "imagePullPolicy": "IfNotPresent",
        "command": [no_expansion(w) for w in command],
        "args": [no_expansion(w) for w in args],
        "env": env,
        "ports": ports,
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "volumeMounts": mounts,
        **eng.probes(profile, ctx, rank),
    }
    if eng.uses_fabric:
        # Seed 003: without privileged mode /dev/infiniband stays invisible and NCCL silently
        # falls back to sockets.
        container["securityContext"] = {"privileged": True}
    return container


def _statefulset(eng: Engine, profile: Profile, ctx: ServingContext, rank: Rank) -> dict[str, Any]:
    labels = serving_labels(profile, ctx)
    selector = {**labels, contract.LABEL_RANK: str(rank.rank)}
    template_meta: dict[str, Any] = {
        "labels": {**selector, contract.LABEL_SPARK_INDEX: str(rank.node.spark_index)}
    }
    annotations = metrics_annotations(eng, ctx, rank)
    if eng.uses_fabric:
        annotations[contract.MULTUS_NETWORKS_ANNOTATION] = pod_network_annotation(
            rank.node, ctx.namespace, ctx.vf_index
        )
    if annotations:
        template_meta["annotations"] = annotations
    extras = eng.extras(profile, ctx)
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": ctx.shm_size}},
        {"name": "hf-cache", "hostPath": {"path": ctx.hf_cache, "type": "DirectoryOrCreate"}},
    ]
    for fs in eng.files(profile):
        source: dict[str, Any] = {"name": configmap_name(profile, ctx, fs)}
        if fs.mode is not None:
            source["defaultMode"] = fs.mode
        volumes.append({"name": fs.volume, "configMap": source})
    volumes.append(
        {
            "name": SWITCH_VOLUME,
            "configMap": {"name": names(profile, ctx)["switch"], "defaultMode": 0o555},
        }
    )
    if eng.jit_caches:
        volumes.append(
            {
                "name": JIT_VOLUME,
                "hostPath": {
                    "path": jit_cache_dir(ctx, profile.image),
                    "type": "DirectoryOrCreate",
                },
            }
        )
    volumes += extras.volumes
    pod: dict[str, Any] = {
        "nodeSelector": node_selector(rank.node),
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "initContainers": [*switch_init_containers(profile, ctx), *extras.init_containers],
        "containers": [_container(eng, profile, ctx, rank)],
        "volumes": volumes,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(statefulset_name(profile, ctx, rank.rank), ctx.namespace, selector),
        "spec": {
            "serviceName": names(profile, ctx)["headless"],
            "replicas": 1,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": {"metadata": template_meta, "spec": pod},
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
    """The headless Service (stable pod DNS, ready or not) and the OpenAI-API Service."""
    port_name, port = headless_port
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(object_names["headless"], namespace, labels),
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
            "metadata": meta(object_names["api"], namespace, labels),
            "spec": {
                "type": "ClusterIP",
                "selector": dict(api_selector),
                "ports": [{"name": "http", "port": api_port, "targetPort": "http"}],
            },
        },
    ]


def namespace(ctx: ServingContext) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": ctx.namespace, "labels": dict(contract.NAMESPACE_LABELS)},
    }


def deployment_objects(profile: Profile, ctx: ServingContext) -> list[dict[str, Any]]:
    """The objects of one deployment: its ConfigMaps, Services and one StatefulSet per rank.

    They depend on this deployment alone (profile, Sparks, VF) and the shared settings, so adding
    or removing another deployment leaves them byte-identical.
    """
    eng = engine_of(profile.data)
    labels = serving_labels(profile, ctx)
    ns = ctx.namespace
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(configmap_name(profile, ctx, fs), ns, labels),
            "data": dict(fs.files),
        }
        for fs in eng.files(profile)
    ]
    head = {**labels, contract.LABEL_RANK: "0"}
    docs += services(names(profile, ctx), ns, labels, head, ctx.api_port, eng.headless_port(ctx))
    docs += [_statefulset(eng, profile, ctx, rank) for rank in eng.ranks(ctx)]
    return docs


def render_manifests(profile: Profile, ctx: ServingContext) -> list[dict[str, Any]]:
    """The namespace and every serving object of one deployment of ``profile`` (its switch
    ConfigMap and fetch Jobs, applied before these: :func:`sparkrack.serving.switch.fetch_objects`)."""
    return [namespace(ctx), *deployment_objects(profile, ctx)]
