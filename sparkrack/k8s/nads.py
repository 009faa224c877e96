"""NetworkAttachmentDefinitions: one per (rail, VF index in use), rendered from the address plan.

Choice (documented in sparkrack.fabric.addressplan): a NAD per rail and VF *index*, not per node+VF. The VF netdev
(``<base>v<v>``) has the same name on every Spark, so one ``host-device`` NAD moves it into the pod
on whichever node the pod lands. The address is per node: static IPAM with the ``ips`` capability
takes it from the pod's Multus annotation (``addressplan.pod_network_annotation``), which carries
that node's planned VF address — the same address netplan puts on the VF host-side (seed 003: the
GID table needs it). A pod on the wrong node would ask for another node's address, so serving pods
always pair the annotation with a nodeSelector on the same node.
"""

from __future__ import annotations

import json

from sparkrack.contract import NAMESPACE_LABELS
from sparkrack.fabric.addressplan import FabricPlan, nad_name
from sparkrack.k8s.common import Manifest, metadata
from sparkrack.k8s.options import ClusterOptions

COMPONENT = "fabric-nad"


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
    """The serving namespace, labelled exactly as the serve play renders it (one object, two
    appliers: any difference would make each play undo the other's labels)."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": opts.namespace, "labels": dict(NAMESPACE_LABELS)},
    }
