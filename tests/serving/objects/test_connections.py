"""Every connection between ranks, derived from the engines' listener declarations, checked on the
renders of both shipped inventories: it stays on the fabric, or the policy admits it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from sparkrack import contract
from sparkrack.serving.deployments.bundle import from_inventory, render_serving
from sparkrack.serving.engines import ENGINES
from sparkrack.serving.engines.listeners import Bind, Peer
from sparkrack.serving.objects.connections import (
    connection_problems,
    connections,
    rendered_env,
)
from sparkrack.serving.resolution import Resolution

ROOT = Path(__file__).resolve().parents[3]
INVENTORIES = ["inventories/lab", "inventories/example"]


@pytest.fixture(autouse=True)
def _from_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def rendered(inventory: str) -> list[tuple[Resolution, list[dict[str, Any]]]]:
    """(resolution, its own objects) of every deployment of an inventory."""
    found = from_inventory(inventory, check_memory=False)
    docs = render_serving(found)["manifests"]
    out = []
    for d in found.deployments:
        own = [
            doc
            for doc in docs
            if doc["metadata"].get("labels", {}).get(contract.LABEL_DEPLOYMENT) == d.name
        ]
        out.append((d.res, own))
    return out


def multi_rank(inventory: str) -> list[tuple[Resolution, list[dict[str, Any]]]]:
    return [(res, own) for res, own in rendered(inventory) if len(res.ranks) > 1]


def statefulset(res: Resolution, own: list[dict[str, Any]], rank: int) -> dict[str, Any]:
    [doc] = [
        d
        for d in own
        if d["kind"] == "StatefulSet" and d["metadata"]["name"] == res.names.statefulset(rank)
    ]
    return doc


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_every_multi_rank_inventory_has_ranks(inventory: str) -> None:
    """The checks below would pass on nothing if no deployment had several ranks."""
    assert multi_rank(inventory)


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_each_rank_binds_its_fabric_listeners_on_its_own_fabric_address(inventory: str) -> None:
    """The variables the declaration names carry the rank's own address from the address plan
    (the one the pod's Multus annotation gives its VF), distinct per rank."""
    for res, own in multi_rank(inventory):
        fabric_rows = [
            row
            for row in res.engine.listeners(res.ctx)
            if row.bind is Bind.FABRIC and row.chosen_by and not row.interface
        ]
        assert fabric_rows, f"{res.name}: no address-chosen fabric listener declared"
        seen = set()
        for rank in res.ranks:
            env = rendered_env(statefulset(res, own, rank.rank))
            annotation = statefulset(res, own, rank.rank)["spec"]["template"]["metadata"][
                "annotations"
            ][contract.MULTUS_NETWORKS_ANNOTATION]
            for row in fabric_rows:
                address = env[row.chosen_by[0]]
                assert address == res.ctx.rank_address(rank.node)
                assert f'"{address}/' in annotation, "not the address the VF is given"
                seen.add(address)
        assert len(seen) == len(res.ranks)


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_every_declared_connection_stays_on_the_fabric_or_is_admitted(inventory: str) -> None:
    for res, own in multi_rank(inventory):
        conns = connections(res, own)
        declared = [r for r in res.engine.listeners(res.ctx) if Peer.RANKS in r.peers]
        # every other rank connects to every rank-to-rank listener of each rank that opens it
        expected = sum(
            (len(res.ranks) - 1) * sum(1 for r in res.ranks if row.on_rank(r.rank))
            for row in declared
        )
        assert len(conns) == expected
        assert {c.listener.name for c in conns} == {row.name for row in declared}
        assert all(c.network is Bind.FABRIC for c in conns if c.port is None)
        assert connection_problems(res, own) == []


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_without_the_host_ip_the_broadcaster_is_refused(inventory: str) -> None:
    """Negative control, the render of main before the declaration: no ``SGLANG_HOST_IP``, so
    rank 0 binds the broadcaster on eth0 at a random port that no policy admits."""
    for res, own in multi_rank(inventory):
        broken = copy.deepcopy(own)
        head = statefulset(res, broken, 0)
        container = head["spec"]["template"]["spec"]["containers"][0]
        container["env"] = [e for e in container["env"] if e["name"] != "SGLANG_HOST_IP"]
        problems = connection_problems(res, broken)
        assert problems, res.name
        text = "\n".join(str(p) for p in problems)
        for rank in res.ranks[1:]:
            assert f"rank {rank.rank} -> rank 0 " in text
        assert "message-queue broadcaster" in text
        assert "<random port>" in text
        assert f"NetworkPolicy {res.names.headless}" in text
        assert "SGLANG_HOST_IP" in text  # the fix names the variable
        assert all(p.rule == "rank-connections" for p in problems)


def test_a_host_ip_of_another_address_is_refused() -> None:
    """Negative control: an address that is not the rank's own fabric address."""
    res, own = multi_rank("inventories/lab")[0]
    broken = copy.deepcopy(own)
    container = statefulset(res, broken, 0)["spec"]["template"]["spec"]["containers"][0]
    for e in container["env"]:
        if e["name"] == "SGLANG_HOST_IP":
            e["value"] = "10.42.0.9"
    assert connection_problems(res, broken)


def test_a_gloo_interface_off_the_fabric_is_refused() -> None:
    res, own = multi_rank("inventories/lab")[0]
    broken = copy.deepcopy(own)
    container = statefulset(res, broken, 1)["spec"]["template"]["spec"]["containers"][0]
    for e in container["env"]:
        if e["name"] == "GLOO_SOCKET_IFNAME":
            e["value"] = "eth0"
    text = "\n".join(str(p) for p in connection_problems(res, broken))
    assert "rank 0 -> rank 1" in text and "gloo" in text


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_the_policy_admits_each_cluster_listener_from_its_declared_peers(inventory: str) -> None:
    """The policy is derived from the declaration: each listener bound on the cluster network at
    a fixed port has one ingress rule at that port naming its peers (and no other port)."""
    for res, own in rendered(inventory):
        [policy] = [
            d
            for d in own
            if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == res.names.headless
        ]
        rules = {r["ports"][0]["port"]: r["from"] for r in policy["spec"]["ingress"]}
        fixed = {
            row.port_of(res.ctx.api_port, res.ctx.dist_port): row
            for row in res.engine.listeners(res.ctx)
            if row.bind in (Bind.CLUSTER, Bind.ALL) and row.port_of(1, 2) is not None
        }
        assert set(rules) <= set(fixed)
        own_ranks = {"podSelector": {"matchLabels": dict(res.labels)}}
        for port, row in fixed.items():
            if Peer.RANKS in row.peers:
                assert own_ranks in rules[port]


def test_every_engine_declares_its_api() -> None:
    for engine in ENGINES.values():
        rows = (*engine.multi_rank_listeners, *engine.single_rank_listeners)
        assert any(r.name == "api" and r.bind is Bind.CLUSTER for r in rows), engine.name


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_a_connection_the_policy_admits_but_does_not_send_is_refused(inventory: str) -> None:
    """Egress follows the same declaration: a rank connection over the cluster network needs the
    policy's egress to its own ranks too. Negative control: the egress rule taken out."""
    checked = 0
    for res, own in multi_rank(inventory):
        cluster = [c for c in connections(res, own) if c.network is not Bind.FABRIC]
        if not cluster:
            continue
        broken = copy.deepcopy(own)
        [policy] = [
            d
            for d in broken
            if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == res.names.headless
        ]
        own_ranks = {"podSelector": {"matchLabels": dict(res.labels)}}
        policy["spec"]["egress"] = [r for r in policy["spec"]["egress"] if own_ranks not in r["to"]]
        problems = connection_problems(res, broken)
        assert len(problems) == len(cluster), res.name
        assert connection_problems(res, own) == []
        checked += 1
    assert checked, "no deployment connects its ranks over the cluster network"
