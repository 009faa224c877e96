"""The fabric gate's workload: one privileged pod per Spark running an NCCL all-reduce over net1.

Each pod lands on its own Spark (nodeSelector on the hostname K3s registered, which the agent
config sets to the inventory name), gets its node's VF through the NAD annotation from the address
plan, and runs ``data/fabric-check/nccl_allreduce.py`` from a ConfigMap. Pods are privileged
because host-device moves the VF netdev but not ``/dev/infiniband/*`` — unprivileged, NCCL silently
falls back to sockets (seed 003), which is exactly what the gate must catch, not cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from sparkrack.addressplan import POD_FABRIC_IFNAME, FabricPlan, pod_network_annotation
from sparkrack.cluster.common import HOSTNAME_LABEL, Manifest, metadata
from sparkrack.cluster.options import ClusterOptions

COMPONENT = "fabric-check"
SCRIPT = Path(__file__).resolve().parent.parent / "data" / "fabric-check" / "nccl_allreduce.py"
SCRIPT_CONFIGMAP = "sparkrack-fabric-check-script"
POD_PREFIX = "sparkrack-fabric-check-"
Transport = Literal["roce", "socket"]


def pod_name(node_name: str) -> str:
    return f"{POD_PREFIX}{node_name}"


def fabric_env(
    plan: FabricPlan,
    node_name: str,
    transport: Transport,
    gid_index: int | None,
) -> dict[str, str]:
    """NCCL environment of the fabric-check pod on ``node_name`` (also a model for serving)."""
    node = plan.node(node_name)
    vf = node.serving_vf
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_SOCKET_IFNAME": POD_FABRIC_IFNAME,
        "GLOO_SOCKET_IFNAME": POD_FABRIC_IFNAME,
    }
    if transport == "roce":
        env["NCCL_IB_DISABLE"] = "0"
        # "=" = exact match: a bare name is a prefix, and VF 1 would also select VFs 10..15.
        env["NCCL_IB_HCA"] = f"={vf.rdma_device}"
        index = plan.gid_index if plan.gid_index is not None else gid_index
        if index is not None:
            env["NCCL_IB_GID_INDEX"] = str(index)
    else:
        env["NCCL_IB_DISABLE"] = "1"
    return env


def render_fabric_check(
    plan: FabricPlan,
    opts: ClusterOptions,
    transport: Transport = "roce",
    gid_indexes: Mapping[str, int | None] | None = None,
) -> list[Manifest]:
    """ConfigMap with the all-reduce script + one pod per Spark (rank = plan rank)."""
    ns = opts.namespace
    extra = {"sparkrack.io/component": COMPONENT}
    master = plan.head.serving_vf.address
    docs: list[Manifest] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(SCRIPT_CONFIGMAP, COMPONENT, ns, extra),
            "data": {"nccl_allreduce.py": SCRIPT.read_text()},
        }
    ]
    world = len(plan.nodes)
    for node in plan.nodes:
        env = {
            **fabric_env(plan, node.name, transport, (gid_indexes or {}).get(node.name)),
            "RANK": str(node.rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(opts.fabric_check_port),
            "SPARKRACK_MAX_BYTES": str(opts.fabric_check_max_bytes),
        }
        spec: dict[str, object] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "nodeSelector": {HOSTNAME_LABEL: node.name},
            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "nccl-allreduce",
                    "image": opts.fabric_check_image,
                    "command": ["python3", "/opt/sparkrack-fabric-check/nccl_allreduce.py"],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "securityContext": {"privileged": True},
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "volumeMounts": [
                        {
                            "name": "script",
                            "mountPath": "/opt/sparkrack-fabric-check",
                            "readOnly": True,
                        },
                        {"name": "shm", "mountPath": "/dev/shm"},
                    ],
                }
            ],
            "volumes": [
                {"name": "script", "configMap": {"name": SCRIPT_CONFIGMAP}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
            ],
        }
        if opts.gpu_runtime_class:
            spec["runtimeClassName"] = opts.gpu_runtime_class
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata(
                    pod_name(node.name),
                    COMPONENT,
                    ns,
                    {**extra, "sparkrack.io/rank": str(node.rank)},
                    {"k8s.v1.cni.cncf.io/networks": pod_network_annotation(node, ns)},
                ),
                "spec": spec,
            }
        )
    return docs
