"""Who may reach a serving pod: the serving namespace's NetworkPolicies.

Every pod of the namespace refuses inbound traffic by default. A deployment's policy is derived
from its engine's listeners (:mod:`sparkrack.serving.engines.listeners`): each listener bound on
the pod's cluster address at a fixed port admits the peers it declares there (the engine port:
the gateway, the monitoring namespace, the deployment's own ranks and its watchdog; the
distributed-init port: its own ranks). The gateway's port takes them from
``serving_gateway_clients`` (CIDR blocks), else from every pod of the cluster. Policies act on the
pod's cluster interface; the fabric VF that Multus adds is outside them, and every connection
between ranks goes there (:mod:`sparkrack.serving.objects.connections` refuses one that would not).
"""

from __future__ import annotations

from typing import Any

from sparkrack import contract
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines.listeners import Bind, Peer
from sparkrack.serving.objects.pod import meta
from sparkrack.serving.resolution import Resolution
from sparkrack.watch.settings import labels as watchdog_labels

DEFAULT_DENY = f"{contract.OBJECT_PREFIX}-default-deny"
GATEWAY_POLICY = f"{contract.OBJECT_PREFIX}-gateway"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
GATEWAY_LABELS = {**contract.PART_OF, contract.LABEL_COMPONENT: contract.COMPONENT_GATEWAY}


def policy(
    name: str, ns: str, labels: dict[str, str], selector: dict[str, str], ingress: list[Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(name, ns, labels),
        "spec": {
            "podSelector": {"matchLabels": dict(selector)} if selector else {},
            "policyTypes": ["Ingress"],
            **({"ingress": ingress} if ingress else {}),
        },
    }


def tcp(port: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port}]


def default_deny(ctx: ServingContext) -> dict[str, Any]:
    """No inbound traffic to any pod of the namespace unless a policy below lets it in."""
    return policy(DEFAULT_DENY, ctx.namespace, dict(contract.PART_OF), {}, [])


def peer_selectors(res: Resolution, peers: tuple[Peer, ...]) -> list[dict[str, Any]]:
    """The ``from`` entries of the peers that reach a pod over the cluster network (the kubelet
    and the pod itself need none)."""
    ctx = res.ctx
    out: list[dict[str, Any]] = []
    for peer in peers:
        if peer is Peer.GATEWAY:
            out.append({"podSelector": {"matchLabels": dict(GATEWAY_LABELS)}})
        elif peer is Peer.MONITORING:
            out.append(
                {
                    "namespaceSelector": {
                        "matchLabels": {NAMESPACE_NAME_LABEL: contract.MONITORING_NAMESPACE}
                    }
                }
            )
        elif peer is Peer.RANKS:
            out.append({"podSelector": {"matchLabels": dict(res.labels)}})
        elif peer is Peer.WATCHDOG and ctx.watchdog is not None:
            out.append({"podSelector": {"matchLabels": watchdog_labels(res.name)}})
    return out


def cluster_ports(res: Resolution) -> dict[int, list[dict[str, Any]]]:
    """Port -> who may connect, for every listener of the engine bound on the pod's cluster
    address at a fixed port (the policy's ingress)."""
    ctx = res.ctx
    ports: dict[int, list[dict[str, Any]]] = {}
    for row in res.engine.listeners(ctx):
        port = row.port_of(ctx.api_port, ctx.dist_port)
        if port is None or row.bind not in (Bind.CLUSTER, Bind.ALL):
            continue
        admitted = ports.setdefault(port, [])
        admitted += [p for p in peer_selectors(res, row.peers) if p not in admitted]
    return {port: peers for port, peers in ports.items() if peers}


def deployment_policy(res: Resolution) -> dict[str, Any]:
    """Each port the engine's listeners bind on the cluster address, from their peers."""
    ctx = res.ctx
    ingress = [{"from": peers, "ports": tcp(port)} for port, peers in cluster_ports(res).items()]
    return policy(res.names.headless, ctx.namespace, res.labels, res.labels, ingress)


def gateway_policy(ctx: ServingContext, port: int) -> dict[str, Any]:
    """The gateway's port from ``serving_gateway_clients`` (CIDR blocks), else from every pod of
    the cluster."""
    clients = [{"ipBlock": {"cidr": c}} for c in ctx.gateway_clients] or [{"namespaceSelector": {}}]
    ingress = [{"from": clients, "ports": tcp(port)}]
    return policy(GATEWAY_POLICY, ctx.namespace, GATEWAY_LABELS, GATEWAY_LABELS, ingress)
