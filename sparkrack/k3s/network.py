"""The networks and ports of the K3s cluster sparkrack configures (rendered by
:mod:`sparkrack.k3s.config`; the fabric plan and the inventory check stay clear of them)."""

from __future__ import annotations

K3S_API_PORT = 6443
CLUSTER_CIDR = "10.42.0.0/16"
"""Pod network (K3s' default, written into the server config so the fabric check reads it)."""
SERVICE_CIDR = "10.43.0.0/16"
"""Service network (K3s' default, written into the server config like :data:`CLUSTER_CIDR`)."""
NODE_PORT_RANGE = (30000, 32767)
"""K3s' (and Kubernetes') default NodePort range, open on every node's host network."""
HOST_PORTS: dict[int, str] = {
    K3S_API_PORT: "the K3s API server",
    2379: "etcd (K3s server)",
    2380: "etcd peers (K3s server)",
    8472: "flannel's VXLAN",
    10249: "kube-proxy's metrics",
    10250: "the kubelet",
    10256: "kube-proxy's health check",
}
"""Ports K3s listens on in a node's host network (K3s docs, "Inbound Rules for K3s Nodes")."""
