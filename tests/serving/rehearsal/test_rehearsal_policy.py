"""The kube-router stand-in: the rendered NetworkPolicies of the lab inventory, evaluated for the
rehearsed pods and turned into iptables rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sparkrack import contract
from sparkrack.serving.rehearsal.plan import Rehearsal, plan_inventory
from sparkrack.serving.rehearsal.policy import (
    FILTER_CHAIN,
    Pod,
    admission,
    drop_chain,
    spark_filter,
    witness,
    witness_count,
)


@pytest.fixture(scope="module")
def lab() -> Rehearsal:
    return plan_inventory("inventories/lab")


def _pod(labels: dict[str, str], ip: str, ns: str = "sparkrack") -> Pod:
    return Pod("p", ns, labels, ip)


def test_own_ranks_get_the_api_and_dist_init_ports_only(lab: Rehearsal) -> None:
    rank0, rank1 = lab.ranks
    got = admission(lab.policies, rank1.pod, rank0.pod)
    assert got.ports == frozenset({(30000, 30000), (20000, 20000)})  # the lab's defaults
    assert got.admits(20000) and not got.admits(20001)
    assert got.policy == "sparkrack-gemma"
    assert "sparkrack-default-deny" in got.policies


def test_gateway_gets_the_api_port_and_a_stranger_nothing(lab: Rehearsal) -> None:
    rank0 = lab.ranks[0].pod
    gateway_labels = {**contract.PART_OF, contract.LABEL_COMPONENT: contract.COMPONENT_GATEWAY}
    gateway = _pod(gateway_labels, "10.42.0.9", ns=contract.agents_namespace("sparkrack"))
    # The same labels on a pod of the serving namespace are not the gateway.
    impostor = _pod(gateway_labels, "10.42.0.6")
    assert admission(lab.policies, impostor, rank0).ports == frozenset()
    stranger = _pod({"app": "other"}, "10.42.0.8")
    other_ns = _pod(dict(lab.ranks[1].pod.labels), "10.42.0.7", ns="default")
    assert admission(lab.policies, gateway, rank0).ports == frozenset({(30000, 30000)})
    assert admission(lab.policies, stranger, rank0).ports == frozenset()
    assert admission(lab.policies, other_ns, rank0).ports == frozenset()


def test_a_pod_no_policy_selects_admits_everything(lab: Rehearsal) -> None:
    outside = _pod({"app": "x"}, "10.42.0.5", ns="elsewhere")
    got = admission(lab.policies, lab.ranks[0].pod, outside)
    assert got.ports is None and got.policies == ()


def test_a_rule_without_ports_admits_every_port(lab: Rehearsal) -> None:
    policies: list[dict[str, Any]] = copy.deepcopy(list(lab.policies))
    mine = next(p for p in policies if p["metadata"]["name"] == "sparkrack-gemma")
    del mine["spec"]["ingress"][1]["ports"]
    rank0, rank1 = lab.ranks
    assert admission(policies, rank1.pod, rank0.pod).ports is None


def test_a_port_range_is_admitted_whole(lab: Rehearsal) -> None:
    policies: list[dict[str, Any]] = copy.deepcopy(list(lab.policies))
    mine = next(p for p in policies if p["metadata"]["name"] == "sparkrack-gemma")
    mine["spec"]["ingress"][1]["ports"] = [{"protocol": "TCP", "port": 32768, "endPort": 60999}]
    rank0, rank1 = lab.ranks
    got = admission(policies, rank1.pod, rank0.pod)
    assert got.admits(45000) and not got.admits(20000)
    words = spark_filter([got]).commands
    assert any("32768:60999" in w for w in words)


def test_the_filter_returns_admitted_ports_and_drops_the_rest_by_policy(lab: Rehearsal) -> None:
    filters = {node: spark_filter(adm) for node, adm in lab.by_node().items()}
    assert set(filters) == {"spark1", "spark2"}
    spark1 = filters["spark1"]
    rank0, rank1 = lab.ranks
    pair = ("-s", rank1.pod.ip, "-d", rank0.pod.ip)
    assert ("-A", FILTER_CHAIN, *pair, "-p", "tcp", "--dport", "20000", "-j", "RETURN") in (
        spark1.commands
    )
    assert ("-A", FILTER_CHAIN, *pair, "-j", drop_chain("sparkrack-gemma")) in spark1.commands
    assert ("-I", "INPUT", "1", "-d", rank0.pod.ip, "-j", FILTER_CHAIN) in spark1.commands
    assert spark1.chains == {"SRD-sparkrack-gemma": "sparkrack-gemma"}
    # Only the cluster address is filtered: the fabric address never appears.
    assert all(rank0.fabric_address not in words for words in spark1.commands)
    # Teardown removes every chain it made.
    made = {w[1] for w in spark1.commands if w[0] == "-N"}
    assert made == {w[1] for w in spark1.teardown if w[0] == "-X"}


def test_drop_chain_names_fit_iptables() -> None:
    assert drop_chain("sparkrack-gemma") == "SRD-sparkrack-gemma"
    long = drop_chain("sparkrack-a-very-long-deployment-name-indeed")
    assert len(long) <= 28 and long != drop_chain("sparkrack-a-very-long-deployment-name-other")


LISTING = """Chain SRD-sparkrack-gemma (1 references)
    pkts      bytes target     prot opt in     out     source               destination
       3      180            6    --  *      *       172.28.250.12        172.28.250.11        tcp dpt:44687
       5      300 DROP       0    --  *      *       0.0.0.0/0            0.0.0.0/0
"""


def test_witness_counts_only_its_connection() -> None:
    assert witness("SRD-x", "1.1.1.1", "2.2.2.2", 7)[:3] == ("-I", "SRD-x", "1")
    assert witness_count(LISTING, "172.28.250.12", "172.28.250.11", 44687) == 3
    assert witness_count(LISTING, "172.28.250.12", "172.28.250.11", 44688) == 0
    assert witness_count(LISTING, "172.28.250.13", "172.28.250.11", 44687) == 0
