"""The fabric gate's workload: one privileged pod per Spark running an NCCL all-reduce over net1.

Each pod lands on its own Spark (nodeSelector on the hostname K3s registered, which the agent
config sets to the inventory name), gets its node's VF of every rail through the NAD annotation from the
address plan, and runs ``data/fabric-check/nccl_allreduce.py`` from a ConfigMap. Pods are privileged
because host-device moves the VF netdev but not ``/dev/infiniband/*`` — unprivileged, NCCL silently
falls back to sockets (src:roce-post), which is exactly what the gate must catch, not cause.
"""

from __future__ import annotations

from pathlib import Path

from sparkrack import contract
from sparkrack.fabric import gidtable
from sparkrack.fabric.addressplan import FabricPlan
from sparkrack.fabric.nccl import ALL_RAILS, Sweep, fabric_sweeps
from sparkrack.fabric.ncclenv import Transport, rank_env
from sparkrack.k8s import scanner
from sparkrack.k8s.common import HOSTNAME_LABEL, Manifest, metadata
from sparkrack.k8s.nads import pod_network_annotation
from sparkrack.k8s.options import ClusterOptions

COMPONENT = contract.COMPONENT_FABRIC_CHECK
SCRIPT = Path(__file__).resolve().parent.parent / "data" / "fabric-check" / "nccl_allreduce.py"
SCRIPT_CONFIGMAP = "sparkrack-fabric-check-script"
SCRIPT_MOUNT = "/opt/sparkrack-fabric-check"
GID_SCRIPT = Path(gidtable.__file__)
GID_FILE = GID_SCRIPT.name
POD_PREFIX = "sparkrack-fabric-check-"


def pod_name(node_name: str, sweep: str = ALL_RAILS) -> str:
    if sweep == ALL_RAILS:
        return f"{POD_PREFIX}{node_name}"
    return f"{POD_PREFIX}{sweep}-{node_name}"


def sweep_selector(sweep: Sweep) -> str:
    """Label selector of one sweep's pods."""
    return f"{contract.LABEL_COMPONENT}={COMPONENT},{contract.LABEL_FABRIC_SWEEP}={sweep.name}"


def render_fabric_check(
    plan: FabricPlan,
    opts: ClusterOptions,
    transport: Transport = "roce",
    vf_index: int | None = None,
    sweep: Sweep | None = None,
) -> list[Manifest]:
    """ConfigMap with the all-reduce script + one pod per Spark (rank = plan rank) for one sweep
    of :func:`sparkrack.fabric.nccl.fabric_sweeps` (None = every rail at once).

    Each pod gets VF ``vf_index`` (None = the serving VF) of every rail and the NCCL environment
    :func:`sparkrack.fabric.ncclenv.rank_env` gives a rank on the sweep's rails: on every rail,
    the environment of a serving rank on the same VF.
    """
    ns = opts.namespace
    sweep = sweep or fabric_sweeps(plan, vf_index)[0]
    extra = {contract.LABEL_COMPONENT: COMPONENT}
    master = plan.head.rail_vfs(plan.serving_vf_index if vf_index is None else vf_index)[0].address
    docs: list[Manifest] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(SCRIPT_CONFIGMAP, COMPONENT, ns, extra),  # shared by the sweeps
            "data": {
                "nccl_allreduce.py": SCRIPT.read_text(),
                GID_FILE: GID_SCRIPT.read_text(),
            },
        }
    ]
    world = len(plan.nodes)
    for node in plan.nodes:
        env = {
            **rank_env(
                plan,
                node,
                transport=transport,
                vf_index=vf_index,
                rails=sweep.rails if sweep.one_rail else None,
            ),
            "RANK": str(node.rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(opts.fabric_check_port),
            "SPARKRACK_MAX_BYTES": str(opts.fabric_check_max_bytes),
        }
        spec: dict[str, object] = {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,  # never talks to the API
            "terminationGracePeriodSeconds": 10,
            "nodeSelector": {HOSTNAME_LABEL: node.name},
            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "nccl-allreduce",
                    "image": opts.fabric_check_image,
                    # the GID resolver sets NCCL_IB_GID_INDEX from sysfs, then execs the check
                    "command": [
                        "python3",
                        "-I",
                        f"{SCRIPT_MOUNT}/{GID_FILE}",
                        "--",
                        "python3",
                        f"{SCRIPT_MOUNT}/nccl_allreduce.py",
                    ],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "securityContext": {"privileged": True},
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "volumeMounts": [
                        {
                            "name": "script",
                            "mountPath": SCRIPT_MOUNT,
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
                    pod_name(node.name, sweep.name),
                    COMPONENT,
                    ns,
                    {
                        **extra,
                        contract.LABEL_FABRIC_SWEEP: sweep.name,
                        contract.LABEL_RANK: str(node.rank),
                    },
                    {
                        "k8s.v1.cni.cncf.io/networks": pod_network_annotation(node, ns, vf_index),
                        **scanner.skips(
                            scanner.IMAGES, scanner.NETWORK_POLICY, scanner.FABRIC_CHECK
                        ),
                    },
                ),
                "spec": spec,
            }
        )
    return docs
