"""Who may reach a serving pod, and whom it may reach: the NetworkPolicies of the serving
namespace and of the agents' namespace.

Every pod of either namespace refuses inbound traffic and sends none by default. A deployment's policy
is derived from its engine's listeners (:mod:`sparkrack.serving.engines.listeners`): each listener
bound on the pod's cluster address at a fixed port admits the peers it declares there (the engine
port: the gateway, the monitoring namespace, the deployment's own ranks and its watchdog; the
distributed-init port: its own ranks). The same rows give the egress, so both ends of every
connection have one owner: a rank sends to its own ranks at the ports that admit them, the gateway
to each deployment's ports that admit it; every pod that resolves a name reaches the cluster DNS. A
deployment's fetch pod on the cluster network (one Spark: it downloads, pushes nothing) reaches the
DNS and the Hub's port on every address outside the cluster (:func:`fetch_policy`). The gateway's
port takes its callers from ``serving_gateway_clients`` (CIDR blocks), else from every pod of the
cluster. Policies act on the pod's cluster interface; the fabric VF that Multus adds is outside
them, and every connection between ranks goes there (:mod:`sparkrack.serving.objects.connections`
refuses one that would not).
"""

from __future__ import annotations

from typing import Any

from sparkrack import contract
from sparkrack.contract import K3S_API_PORT
from sparkrack.serving.agent_settings import labels as watchdog_labels
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines.listeners import Bind, Peer
from sparkrack.serving.objects.pod import meta
from sparkrack.serving.resolution import Resolution

DEFAULT_DENY = f"{contract.OBJECT_PREFIX}-default-deny"
GATEWAY_POLICY = f"{contract.OBJECT_PREFIX}-gateway"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
GATEWAY_LABELS = {**contract.PART_OF, contract.LABEL_COMPONENT: contract.COMPONENT_GATEWAY}
DNS_PORT = 53
DNS_LABELS = {"k8s-app": "kube-dns"}
"""CoreDNS of K3s (kube-system)."""
HUB_PORT = 443
"""The Hugging Face Hub's port: the download uses huggingface_hub's default HTTPS endpoint (no
inventory variable moves it, and a profile may not set ``HF_ENDPOINT``)."""
EVERYWHERE = "0.0.0.0/0"


def policy(
    name: str,
    ns: str,
    labels: dict[str, str],
    selector: dict[str, str],
    ingress: list[Any],
    egress: list[Any] | None = None,
) -> dict[str, Any]:
    """A policy of ``selector``'s pods: ``ingress`` admitted; with ``egress`` (a list, maybe
    empty) that and nothing else sent, else sending is left to the other policies."""
    types = ["Ingress"] if egress is None else ["Ingress", "Egress"]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(name, ns, labels),
        "spec": {
            "podSelector": {"matchLabels": dict(selector)} if selector else {},
            "policyTypes": types,
            **({"ingress": ingress} if ingress else {}),
            **({"egress": egress} if egress else {}),
        },
    }


def tcp(port: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port}]


def dns() -> dict[str, Any]:
    """Egress to the cluster DNS (CoreDNS in kube-system), TCP and UDP."""
    coredns = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}},
        "podSelector": {"matchLabels": dict(DNS_LABELS)},
    }
    return {"to": [coredns], "ports": [*tcp(DNS_PORT), {"protocol": "UDP", "port": DNS_PORT}]}


def api_server(address: str) -> list[dict[str, Any]]:
    """Egress to the API server: its node ``address`` at the API port, no other host (the API
    Service's address is translated to it before a policy sees the packet). None without an
    address: no inventory, no API."""
    if not address:
        return []
    return [{"to": [{"ipBlock": {"cidr": f"{address}/32"}}], "ports": tcp(K3S_API_PORT)}]


def outside_cluster(api_address: str, port: int) -> dict[str, Any]:
    """Egress at ``port`` to every address outside the cluster: not the pod or service networks,
    not the API server's node ``address``."""
    inside = [contract.CLUSTER_CIDR, contract.SERVICE_CIDR]
    inside += [f"{api_address}/32"] if api_address else []
    return {"to": [{"ipBlock": {"cidr": EVERYWHERE, "except": inside}}], "ports": tcp(port)}


def default_deny(namespace: str) -> dict[str, Any]:
    """No traffic to or from any pod of ``namespace`` unless a policy below allows it."""
    return policy(DEFAULT_DENY, namespace, dict(contract.PART_OF), {}, [], [])


def in_namespace(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """A peer entry: the pods labelled ``labels`` of ``namespace`` (the serving namespace's
    policies name the agents' pods this way, and the agents' policies the engines)."""
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "podSelector": {"matchLabels": dict(labels)},
    }


def peer_selectors(res: Resolution, peers: tuple[Peer, ...]) -> list[dict[str, Any]]:
    """The ``from`` entries of the peers that reach a pod over the cluster network (the kubelet
    and the pod itself need none)."""
    ctx = res.ctx
    out: list[dict[str, Any]] = []
    for peer in peers:
        if peer is Peer.GATEWAY:
            out.append(in_namespace(ctx.agents_namespace, GATEWAY_LABELS))
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
            out.append(in_namespace(ctx.agents_namespace, watchdog_labels(res.name)))
    return out


def peer_ports(res: Resolution, peer: Peer) -> list[int]:
    """The ports of the engine's cluster listeners that admit ``peer``: where ``peer`` sends."""
    ctx = res.ctx
    ports: list[int] = []
    for row in res.engine.listeners(ctx):
        port = row.port_of(ctx.api_port, ctx.dist_port)
        if port is None or row.bind not in (Bind.CLUSTER, Bind.ALL) or peer not in row.peers:
            continue
        ports += [] if port in ports else [port]
    return ports


def sends_to(res: Resolution, peer: Peer) -> list[dict[str, Any]]:
    """The egress of ``peer`` to the deployment's pods: the ports its listeners admit it at (a
    rank's own ranks in its namespace; an agent's, from the agents' namespace)."""
    ports = peer_ports(res, peer)
    if not ports:
        return []
    own = {"podSelector": {"matchLabels": dict(res.labels)}}
    to = [own if peer is Peer.RANKS else in_namespace(res.ctx.namespace, res.labels)]
    return [{"to": to, "ports": [p for port in ports for p in tcp(port)]}]


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
    """In: each port the engine's listeners bind on the cluster address, from their peers. Out:
    the cluster DNS and the deployment's own ranks at the ports that admit them."""
    ctx = res.ctx
    ingress = [{"from": peers, "ports": tcp(port)} for port, peers in cluster_ports(res).items()]
    egress = [dns(), *sends_to(res, Peer.RANKS)]
    return policy(res.names.headless, ctx.namespace, res.labels, res.labels, ingress, egress)


def fetch_policy(res: Resolution, pod_labels: dict[str, str]) -> dict[str, Any]:
    """The policy of a deployment's fetch pod on the cluster network (``pod_labels``, the fetch
    Job's): nothing in; out, the cluster DNS and the Hub's port outside the cluster. The Hub
    hands out redirects to its CDN and Xet storage hosts, whose addresses are no fixed set a
    policy could list: so the port on every address outside the cluster. Labelled as a serving
    object of the deployment: removed with it."""
    egress = [dns(), outside_cluster(res.ctx.api_server, HUB_PORT)]
    return policy(res.names.fetch, res.ctx.namespace, res.labels, pod_labels, [], egress)


def gateway_policy(ctx: ServingContext, port: int, engines: list[Resolution]) -> dict[str, Any]:
    """In: the gateway's port from ``serving_gateway_clients`` (CIDR blocks), else from every pod
    of the cluster. Out: the cluster DNS and each deployment's engines at the ports that admit
    the gateway."""
    clients = [{"ipBlock": {"cidr": c}} for c in ctx.gateway_clients] or [{"namespaceSelector": {}}]
    ingress = [{"from": clients, "ports": tcp(port)}]
    egress = [dns(), *(rule for res in engines for rule in sends_to(res, Peer.GATEWAY))]
    return policy(
        GATEWAY_POLICY, ctx.agents_namespace, GATEWAY_LABELS, GATEWAY_LABELS, ingress, egress
    )
