"""The rendered NetworkPolicies as a packet filter: the rehearsal's stand-in for kube-router.

K3s enforces NetworkPolicies with its embedded kube-router controller, which filters each pod's
cluster interface. The rehearsal gives every rank the address its pod has on the cluster network
(in the lab: the Spark's management address) and evaluates the rendered policies for every pair
of rehearsed pods: which TCP ports a source pod may open on a destination pod. The result is an
iptables chain in the destination Spark's network namespace; a connection the policies refuse
goes to a drop chain named after the policy that selects the destination pod, whose counters
say which connection was dropped and by which policy. Traffic to the fabric addresses, and
traffic from hosts that are not rehearsed pods, is not touched (policies act on the pod's cluster
interface only; Multus' fabric interface is outside them).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkrack.errors import Problem, SparkrackError

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
FILTER_CHAIN = "SR-KUBE-ROUTER"
"""The chain that stands in for kube-router's NetworkPolicy filter in a Spark's namespace."""
STANDIN = "kube-router stand-in (iptables)"


@dataclass(frozen=True)
class Pod:
    """A rehearsed rank's pod as the policies see it."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    ip: str
    """Its cluster address (policies filter this one)."""


@dataclass(frozen=True)
class Admission:
    """What the policies let ``source`` open on ``dest``."""

    source: Pod
    dest: Pod
    ports: frozenset[tuple[int, int]] | None
    """TCP port ranges admitted, first and last port included (None: every port)."""
    policies: tuple[str, ...]
    """Policies that select ``dest`` (empty: no policy, everything is admitted), most
    specific first."""

    def admits(self, port: int) -> bool:
        return self.ports is None or any(lo <= port <= hi for lo, hi in self.ports)

    @property
    def policy(self) -> str:
        """The policy a refused connection is charged to: the most specific selector."""
        return self.policies[0] if self.policies else ""


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str], where: str) -> bool:
    """A LabelSelector against labels (matchLabels and matchExpressions In/NotIn/Exists)."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise SparkrackError(
                Problem(where, "matchExpressions", f"unknown operator {op}", "use In/NotIn/Exists")
            )
    return True


def _peer_admits(peer: Mapping[str, Any], source: Pod, policy_ns: str, where: str) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        addr = ipaddress.ip_address(source.ip)
        if addr not in ipaddress.ip_network(block["cidr"], strict=False):
            return False
        return not any(
            addr in ipaddress.ip_network(c, strict=False) for c in block.get("except") or []
        )
    pod_sel = peer.get("podSelector")
    ns_sel = peer.get("namespaceSelector")
    if ns_sel is None:
        if source.namespace != policy_ns:
            return False
    elif not _matches(ns_sel, {NAMESPACE_NAME_LABEL: source.namespace}, where):
        return False
    return _matches(pod_sel, source.labels, where) if pod_sel is not None else True


def _rule_ports(rule: Mapping[str, Any], where: str) -> frozenset[tuple[int, int]] | None:
    ports = rule.get("ports")
    if not ports:
        return None
    out: set[tuple[int, int]] = set()
    for entry in ports:
        if entry.get("protocol", "TCP") != "TCP":
            continue
        port = entry.get("port")
        if not isinstance(port, int):
            raise SparkrackError(
                Problem(where, "ports", f"port {port!r} is not a number", "use a numeric port")
            )
        end = entry.get("endPort", port)
        out.add((port, int(end)))
    return frozenset(out)


def admission(policies: Sequence[Mapping[str, Any]], source: Pod, dest: Pod) -> Admission:
    """The ports ``source`` may open on ``dest`` under ``policies`` (Kubernetes semantics: the
    union of the ingress rules of every Ingress policy that selects ``dest``)."""
    selecting: list[tuple[int, str, Mapping[str, Any]]] = []
    for doc in policies:
        if doc.get("kind") != "NetworkPolicy":
            continue
        meta, spec = doc["metadata"], doc.get("spec") or {}
        if meta.get("namespace") != dest.namespace:
            continue
        types = spec.get("policyTypes") or ["Ingress"]
        where = f"NetworkPolicy {meta['name']}"
        if "Ingress" in types and _matches(spec.get("podSelector") or {}, dest.labels, where):
            specificity = len((spec.get("podSelector") or {}).get("matchLabels") or {})
            selecting.append((specificity, str(meta["name"]), spec))
    if not selecting:
        return Admission(source, dest, None, ())
    selecting.sort(key=lambda s: (-s[0], s[1]))
    admitted: set[tuple[int, int]] = set()
    for _spec_len, name, spec in selecting:
        where = f"NetworkPolicy {name}"
        for rule in spec.get("ingress") or []:
            peers = rule.get("from")
            if peers and not any(_peer_admits(p, source, dest.namespace, where) for p in peers):
                continue
            ports = _rule_ports(rule, where)
            if ports is None:
                return Admission(source, dest, None, tuple(n for _l, n, _s in selecting))
            admitted |= ports
    return Admission(source, dest, frozenset(admitted), tuple(n for _l, n, _s in selecting))


def drop_chain(policy: str) -> str:
    """The drop chain of ``policy`` (iptables chain names are at most 28 characters)."""
    name = f"SRD-{policy}"
    if len(name) <= 28:
        return name
    return f"SRD-{policy[:15]}-{hashlib.sha256(policy.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Filter:
    """The iptables rules of one Spark's namespace: ``commands`` install them, ``teardown``
    removes them (each an iptables argv without the binary)."""

    commands: tuple[tuple[str, ...], ...]
    teardown: tuple[tuple[str, ...], ...]
    chains: Mapping[str, str]
    """Drop chain -> the policy it stands for."""


def spark_filter(admissions: Sequence[Admission]) -> Filter:
    """The filter of one Spark: every admission here has a destination pod on it."""
    cmds: list[tuple[str, ...]] = [("-N", FILTER_CHAIN)]
    chains: dict[str, str] = {}
    dests = sorted({a.dest.ip for a in admissions})
    cmds.append(
        ("-A", FILTER_CHAIN, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN")
    )
    for a in sorted(admissions, key=lambda a: (a.dest.ip, a.source.ip)):
        if a.source.ip == a.dest.ip:
            continue  # a pod to itself never crosses its cluster interface
        pair = ("-s", a.source.ip, "-d", a.dest.ip)
        if a.ports is None:
            cmds.append(("-A", FILTER_CHAIN, *pair, "-j", "RETURN"))
            continue
        for lo, hi in sorted(a.ports):
            dport = str(lo) if lo == hi else f"{lo}:{hi}"
            cmds.append(("-A", FILTER_CHAIN, *pair, "-p", "tcp", "--dport", dport, "-j", "RETURN"))
        chain = drop_chain(a.policy)
        if chain not in chains:
            chains[chain] = a.policy
            cmds.insert(0, ("-N", chain))
        cmds.append(("-A", FILTER_CHAIN, *pair, "-j", chain))
    for chain in chains:
        cmds.append(("-A", chain, "-j", "DROP"))
    for ip in dests:
        cmds.append(("-I", "INPUT", "1", "-d", ip, "-j", FILTER_CHAIN))
    teardown: list[tuple[str, ...]] = [
        ("-D", "INPUT", "-d", ip, "-j", FILTER_CHAIN) for ip in dests
    ]
    teardown += [("-F", FILTER_CHAIN), ("-X", FILTER_CHAIN)]
    for chain in chains:
        teardown += [("-F", chain), ("-X", chain)]
    return Filter(tuple(cmds), tuple(teardown), chains)


def witness(chain: str, source: str, dest: str, port: int) -> tuple[str, ...]:
    """A counting rule (no target) for one connection, put first in a drop chain: its packet
    counter says whether the policy dropped exactly that connection."""
    return ("-I", chain, "1", "-s", source, "-d", dest, "-p", "tcp", "--dport", str(port))


def witness_count(listing: str, source: str, dest: str, port: int) -> int:
    """Packets counted by the witness rule of one connection in ``iptables -L CHAIN -nvx``."""
    for line in listing.splitlines():
        words = line.split()
        if (
            len(words) >= 8
            and words[0].isdigit()
            and f"dpt:{port}" in words
            and source in words
            and dest in words
            and "DROP" not in words
        ):
            return int(words[0])
    return 0
