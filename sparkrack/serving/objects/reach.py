"""Who can reach what: the NetworkPolicies of a render, written out as one Markdown table.

docs/architecture.md carries the table of every object the lab inventory's render applies (the
fetch objects included, :func:`~sparkrack.serving.deployments.bundle.in_apply_order`) between the
markers below;
``tests/serving/objects/test_reach_table.py`` regenerates it and fails on drift. Each row is one
policy: the pods it selects, what it admits in and what it lets out. Peers are named from their
selectors (the component, deployment and rank labels; the namespace; an address block).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sparkrack import contract
from sparkrack.contract import K3S_API_PORT
from sparkrack.serving.objects.network import DNS_LABELS, NAMESPACE_NAME_LABEL

TABLE_BEGIN = (
    "<!-- reach: begin (written from sparkrack/serving/objects/reach.py over the render of "
    "inventories/lab) -->"
)
TABLE_END = "<!-- reach: end -->"


def pods(labels: Mapping[str, str]) -> str:
    """The pods a label selector picks, in words."""
    if not labels:
        return "every pod of the namespace"
    if dict(labels) == DNS_LABELS:
        return "the cluster DNS"
    component = labels.get(contract.LABEL_COMPONENT, "")
    deployment = labels.get(contract.LABEL_DEPLOYMENT)
    rank = labels.get(contract.LABEL_RANK)
    if component == contract.COMPONENT_SERVING and deployment:
        return f"{deployment}'s rank {rank}" if rank else f"{deployment}'s ranks"
    if component and deployment:
        return f"{deployment}'s {component}"
    if component:
        return f"the {component}"
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def peer(entry: Mapping[str, Any], ports: list[int]) -> str:
    """One ``from``/``to`` entry in words."""
    if "ipBlock" in entry:
        cidr, inside = entry["ipBlock"]["cidr"], entry["ipBlock"].get("except", [])
        if inside:
            return f"{cidr} except {', '.join(inside)}"
        return f"the API server ({cidr})" if ports == [K3S_API_PORT] else cidr
    selected = entry.get("podSelector", {}).get("matchLabels", {})
    if "namespaceSelector" not in entry:
        return pods(selected)
    names = entry["namespaceSelector"].get("matchLabels", {})
    if not names:
        return "every pod of the cluster"
    namespace = names.get(NAMESPACE_NAME_LABEL, str(names))
    if selected:
        return f"{pods(selected)} ({namespace})"
    return f"namespace {namespace}"


def rules(entries: Iterable[Mapping[str, Any]], side: str) -> str:
    """A policy's ingress (``from``) or egress (``to``) rules, one per ``<br>``."""
    out = []
    for rule in entries:
        ports = [int(p["port"]) for p in rule.get("ports", [])]
        shown = sorted({f"{p['port']}/{p.get('protocol', 'TCP')}" for p in rule.get("ports", [])})
        who = ", ".join(peer(e, sorted(set(ports))) for e in rule.get(side, [])) or "anyone"
        out.append(f"{who} at {', '.join(shown)}" if shown else who)
    return "<br>".join(out) or "nothing"


def reach_table(manifests: Iterable[Mapping[str, Any]]) -> str:
    """The table of every NetworkPolicy of ``manifests``, in render order, with its markers."""
    lines = [
        TABLE_BEGIN,
        "| pods | namespace/policy | may be reached by | may reach |",
        "|---|---|---|---|",
    ]
    for doc in manifests:
        if doc.get("kind") != "NetworkPolicy":
            continue
        spec = doc["spec"]
        types = spec.get("policyTypes", [])
        selected = pods(spec.get("podSelector", {}).get("matchLabels", {}))
        inbound = rules(spec.get("ingress", []), "from") if "Ingress" in types else "(not limited)"
        outbound = rules(spec.get("egress", []), "to") if "Egress" in types else "(not limited)"
        where = f"{doc['metadata']['namespace']}/{doc['metadata']['name']}"
        lines.append(f"| {selected} | `{where}` | {inbound} | {outbound} |")
    lines.append(TABLE_END)
    return "\n".join(lines)


def shipped(text: str) -> str:
    """The table between the markers of a page's ``text``."""
    start = text.index(TABLE_BEGIN)
    return text[start : text.index(TABLE_END, start) + len(TABLE_END)]
