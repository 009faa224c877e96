"""Typed renderers of every cluster add-on manifest (Multus, NADs, device plugin, fabric check)
and of the K3s node configuration. Every list returned by ``render_*`` here is validated offline
(sparkrack.k8s.validate) before any play applies it."""

from __future__ import annotations

from sparkrack.fabric.addressplan import FabricPlan
from sparkrack.k8s.common import Manifest, validated
from sparkrack.k8s.device_plugin import render_device_plugin
from sparkrack.k8s.multus import render_multus
from sparkrack.k8s.nads import render_nads, render_namespace
from sparkrack.k8s.options import ClusterOptions

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
