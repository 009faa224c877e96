"""Every connection between a deployment's ranks, checked against what was rendered for it.

For each listener the engine declares (:mod:`sparkrack.serving.engines.listeners`) that other
ranks connect to, this reads the rank's rendered environment the way the engine reads it and says
where the listener binds. A listener on the rank's fabric address is outside every policy (the
Multus VF). One on the cluster network must be admitted, from the deployment's own ranks, by the
deployment's NetworkPolicy at its port, and sent to by the same policy's egress; at a random port no policy can admit it, so the connection
would be dropped by K3s's policy controller and the ranks would never finish init. Each such
connection is refused, naming the ranks, the address and port, the policy and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem
from sparkrack.serving.engines.listeners import Bind, Listener, Peer
from sparkrack.serving.resolution import Resolution

RULE = "rank-connections"


@dataclass(frozen=True)
class Connection:
    """One connection a rank makes to another rank's listener."""

    source: int
    """The rank that connects."""
    target: int
    """The rank that listens."""
    listener: Listener
    network: Bind
    """The network the listener is reached on, as the rendered environment makes it bind."""
    address: str
    port: int | None

    def line(self) -> str:
        port = "<random port>" if self.port is None else str(self.port)
        return (
            f"rank {self.source} -> rank {self.target} {self.address}:{port} ({self.listener.name})"
        )


def rendered_env(doc: Mapping[str, Any]) -> dict[str, str]:
    """The literal variables of a StatefulSet's first container."""
    container = doc["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}


def bind_network(listener: Listener, env: Mapping[str, str], fabric_address: str) -> Bind:
    """Where a listener binds, given the rank's environment: the first of its variables that is
    set decides (the rank's fabric address or the fabric interface: the fabric; anything else:
    not the fabric); none set: the engine's fallback."""
    if not listener.chosen_by:
        return listener.reached_on()
    for name in listener.chosen_by:
        value = env.get(name)
        if value:
            fabric = value in (fabric_address, contract.POD_FABRIC_IFNAME)
            return Bind.FABRIC if fabric else Bind.CLUSTER
    return listener.fallback or listener.bind


def connections(res: Resolution, objects: Iterable[Mapping[str, Any]]) -> list[Connection]:
    """Every rank-to-rank connection the rendered StatefulSets make, per the declaration."""
    ctx = res.ctx
    sets = {
        doc["metadata"]["name"]: doc
        for doc in objects
        if doc.get("kind") == "StatefulSet"
        and doc["metadata"]["name"] in {res.names.statefulset(r.rank) for r in res.ranks}
    }
    out: list[Connection] = []
    if len(res.ranks) < 2:
        return out
    for target in res.ranks:
        env = rendered_env(sets[res.names.statefulset(target.rank)])
        fabric = ctx.rank_address(target.node)
        for row in res.engine.listeners(ctx):
            if Peer.RANKS not in row.peers or not row.on_rank(target.rank):
                continue
            network = bind_network(row, env, fabric)
            address = fabric if network is Bind.FABRIC else f"{res.names.pod(target.rank)} (eth0)"
            port = row.port_of(ctx.api_port, ctx.dist_port)
            out += [
                Connection(source.rank, target.rank, row, network, address, port)
                for source in res.ranks
                if source.rank != target.rank
            ]
    return out


def _allows(
    rules: Iterable[Mapping[str, Any]], side: str, labels: Mapping[str, str], port: int | None
) -> bool:
    if port is None:
        return False
    for rule in rules:
        ports = [p.get("port") for p in rule.get("ports", [])]
        if ports and port not in ports:
            continue
        for peer in rule.get(side, []):
            if set(peer) != {"podSelector"}:
                continue
            wanted = peer["podSelector"].get("matchLabels", {})
            if all(labels.get(k) == v for k, v in wanted.items()):
                return True
    return False


def admits(policy: Mapping[str, Any], labels: Mapping[str, str], port: int | None) -> bool:
    """The policy lets a pod labelled ``labels`` of its namespace connect at ``port``."""
    return _allows(policy.get("spec", {}).get("ingress", []), "from", labels, port)


def sends(policy: Mapping[str, Any], labels: Mapping[str, str], port: int | None) -> bool:
    """The policy lets its pods connect to a pod labelled ``labels`` of its namespace at
    ``port`` (the namespace denies every other egress)."""
    return _allows(policy.get("spec", {}).get("egress", []), "to", labels, port)


def connection_problems(res: Resolution, objects: Iterable[Mapping[str, Any]]) -> list[Problem]:
    """A refusal per connection between ranks that would cross the cluster network without the
    deployment's policy admitting it."""
    docs = list(objects)
    policies = {doc["metadata"]["name"]: doc for doc in docs if doc.get("kind") == "NetworkPolicy"}
    policy = policies.get(res.names.headless, {})
    problems: list[Problem] = []
    for conn in connections(res, docs):
        if conn.network is Bind.FABRIC:
            continue
        labels = {**res.labels, contract.LABEL_RANK: str(conn.source)}
        target = {**res.labels, contract.LABEL_RANK: str(conn.target)}
        if admits(policy, labels, conn.port) and sends(policy, target, conn.port):
            continue
        variables = conn.listener.chosen_by
        fix = (
            f"{variables[0]} must be the rank's own fabric address, which sparkrack renders from "
            f"the address plan: keep {', '.join(variables)} out of the profile's env"
            if variables
            else "bind it on the fabric, or admit the deployment's ranks at its port"
        )
        problems.append(
            Problem(
                res.profile.source,
                f"deployment {res.name}",
                f"{conn.line()} binds on the cluster network and would be dropped by "
                f"NetworkPolicy {res.names.headless}: the ranks would never finish init",
                fix,
                RULE,
            )
        )
    return problems
