"""A resolved deployment -> its ConfigMaps, Services and one StatefulSet per rank, for any engine.

One ConfigMap per file set the engine needs (SGLang's launcher with the SM121 patch engine and
group guard, TensorRT-LLM's config file); a headless Service and the OpenAI-API Service; one
StatefulSet per rank, pinned to its Spark. The engine says what runs (argv, env, probes, files,
init containers, JIT caches, metrics); the pod plumbing (:mod:`.pod`), the fabric attachment of
engines whose ranks form an NCCL group and the node's JIT-cache directory of the image are added
here, the same way for every engine. A rank runs offline (``HF_HUB_OFFLINE=1``: the fetch step put
the weights in the node's cache first), so it is given no HF token. The switch's
init containers (wait for the weights, then for free memory) come from
:func:`sparkrack.serving.switch.objects.rank_init_containers`.
"""

from __future__ import annotations

from typing import Any

from sparkrack import contract
from sparkrack.k8s import scanner
from sparkrack.k8s.nads import pod_network_annotation
from sparkrack.planner.memory import GB
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines import FileSet, Rank
from sparkrack.serving.engines.listeners import LOOPBACK_ADDRESS
from sparkrack.serving.names import ObjectNames
from sparkrack.serving.objects.network import deployment_policy
from sparkrack.serving.objects.pod import (
    hardened,
    hf_cache_mount,
    hf_cache_volume,
    meta,
    no_expansion,
    node_selector,
    pod_ip_env,
    pod_spec,
    secret_env,
    switch_volume,
    tmp_volume,
)
from sparkrack.serving.profile.images import image_slug
from sparkrack.serving.resolution import Resolution
from sparkrack.serving.trust import remote_code

TERMINATION_GRACE_SECONDS = 30
JIT_VOLUME = "jit-cache"
FLIGHT_RECORDER_VOLUME = "flight-recorder"
SERIES_DEPLOYMENT = "deployment"
"""Label of every series scraped from a serving pod: the pod's deployment label."""
SERIES_PROFILE = "profile"
"""Label of every series scraped from a serving pod: the pod's profile label."""
SERIES_NAMESPACE = "namespace"
SERIES_POD = "pod"


def meta_label(pod_label: str) -> str:
    """Prometheus' Kubernetes service-discovery label of a pod label."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in pod_label)


def pod_relabelings() -> list[dict[str, Any]]:
    """Copy a serving pod's deployment labels onto every series scraped from it (Prometheus
    Operator spelling): the ``PodMonitor`` below and observe's scrape job both use these."""
    return [
        {"sourceLabels": [meta_label(contract.LABEL_DEPLOYMENT)], "targetLabel": SERIES_DEPLOYMENT},
        {"sourceLabels": [meta_label(contract.LABEL_PROFILE)], "targetLabel": SERIES_PROFILE},
        {"sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": SERIES_NAMESPACE},
        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": SERIES_POD},
    ]


def jit_cache_dir(ctx: ServingContext, image: str) -> str:
    """The host directory of one image's JIT caches on every Spark (one per image: a new image
    never reads kernels an older one compiled)."""
    return f"{ctx.jit_cache}/{image_slug(image)}"


def pod_monitor(res: Resolution) -> dict[str, Any] | None:
    """A Prometheus Operator ``PodMonitor`` for the deployment's metrics pod (None: the engine
    has no Prometheus endpoint). Optional: apply it only where the operator's CRDs exist."""
    eng = res.engine
    if eng.metrics_path is None:
        return None
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": meta(res.names.headless, res.ctx.namespace, res.labels),
        "spec": {
            "selector": {"matchLabels": {**res.labels, contract.LABEL_RANK: "0"}},
            "podMetricsEndpoints": [
                {
                    "port": eng.metrics_port,
                    "path": eng.metrics_path,
                    "relabelings": pod_relabelings(),
                }
            ],
        },
    }


def key_env(res: Resolution, rank: Rank) -> list[dict[str, Any]]:
    """The rank's keys, each read from the deployment's key Secret (no value in a manifest).
    Not optional: a pod whose keys are missing does not start, rather than serve without them."""
    keys = res.engine.rank_key_env(rank.rank)
    return [secret_env(name, res.names.keys, key) for name, key in keys.items()]


def _container(res: Resolution, rank: Rank) -> dict[str, Any]:
    eng, ctx, profile = res.engine, res.ctx, res.profile
    command, args = eng.container_command(profile, res.argv(rank), rank)
    env: list[dict[str, Any]] = [
        {"name": k, "value": no_expansion(v)} for k, v in res.env(rank).items()
    ]
    env += key_env(res, rank)
    env.append(pod_ip_env())
    ports: list[dict[str, Any]] = []
    if rank.rank == 0 and not eng.gated:
        ports.append({"name": "http", "containerPort": ctx.api_port})
    if eng.uses_fabric:
        ports.append({"name": "dist", "containerPort": ctx.dist_port})
    # The fetch step wrote the weights; an engine only reads them (offline), so a container
    # running as root plants nothing in the node's cache. A model whose own code runs
    # (trust_remote_code) is the exception: transformers copies that code under HF_HOME/modules.
    writes = remote_code(profile, eng)
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        hf_cache_mount(read_only=not writes),
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
        container.update(rdma_access(ctx))
        mounts.append(
            {"name": FLIGHT_RECORDER_VOLUME, "mountPath": contract.flight_recorder_dir(res.name)}
        )
    return container


def gate_container(res: Resolution) -> dict[str, Any]:
    """The head's gate (serving/scripts/engine_gate.py): the pod's API port on its cluster
    address, passing the allowed paths on to the engine on loopback. It holds no key and runs
    as the plain serving user, from the engine's image and the launcher ConfigMap; its memory
    limit leaves room for several requests at the gate's body limit (64 MiB) at once."""
    eng, ctx = res.engine, res.ctx
    [launcher] = [fs for fs in eng.files(res.profile) if contract.GATE_FILE in fs.files]
    argv = [
        "python3",
        "-I",
        f"{launcher.mount}/{contract.GATE_FILE}",
        "--host-env",
        contract.POD_IP_ENV,
        "--port",
        str(ctx.api_port),
        "--upstream",
        f"{LOOPBACK_ADDRESS}:{ctx.api_port}",
        *(word for path in eng.gate_also() for word in ("--also", path)),
    ]
    return hardened(
        {
            "name": contract.GATE_CONTAINER,
            "image": res.profile.image,
            "imagePullPolicy": "IfNotPresent",
            "command": [no_expansion(w) for w in argv],
            "env": [pod_ip_env()],
            "ports": [{"name": "http", "containerPort": ctx.api_port}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            "volumeMounts": [
                {"name": launcher.volume, "mountPath": launcher.mount, "readOnly": True}
            ],
        }
    )


def rdma_access(ctx: ServingContext) -> dict[str, Any]:
    """What an NCCL rank's container adds to reach the RDMA devices of its VF, as the inventory
    chose (``serving_rdma_access``). src:roce-post: without either, ``/dev/infiniband`` stays invisible
    and NCCL silently falls back to sockets."""
    if ctx.rdma_access == "device-plugin":
        return {
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"], "add": [contract.RDMA_CAPABILITY]},
            },
            "resources": {"limits": {"nvidia.com/gpu": 1, ctx.rdma_resource: 1}},
        }
    return {"securityContext": {"privileged": True}}


def _statefulset(
    res: Resolution, rank: Rank, init_containers: list[dict[str, Any]]
) -> dict[str, Any]:
    eng, ctx, profile, names = res.engine, res.ctx, res.profile, res.names
    selector = {**res.labels, contract.LABEL_RANK: str(rank.rank)}
    template_meta: dict[str, Any] = {
        "labels": {**selector, contract.LABEL_SPARK_INDEX: str(rank.node.spark_index)}
    }
    annotations = eng.scrape_annotations(ctx, rank)
    annotations[contract.PLANNED_MEMORY_ANNOTATION] = str(round(res.footprint_gb * GB))
    if eng.uses_fabric:
        annotations[contract.MULTUS_NETWORKS_ANNOTATION] = pod_network_annotation(
            rank.node, ctx.namespace, ctx.vf_index
        )
    if eng.gated and rank.rank == 0:
        # kubectl logs/exec of the pod reach the engine, not its gate
        annotations[contract.DEFAULT_CONTAINER_ANNOTATION] = eng.name
    if annotations:
        template_meta["annotations"] = annotations
    extras = eng.extras(profile, ctx)
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": ctx.shm_size}},
        hf_cache_volume(ctx),
    ]
    for fs in eng.files(profile):
        source: dict[str, Any] = {"name": names.configmap(fs.volume)}
        if fs.mode is not None:
            source["defaultMode"] = fs.mode
        volumes.append({"name": fs.volume, "configMap": source})
    volumes += [switch_volume(names.switch), tmp_volume()]
    if eng.uses_fabric:
        # PyTorch's flight-recorder dumps on a collective timeout (ncclenv.flight_recorder_env):
        # on the Spark, so they outlive the group's restart.
        volumes.append(
            {
                "name": FLIGHT_RECORDER_VOLUME,
                "hostPath": {
                    "path": contract.flight_recorder_dir(res.name),
                    "type": "DirectoryOrCreate",
                },
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
    # The engine itself runs as its image's user (root in every engine image); the weight wait
    # is hardened (pod.hardened), the memory settle step privileged (switch.objects).
    pod = pod_spec(
        {
            "nodeSelector": node_selector(rank.node),
            "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
            # Native sidecars (the settle step's) start last, right before the engine.
            "initContainers": [
                *[c for c in init_containers if c.get("restartPolicy") != "Always"],
                *extras.init_containers,
                *[c for c in init_containers if c.get("restartPolicy") == "Always"],
            ],
            "containers": [
                _container(res, rank),
                *([gate_container(res)] if eng.gated and rank.rank == 0 else []),
            ],
            "volumes": volumes,
        },
        nonroot=False,
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(
            names.statefulset(rank.rank), ctx.namespace, selector, scanner_skips(res, rank)
        ),
        "spec": {
            "serviceName": names.headless,
            "replicas": 1,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": {"metadata": template_meta, "spec": pod},
        },
    }


def scanner_skips(res: Resolution, rank: Rank) -> dict[str, str]:
    """The policy scanner's findings a rank's StatefulSet accepts (:mod:`sparkrack.k8s.scanner`)."""
    sets = [scanner.IMAGES, scanner.ENGINE]
    if res.engine.key_env:
        sets.append(scanner.ENGINE_KEY)
    if rank.rank > 0:
        sets.append(scanner.ENGINE_WORKER)
    sets.append(scanner.MEMORY_SETTLE)
    if res.engine.uses_fabric and res.ctx.rdma_access == "privileged":
        # One check, two reasons: the engine's RDMA verbs and the settle step's /proc/sys writes.
        both = f"{scanner.RDMA_PRIVILEGED['CKV_K8S_16']}; {scanner.MEMORY_SETTLE['CKV_K8S_16']}"
        sets.append({"CKV_K8S_16": both})
    return scanner.skips(*sets)


def services(
    names: ObjectNames,
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
            "metadata": meta(names.headless, namespace, labels),
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
            "metadata": meta(names.api, namespace, labels),
            "spec": {
                "type": "ClusterIP",
                "selector": dict(api_selector),
                "ports": [{"name": "http", "port": api_port, "targetPort": "http"}],
            },
        },
    ]


def configmaps(res: Resolution, file_sets: list[FileSet]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(res.names.configmap(fs.volume), res.ctx.namespace, res.labels),
            "data": dict(fs.files),
        }
        for fs in file_sets
    ]


def deployment_objects(
    res: Resolution, init_containers: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The objects of one deployment: its ConfigMaps, Services and one StatefulSet per rank,
    each rank's pod starting with ``init_containers`` (the switch's waits).

    They depend on this deployment alone (profile, Sparks, VF) and the shared settings, so adding
    or removing another deployment leaves them byte-identical.
    """
    eng, ctx = res.engine, res.ctx
    head = {**res.labels, contract.LABEL_RANK: "0"}
    return [
        *configmaps(res, eng.files(res.profile)),
        *services(res.names, ctx.namespace, res.labels, head, ctx.api_port, eng.headless_port(ctx)),
        *[_statefulset(res, rank, init_containers) for rank in res.ranks],
        deployment_policy(res),
    ]
