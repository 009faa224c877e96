"""Typed renderers of every cluster add-on manifest (Multus, NADs, device plugin, fabric check)
and of the K3s node configuration. Every list returned by ``render_*`` here is validated offline
(sparkrack.k8svalidate) before any play applies it."""

from __future__ import annotations

from sparkrack.addressplan import FabricPlan
from sparkrack.cluster.common import Manifest, validated
from sparkrack.cluster.device_plugin import render_device_plugin
from sparkrack.cluster.multus import render_multus
from sparkrack.cluster.nads import render_nads, render_namespace
from sparkrack.cluster.options import ClusterOptions

__all__ = ["ClusterOptions", "Manifest", "render_addons", "validated"]


def render_addons(
    plan: FabricPlan, opts: ClusterOptions, source: str = "cluster add-ons"
) -> list[Manifest]:
    """Every add-on manifest in apply order (CRD before NADs), validated; raises on any problem."""
    docs = [
        *render_multus(opts),
        render_namespace(opts),
        *render_nads(plan, opts),
        *render_device_plugin(opts),
    ]
    return validated(docs, source)
