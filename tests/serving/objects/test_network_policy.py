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
from sparkrack.serving.deployments.bundle import from_inventory, in_apply_order, render_serving
from sparkrack.serving.deployments.gateway import PORT as GATEWAY_PORT
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.listeners import LOOPBACK_ADDRESS
from sparkrack.serving.objects.agents import name as watchdog_name
from sparkrack.serving.objects.network import NAMESPACE_NAME_LABEL

NS = "sparkrack"
AGENTS = "sparkrack-agents"
"""The lab's serving namespace and the agents' namespace beside it."""
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
        if not ip:
            return False
        address, block = ipaddress.ip_address(ip), peer["ipBlock"]
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(inside) for inside in block.get("except", [])
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
    assert dep["metadata"]["namespace"] == AGENTS
    return dep["spec"]["template"]["metadata"]["labels"], AGENTS


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
            # The gateway's labels on a pod of the privileged serving namespace open nothing.
            assert not admits(docs, pod, api, (gateway_pod[0], NS))
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
        return dep["spec"]["template"]["metadata"]["labels"], dep["metadata"]["namespace"]

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
        assert policy["metadata"]["namespace"] == wd["metadata"]["namespace"] == AGENTS
        assert admits([policy], (labels, AGENTS), 9464, prometheus)
        assert not admits([policy], (labels, AGENTS), 9464, ({"app": "x"}, AGENTS))
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        ports = sorted(
            (q["protocol"], q["port"]) for r in policy["spec"]["egress"] for q in r["ports"]
        )
        assert ports == [("TCP", 53), ("TCP", 6443), ("TCP", 30000), ("UDP", 53)]
        [probe] = [r for r in policy["spec"]["egress"] if r["ports"][0]["port"] == 30000]
        head = probe["to"][0]["podSelector"]["matchLabels"]
        assert head[contract.LABEL_RANK] == "0" and head[contract.LABEL_DEPLOYMENT] == dep["name"]
        [rank0] = [
            (d["spec"]["template"]["metadata"]["labels"], NS)
            for d in dep["manifests"]
            if d["kind"] == "StatefulSet"
            and d["spec"]["template"]["metadata"]["labels"][contract.LABEL_RANK] == "0"
        ]
        me: Peer = (labels, AGENTS)
        # Rank 0 of its own deployment, in the serving namespace; not the same labels elsewhere.
        assert sends([policy], me, 30000, rank0)
        assert not sends([policy], me, 30000, (rank0[0], AGENTS))
        # The API server's address at its port, no other host's.
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
    assert ds["metadata"]["namespace"] == AGENTS
    guard: Peer = (ds["spec"]["template"]["metadata"]["labels"], AGENTS)
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


def pod_templates(docs: Sequence[Mapping[str, Any]]) -> list[tuple[str, Peer, bool]]:
    """(object name, pod as a policy sees it, on the host network) of every pod template."""
    out = []
    for d in docs:
        template = d.get("spec", {}).get("template")
        if template is not None:
            host = bool(template["spec"].get("hostNetwork"))
            labels = template["metadata"]["labels"]
            out.append((d["metadata"]["name"], (labels, d["metadata"]["namespace"]), host))
    return out


def not_let_out(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Pods on the cluster network that connect out (all but the pre-pull Jobs', which run
    ``pass``) and that no policy of their own lets out: only the default deny selects them."""
    out = []
    for name, (labels, ns), host in pod_templates(docs):
        if host or labels.get(contract.LABEL_COMPONENT) == contract.COMPONENT_PREPULL:
            continue
        own = [
            d
            for d in docs
            if d["kind"] == "NetworkPolicy"
            and d["metadata"]["namespace"] == ns
            and d["spec"].get("podSelector", {}).get("matchLabels")
            and selects(d["spec"]["podSelector"], labels)
            and "Egress" in d["spec"].get("policyTypes", [])
            and d["spec"].get("egress")
        ]
        out += [] if own else [name]
    return out


@pytest.mark.parametrize("inventory", ["inventories/lab", "inventories/example"])
def test_every_pod_on_the_cluster_network_that_connects_out_has_its_own_egress(
    inventory: str,
) -> None:
    docs = in_apply_order(render_serving(from_inventory(inventory)))
    kinds = {d["kind"] for d in docs if d.get("spec", {}).get("template")}
    assert {"StatefulSet", "Deployment", "DaemonSet", "Job"} <= kinds
    assert not_let_out(docs) == []


def one_spark_fetch_pods(docs: Sequence[Mapping[str, Any]]) -> list[Peer]:
    return [
        pod
        for _name, pod, host in pod_templates(docs)
        if pod[0].get(contract.LABEL_COMPONENT) == contract.COMPONENT_FETCH and not host
    ]


def test_a_one_spark_fetch_pod_reaches_the_dns_and_the_hub_only(
    rendered: dict[str, Any], gateway_pod: Peer
) -> None:
    docs = in_apply_order(rendered)
    fetchers = one_spark_fetch_pods(docs)
    coredns: Peer = ({"k8s-app": "kube-dns"}, "kube-system")
    api, dist = SERVING_DEFAULTS["serving_api_port"], 20000
    pods = rank_pods(rendered)
    assert len(fetchers) == 2  # super-vllm and super-trtllm; gemma's pushes on the host network
    for pod in fetchers:
        deployment = pod[0][contract.LABEL_DEPLOYMENT]
        others = [p for n, ps in pods.items() if n != deployment for p in ps]
        assert sends(docs, pod, 53, coredns)
        assert sends(docs, pod, 443, ({}, ""), ip=OUTSIDE)
        assert not sends(docs, pod, 80, ({}, ""), ip=OUTSIDE)
        assert not sends(docs, pod, 443, ({}, ""), ip=API_SERVER)
        assert not sends(docs, pod, 6443, ({}, ""), ip=API_SERVER)
        assert not sends(docs, pod, 443, ({}, ""), ip="10.43.0.1")  # a Service address
        # Another deployment's rank, by its labels and its pod address, at any port it serves.
        for other in others:
            for port in (api, dist, 443):
                assert not sends(docs, pod, port, other, ip="10.42.3.7")
        assert not sends(docs, pod, 4000, gateway_pod, ip="10.42.1.9")
        assert not admits(docs, pod, 443, gateway_pod)


def test_negative_control_without_its_policy_the_fetch_pod_reaches_nothing(
    rendered: dict[str, Any],
) -> None:
    docs = in_apply_order(rendered)
    fetchers = one_spark_fetch_pods(docs)
    names = {d["metadata"]["name"] for d in rendered["fetch"] if d["kind"] == "Job"}
    own = {
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and d["spec"]["podSelector"].get("matchLabels", {}).get(contract.LABEL_COMPONENT)
        == contract.COMPONENT_FETCH
    }
    dropped = [d for d in docs if d["kind"] != "NetworkPolicy" or d["metadata"]["name"] not in own]
    assert sorted(not_let_out(dropped)) == sorted(n for n in names if n in own)
    coredns: Peer = ({"k8s-app": "kube-dns"}, "kube-system")
    assert not any(sends(dropped, pod, 53, coredns) for pod in fetchers)
    assert not any(sends(dropped, pod, 443, ({}, ""), ip=OUTSIDE) for pod in fetchers)
    # Without the exceptions, the rule would let the download reach the API server and the pods.
    opened = copy.deepcopy(docs)
    for d in opened:
        if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] in own:
            for rule in d["spec"]["egress"]:
                for peer in rule["to"]:
                    peer.get("ipBlock", {}).pop("except", None)
    assert all(sends(opened, pod, 443, ({}, ""), ip=API_SERVER) for pod in fetchers)
    assert all(sends(opened, pod, 443, ({}, ""), ip="10.42.3.7") for pod in fetchers)


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
    policies = [d for d in in_apply_order(rendered) if d["kind"] == "NetworkPolicy"]
    # Each namespace's default deny, the gateway's, the memory guard's, per deployment its
    # engine's and its watchdog's, and per one-Spark deployment its fetch pod's.
    fetching = [d for d in rendered["deployments"] if not d["receiver_jobs"]]
    assert len(policies) == 4 + 2 * len(rendered["deployments"]) + len(fetching)
    for doc in policies:
        body = copy.deepcopy(doc)
        body["metadata"]["namespace"] = ns
        api.create_namespaced_network_policy(ns, body, dry_run="All")
    # Negative control: the server refuses a malformed policy.
    bad = copy.deepcopy(next(p for p in policies if p["spec"].get("ingress")))
    bad["metadata"]["namespace"] = ns
    bad["spec"]["ingress"][0]["ports"][0]["protocol"] = "ICMP"
    with pytest.raises(client.ApiException):
        api.create_namespaced_network_policy(ns, bad, dry_run="All")
