"""NetworkAttachmentDefinitions: one per (rail, VF index in use), rendered from the address plan.

A NAD per rail and VF *index*, not per node+VF. The VF netdev
(``<base>v<v>``) has the same name on every Spark, so one ``host-device`` NAD moves it into the pod
on whichever node the pod lands. The address is per node: static IPAM with the ``ips`` capability
takes it from the pod's Multus annotation (:func:`pod_network_annotation`), which carries
that node's planned VF address — the same address netplan puts on the VF host-side (src:roce-post: the
GID table needs it). A pod on the wrong node would ask for another node's address, so serving pods
always pair the annotation with a nodeSelector on the same node.
"""

from __future__ import annotations

import json

from sparkrack import contract
from sparkrack.fabric.addressplan import FabricPlan, NodePlan
from sparkrack.k8s.common import Manifest, metadata, namespace_manifest
from sparkrack.k8s.options import ClusterOptions

COMPONENT = "fabric-nad"


def nad_name(vf_index: int, rail: int = 0) -> str:
    if rail == 0:
        return f"sparkrack-vf{vf_index}"
    return f"sparkrack-rail{rail}-vf{vf_index}"


def pod_network_annotation(node: NodePlan, namespace: str, vf_index: int | None = None) -> str:
    """Value of ``k8s.v1.cni.cncf.io/networks`` for a pod on ``node``: VF ``vf_index`` of every
    rail (None = the serving VF), one Multus interface each."""
    index = node.serving_vf.index if vf_index is None else vf_index
    return json.dumps(
        [
            {
                "name": nad_name(vf.index, vf.rail),
                "namespace": namespace,
                "interface": contract.pod_ifname(vf.rail),
                "ips": [vf.cidr],
                "mac": vf.mac,
            }
            for vf in node.rail_vfs(index)
        ],
        separators=(",", ":"),
    )


def nad_cni_config(plan: FabricPlan, vf_index: int, rail: int = 0) -> dict[str, object]:
    """The CNI config of the NAD for VF ``vf_index`` of ``rail`` (host-device + static IPAM)."""
    netdev = plan.head.vf(vf_index, rail).netdev  # same name on every node (addressplan)
    return {
        "cniVersion": "0.3.1",
        "name": nad_name(vf_index, rail),
        "type": "host-device",
        "device": netdev,
        "capabilities": {"ips": True},
        "ipam": {"type": "static"},
    }


def render_nads(plan: FabricPlan, opts: ClusterOptions) -> list[Manifest]:
    docs: list[Manifest] = []
    for rail in range(len(plan.rails)):
        for v in plan.vfs_in_use:
            config = nad_cni_config(plan, v, rail)
            docs.append(
                {
                    "apiVersion": "k8s.cni.cncf.io/v1",
                    "kind": "NetworkAttachmentDefinition",
                    "metadata": metadata(
                        nad_name(v, rail),
                        COMPONENT,
                        opts.namespace,
                        {"sparkrack.io/vf-index": str(v), "sparkrack.io/rail": str(rail)},
                    ),
                    "spec": {"config": json.dumps(config, separators=(",", ":"))},
                }
            )
    return docs


def render_namespace(opts: ClusterOptions) -> Manifest:
    return namespace_manifest(opts.namespace)
