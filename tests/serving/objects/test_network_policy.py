"""The serving namespace's NetworkPolicies, evaluated against the pods the same render makes:
default deny; a deployment's engine port from the gateway, monitoring and its own ranks only;
its distributed-init port from its own ranks only; the gateway's port from the cluster (or
``serving_gateway_clients``). Egress: engines reach the DNS and their own ranks, the gateway the
engines, the watchdog and the memory guard the API server's address. Engines never listen on
every address. The policies are accepted by a real kube-apiserver (server-side dry run)."""

from __future__ import annotations

import copy
import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from sparkrack import contract
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.serving.deployments.bundle import from_inventory, render_serving
from sparkrack.serving.deployments.gateway import PORT as GATEWAY_PORT
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.listeners import LOOPBACK_ADDRESS
from sparkrack.serving.objects.agents import name as watchdog_name
from sparkrack.serving.objects.network import NAMESPACE_NAME_LABEL

NS = "sparkrack"
Peer = tuple[dict[str, str], str]
"""A pod as a policy sees it: its labels and its namespace."""


def admits(
    docs: Sequence[Mapping[str, Any]], target: Peer, port: int, source: Peer, ip: str = ""
) -> bool:
    """Kubernetes' ingress semantics: a pod selected by no policy takes anything; a selected pod
    takes a connection that one rule of one selecting policy allows (peer and port)."""
    labels, ns = target
    policies = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and d["metadata"]["namespace"] == ns
        and selects(d["spec"].get("podSelector", {}), labels)
    ]
    if not policies:
        return True
    for p in policies:
        for rule in p["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports and not any(q["port"] == port for q in ports):
                continue
            peers = rule.get("from")
            if peers is None or any(peer_matches(peer, source, ns, ip) for peer in peers):
                return True
    return False


def sends(
    docs: Sequence[Mapping[str, Any]], source: Peer, port: int, target: Peer, ip: str = ""
) -> bool:
    """Kubernetes' egress semantics: a pod selected by no policy with the Egress type sends
    anything; a selected pod sends what one egress rule of one such policy allows."""
    labels, ns = source
    policies = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and d["metadata"]["namespace"] == ns
        and "Egress" in d["spec"].get("policyTypes", [])
        and selects(d["spec"].get("podSelector", {}), labels)
    ]
    if not policies:
        return True
    for p in policies:
        for rule in p["spec"].get("egress", []):
            ports = rule.get("ports")
            if ports and not any(q["port"] == port for q in ports):
                continue
            peers = rule.get("to")
            if peers is None or any(peer_matches(peer, target, ns, ip) for peer in peers):
                return True
    return False


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def peer_matches(peer: Mapping[str, Any], source: Peer, policy_ns: str, ip: str) -> bool:
    labels, ns = source
    if "ipBlock" in peer:
        return bool(ip) and ipaddress.ip_address(ip) in ipaddress.ip_network(
            peer["ipBlock"]["cidr"]
        )
    ns_ok = (
        selects(peer["namespaceSelector"], {NAMESPACE_NAME_LABEL: ns})
        if "namespaceSelector" in peer
        else ns == policy_ns
    )
    pod_ok = selects(peer["podSelector"], labels) if "podSelector" in peer else True
    return ns_ok and pod_ok


def rank_pods(rendered: Mapping[str, Any]) -> dict[str, list[Peer]]:
    """Deployment -> the pods of its StatefulSets (template labels)."""
    out: dict[str, list[Peer]] = {}
    for dep in rendered["deployments"]:
        out[dep["name"]] = [
            (d["spec"]["template"]["metadata"]["labels"], NS)
            for d in dep["manifests"]
            if d["kind"] == "StatefulSet"
        ]
    return out


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    return render_serving(from_inventory("inventories/lab"))


@pytest.fixture(scope="module")
def gateway_pod(rendered: dict[str, Any]) -> Peer:
    [dep] = [d for d in rendered["gateway"]["manifests"] if d["kind"] == "Deployment"]
    return dep["spec"]["template"]["metadata"]["labels"], NS


def test_engine_ports_admit_the_gateway_monitoring_and_own_ranks_only(
    rendered: dict[str, Any], gateway_pod: Peer
) -> None:
    docs = rendered["manifests"]
    api, dist = SERVING_DEFAULTS["serving_api_port"], 20000
    pods = rank_pods(rendered)
    prometheus: Peer = ({"app": "prometheus"}, contract.MONITORING_NAMESPACE)
    stranger: Peer = ({"app": "x"}, "default")
    assert len(pods) == 3
    for name, ranks in pods.items():
        others = [p for n, ps in pods.items() if n != name for p in ps]
        for pod in ranks:
            assert admits(docs, pod, api, gateway_pod)
            assert admits(docs, pod, api, prometheus)
            assert all(admits(docs, pod, api, own) for own in ranks)
            assert not admits(docs, pod, api, stranger)
            assert not any(admits(docs, pod, api, other) for other in others)
            assert not admits(docs, pod, 12345, gateway_pod)  # any other port
            assert not admits(docs, pod, dist, gateway_pod)
            if len(ranks) > 1:
                assert all(admits(docs, pod, dist, own) for own in ranks)
                assert not any(admits(docs, pod, dist, other) for other in others)


def test_an_engine_port_admits_its_own_watchdog_only(rendered: dict[str, Any]) -> None:
    docs = rendered["manifests"]
    api, dist = SERVING_DEFAULTS["serving_api_port"], 20000
    pods = rank_pods(rendered)

    def watchdog(deployment: str) -> Peer:
        [dep] = [
            d
            for d in docs
            if d["kind"] == "Deployment" and d["metadata"]["name"] == watchdog_name(deployment)
        ]
        return dep["spec"]["template"]["metadata"]["labels"], NS

    for name, ranks in pods.items():
        head = ranks[0]
        assert admits(docs, head, api, watchdog(name))
        assert not admits(docs, head, dist, watchdog(name))
        assert not any(admits(docs, head, api, watchdog(other)) for other in pods if other != name)


def test_the_watchdog_takes_only_the_metrics_scrape_and_reaches_only_what_it_calls(
    rendered: dict[str, Any],
) -> None:
    for dep in rendered["deployments"]:
        [policy] = [
            d
            for d in dep["manifests"]
            if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == watchdog_name(dep["name"])
        ]
        [wd] = [d for d in dep["manifests"] if d["kind"] == "Deployment"]
        labels = wd["spec"]["template"]["metadata"]["labels"]
        prometheus: Peer = ({"app": "prometheus"}, contract.MONITORING_NAMESPACE)
        assert admits([policy], (labels, NS), 9464, prometheus)
        assert not admits([policy], (labels, NS), 9464, ({"app": "x"}, NS))
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        ports = sorted(
            (q["protocol"], q["port"]) for r in policy["spec"]["egress"] for q in r["ports"]
        )
        assert ports == [("TCP", 53), ("TCP", 6443), ("TCP", 30000), ("UDP", 53)]
        [probe] = [r for r in policy["spec"]["egress"] if r["ports"][0]["port"] == 30000]
        head = probe["to"][0]["podSelector"]["matchLabels"]
        assert head[contract.LABEL_RANK] == "0" and head[contract.LABEL_DEPLOYMENT] == dep["name"]
        # The API server's address at its port, no other host's.
        me: Peer = (labels, NS)
        assert sends([policy], me, 6443, ({}, ""), ip=API_SERVER)
        assert not sends([policy], me, 6443, ({}, ""), ip="172.28.250.99")
        assert not sends([policy], me, 443, ({}, ""), ip=API_SERVER)


API_SERVER = "172.28.250.10"
"""The lab's control-plane node address (inventories/lab: cp1's k3s_node_ip)."""
OUTSIDE = "203.0.113.9"


def test_the_render_knows_the_api_servers_address() -> None:
    assert from_inventory("inventories/lab").ctx.api_server == API_SERVER


def test_engines_send_to_dns_and_their_own_ranks_only(
    rendered: dict[str, Any], gateway_pod: Peer
) -> None:
    docs = rendered["manifests"]
    api, dist = SERVING_DEFAULTS["serving_api_port"], 20000
    coredns: Peer = ({"k8s-app": "kube-dns"}, "kube-system")
    pods = rank_pods(rendered)
    for name, ranks in pods.items():
        others = [p for n, ps in pods.items() if n != name for p in ps]
        for pod in ranks:
            assert sends(docs, pod, 53, coredns)
            assert not sends(docs, pod, 443, ({}, ""), ip=OUTSIDE)  # the internet, the hub
            assert not sends(docs, pod, 6443, ({}, ""), ip=API_SERVER)
            assert not sends(docs, pod, 4000, gateway_pod)
            assert not any(sends(docs, pod, p, o) for o in others for p in (api, dist))
            if len(ranks) > 1:
                assert all(sends(docs, pod, dist, own) for own in ranks)


def test_the_gateway_sends_to_the_engines_only(rendered: dict[str, Any], gateway_pod: Peer) -> None:
    docs = rendered["manifests"]
    api, dist = SERVING_DEFAULTS["serving_api_port"], 20000
    for ranks in rank_pods(rendered).values():
        assert sends(docs, gateway_pod, api, ranks[0])
        assert not sends(docs, gateway_pod, dist, ranks[0])
    assert sends(docs, gateway_pod, 53, ({"k8s-app": "kube-dns"}, "kube-system"))
    assert not sends(docs, gateway_pod, 443, ({}, ""), ip=OUTSIDE)
    assert not sends(docs, gateway_pod, 6443, ({}, ""), ip=API_SERVER)


def test_the_memory_guard_sends_to_the_api_server_only(rendered: dict[str, Any]) -> None:
    docs = rendered["manifests"]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    guard: Peer = (ds["spec"]["template"]["metadata"]["labels"], NS)
    assert sends(docs, guard, 6443, ({}, ""), ip=API_SERVER)
    assert not sends(docs, guard, 6443, ({}, ""), ip="172.28.250.99")
    assert not sends(docs, guard, 53, ({"k8s-app": "kube-dns"}, "kube-system"))
    assert not sends(docs, guard, 30000, rank_pods(rendered)["gemma"][0])


def test_negative_control_without_the_policies_every_pod_sends_anywhere(
    rendered: dict[str, Any], gateway_pod: Peer
) -> None:
    pods = rank_pods(rendered)
    engine, other = pods["gemma"][0], pods["super-vllm"][0]
    docs = rendered["manifests"]
    assert not sends(docs, engine, 30000, other)
    assert not sends(docs, engine, 443, ({}, ""), ip=OUTSIDE)
    no_policies = [d for d in docs if d["kind"] != "NetworkPolicy"]
    assert sends(no_policies, engine, 30000, other)
    assert sends(no_policies, engine, 443, ({}, ""), ip=OUTSIDE)
    # The default deny alone shuts the gateway off the engines: its own policy lets it out.
    deny_only = [
        d for d in docs if d["kind"] != "NetworkPolicy" or d["metadata"]["name"].endswith("deny")
    ]
    assert not sends(deny_only, gateway_pod, 30000, engine)


def test_the_gateway_admits_the_cluster_or_the_listed_clients(
    rendered: dict[str, Any], gateway_pod: Peer
) -> None:
    docs = rendered["manifests"]
    assert admits(docs, gateway_pod, GATEWAY_PORT, ({"app": "client"}, "default"))
    assert not admits(docs, gateway_pod, 9999, ({"app": "client"}, "default"))
    inv = from_inventory("inventories/lab")
    only = replace(inv, ctx=replace(inv.ctx, gateway_clients=("192.0.2.0/24",)))
    listed = render_serving(only)["manifests"]
    assert admits(listed, gateway_pod, GATEWAY_PORT, ({}, "default"), ip="192.0.2.7")
    assert not admits(listed, gateway_pod, GATEWAY_PORT, ({"app": "client"}, "default"))


def test_negative_control_without_the_policies_every_pod_is_open(
    rendered: dict[str, Any], gateway_pod: Peer
) -> None:
    pods = rank_pods(rendered)
    victim, attacker = pods["gemma"][0], pods["super-vllm"][0]
    docs = rendered["manifests"]
    assert not admits(docs, victim, 30000, attacker)
    no_policies = [d for d in docs if d["kind"] != "NetworkPolicy"]
    assert admits(no_policies, victim, 30000, attacker)
    # The default deny alone shuts even the gateway out: the deployment's policy lets it in.
    deny_only = [
        d for d in docs if d["kind"] != "NetworkPolicy" or d["metadata"]["name"].endswith("deny")
    ]
    assert not admits(deny_only, victim, 30000, gateway_pod)


def http_on_every_address(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Containers that pass 0.0.0.0 (every address, the fabric VF included) to a server."""
    out = []
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            if "0.0.0.0" in json.dumps([c.get("command", []), c.get("args", [])]):
                out.append(f"{doc['metadata']['name']}/{c['name']}")
    return out


def test_no_engine_listens_on_every_address(rendered: dict[str, Any]) -> None:
    assert http_on_every_address(rendered["manifests"]) == []
    for dep in rendered["deployments"]:
        for d in dep["manifests"]:
            if d["kind"] == "StatefulSet":
                engine_c = d["spec"]["template"]["spec"]["containers"][0]
                args = engine_c["args"]
                # a gated engine listens on loopback behind its gate (test_engine_gate.py)
                gated = engine_of({"engine": engine_c["name"]}).gated
                host = LOOPBACK_ADDRESS if gated else f"$({contract.POD_IP_ENV})"
                assert args[args.index("--host") + 1] == host
    # Negative control: the seeds' --host 0.0.0.0 is caught.
    bad = copy.deepcopy(rendered["deployments"][0]["manifests"])
    sts = next(d for d in bad if d["kind"] == "StatefulSet")
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--host") + 1] = "0.0.0.0"
    assert http_on_every_address(bad) == [f"{sts['metadata']['name']}/sglang"]


def test_the_api_server_accepts_every_policy(kube_api: Any, rendered: dict[str, Any]) -> None:
    from kubernetes import client

    ns = kube_api.namespace("netpol")
    api = client.NetworkingV1Api(kube_api.client())
    policies = [d for d in rendered["manifests"] if d["kind"] == "NetworkPolicy"]
    # The namespace's default deny, the gateway's, the memory guard's, and per deployment its
    # engine's and its watchdog's.
    assert len(policies) == 3 + 2 * len(rendered["deployments"])
    for doc in policies:
        body = copy.deepcopy(doc)
        body["metadata"]["namespace"] = ns
        api.create_namespaced_network_policy(ns, body, dry_run="All")
    # Negative control: the server refuses a malformed policy.
    bad = copy.deepcopy(policies[1])
    bad["metadata"]["namespace"] = ns
    bad["spec"]["ingress"][0]["ports"][0]["protocol"] = "ICMP"
    with pytest.raises(client.ApiException):
        api.create_namespaced_network_policy(ns, bad, dry_run="All")
