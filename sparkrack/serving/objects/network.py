"""Who may reach a serving pod: the serving namespace's NetworkPolicies.

Every pod of the namespace refuses inbound traffic by default. A deployment's engine port takes
connections from the gateway, the monitoring namespace (Prometheus), the deployment's watchdog
and the deployment's own ranks only; its distributed-init port from its own ranks only. The gateway's port takes them
from ``serving_gateway_clients`` (CIDR blocks), else from every pod of the cluster. Policies act
on the pod's cluster interface; the fabric VF that Multus adds is outside them (NCCL's traffic
stays on the fabric, which the address plan keeps to the Sparks).
"""

from __future__ import annotations

from typing import Any

from sparkrack import contract
from sparkrack.serving.context import ServingContext
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


def deployment_policy(res: Resolution) -> dict[str, Any]:
    """The engine port from the gateway, monitoring and the deployment's own ranks; the
    distributed-init port from the deployment's own ranks."""
    ctx, own = res.ctx, {"podSelector": {"matchLabels": dict(res.labels)}}
    engine_from = [
        {"podSelector": {"matchLabels": dict(GATEWAY_LABELS)}},
        {
            "namespaceSelector": {
                "matchLabels": {NAMESPACE_NAME_LABEL: contract.MONITORING_NAMESPACE}
            }
        },
        own,
    ]
    if ctx.watchdog is not None:
        # The deployment's own watchdog probes its engine.
        engine_from.append({"podSelector": {"matchLabels": watchdog_labels(res.name)}})
    ingress: list[dict[str, Any]] = [{"from": engine_from, "ports": tcp(ctx.api_port)}]
    if res.engine.uses_fabric:
        ingress.append({"from": [own], "ports": tcp(ctx.dist_port)})
    return policy(res.names.headless, ctx.namespace, res.labels, res.labels, ingress)


def gateway_policy(ctx: ServingContext, port: int) -> dict[str, Any]:
    """The gateway's port from ``serving_gateway_clients`` (CIDR blocks), else from every pod of
    the cluster."""
    clients = [{"ipBlock": {"cidr": c}} for c in ctx.gateway_clients] or [{"namespaceSelector": {}}]
    ingress = [{"from": clients, "ports": tcp(port)}]
    return policy(GATEWAY_POLICY, ctx.namespace, GATEWAY_LABELS, GATEWAY_LABELS, ingress)
