"""The fabric address plan: pinned layouts for 2, 4 and 8 Sparks and every refusal."""

from __future__ import annotations

import ipaddress
import json

import pytest

from sparkrack.addressplan import (
    POD_FABRIC_IFNAME,
    NodeInput,
    compute_plan,
    nad_name,
    pod_network_annotation,
    rdma_name,
)
from sparkrack.errors import SparkrackError

FABRIC = {"subnet": "10.77.0.0/24", "ports": ["enp1s0f0np0"], "vf_count": 4, "vfs_in_use": [0]}


def nodes(count: int) -> list[NodeInput]:
    return [NodeInput(f"spark{i}", f"192.168.1.{10 + i}") for i in range(1, count + 1)]


def refused(fabric: dict[str, object], node_list: list[NodeInput]) -> list[tuple[str, str]]:
    with pytest.raises(SparkrackError) as info:
        compute_plan(fabric, node_list, source="group_vars/all.yml")
    return [(p.key, p.message) for p in info.value.problems]


def test_two_nodes_pinned() -> None:
    plan = compute_plan(FABRIC, nodes(2)).to_dict()
    assert plan["order"] == ["spark1", "spark2"]
    assert plan["head"] == "spark1"
    s2 = plan["nodes"]["spark2"]
    assert s2["ports"] == [
        {
            "name": "enp1s0f0np0",
            "address": "10.77.0.2",
            "cidr": "10.77.0.2/24",
            "rdma_device": "rocep1s0f0",
        }
    ]
    assert [(v["netdev"], v["address"], v["mac"], v["in_use"]) for v in s2["vfs"]] == [
        ("enp1s0f0v0", "10.77.0.18", "02:53:50:02:00:00", True),
        ("enp1s0f0v1", "10.77.0.34", "02:53:50:02:00:01", False),
        ("enp1s0f0v2", "10.77.0.50", "02:53:50:02:00:02", False),
        ("enp1s0f0v3", "10.77.0.66", "02:53:50:02:00:03", False),
    ]
    assert [v["rdma_device"] for v in s2["vfs"]] == [f"rocep1s0f0v{i}" for i in range(4)]


def test_four_nodes_pinned() -> None:
    plan = compute_plan({**FABRIC, "vfs_in_use": [0, 1]}, nodes(4))
    assert [(n.name, n.rank, n.ports[0].address) for n in plan.nodes] == [
        ("spark1", 0, "10.77.0.1"),
        ("spark2", 1, "10.77.0.2"),
        ("spark3", 2, "10.77.0.3"),
        ("spark4", 3, "10.77.0.4"),
    ]
    assert [[v.address for v in n.vfs if v.in_use] for n in plan.nodes] == [
        ["10.77.0.17", "10.77.0.33"],
        ["10.77.0.18", "10.77.0.34"],
        ["10.77.0.19", "10.77.0.35"],
        ["10.77.0.20", "10.77.0.36"],
    ]
    assert plan.node("spark4").node_ip == "192.168.1.14"
    assert plan.mtu == 9000


def test_eight_nodes_two_ports_pinned() -> None:
    fabric = {
        "subnet": "10.80.0.0/23",
        "ports": ["enp1s0f0np0", "enP2p1s0f1np1"],
        "vf_count": 2,
        "vfs_in_use": [1],
        "block": 32,
    }
    plan = compute_plan(fabric, nodes(8))
    last = plan.node("spark8")
    assert [(p.name, p.address, p.rdma_device) for p in last.ports] == [
        ("enp1s0f0np0", "10.80.0.8", "rocep1s0f0"),
        ("enP2p1s0f1np1", "10.80.0.40", "roceP2p1s0f1"),
    ]
    # VFs live on the first port; their blocks follow the PF blocks.
    assert [(v.index, v.address, v.in_use) for v in last.vfs] == [
        (0, "10.80.0.72", False),
        (1, "10.80.0.104", True),
    ]
    assert last.serving_vf.index == 1
    every = [p.address for n in plan.nodes for p in n.ports] + [
        v.address for n in plan.nodes for v in n.vfs
    ]
    assert len(every) == len(set(every)) == 8 * 4
    net = ipaddress.IPv4Network(fabric["subnet"])
    assert all(ipaddress.IPv4Address(a) in net for a in every)


def test_explicit_index_orders_ranks_and_addresses() -> None:
    node_list = [
        NodeInput("b", "192.168.1.2", spark_index=3),
        NodeInput("a", "192.168.1.1", spark_index=1),
    ]
    plan = compute_plan(FABRIC, node_list)
    assert [(n.name, n.rank, n.ports[0].address) for n in plan.nodes] == [
        ("a", 0, "10.77.0.1"),
        ("b", 1, "10.77.0.3"),
    ]
    assert plan.head.name == "a"


def test_duplicate_index_is_refused() -> None:
    node_list = [NodeInput("a", "192.168.1.1", 2), NodeInput("b", "192.168.1.2", 2)]
    assert ("b.spark_index", "2 is already used by a") in refused(FABRIC, node_list)


def test_implicit_position_colliding_with_explicit_index_is_refused() -> None:
    node_list = [NodeInput("a", "192.168.1.1", 2), NodeInput("b", "192.168.1.2")]
    assert ("b.spark_index", "2 is already used by a") in refused(FABRIC, node_list)


@pytest.mark.parametrize("index", [0, 16, -1])
def test_index_out_of_range_is_refused(index: int) -> None:
    problems = refused(FABRIC, [NodeInput("a", "192.168.1.1", index)])
    assert ("a.spark_index", f"{index} is out of range 1..15") in problems


def test_vf_index_beyond_count_is_refused() -> None:
    problems = refused({**FABRIC, "vfs_in_use": [0, 4]}, nodes(2))
    assert any(
        key == "fabric.vfs_in_use" and "VF index 4 is beyond the VF count" in msg
        for key, msg in problems
    )


def test_node_vf_lookup_beyond_count_is_refused() -> None:
    plan = compute_plan(FABRIC, nodes(1))
    with pytest.raises(SparkrackError, match="VF index 7 does not exist on spark1"):
        plan.node("spark1").vf(7)


def test_management_inside_fabric_is_refused() -> None:
    problems = refused(FABRIC, [NodeInput("a", "10.77.0.200")])
    assert any(key == "a.node_ip" and "inside the fabric subnet" in msg for key, msg in problems)


def test_duplicate_management_address_is_refused() -> None:
    node_list = [NodeInput("a", "192.168.1.1"), NodeInput("b", "192.168.1.1")]
    assert ("b.node_ip", "192.168.1.1 is already the node IP of a") in refused(FABRIC, node_list)


def test_subnet_too_small_is_refused() -> None:
    problems = refused({**FABRIC, "subnet": "10.77.0.0/26"}, nodes(2))
    assert any(key == "fabric.subnet" and "needs 5 blocks of 16" in msg for key, msg in problems)


def test_unknown_key_and_bad_values_are_all_reported_at_once() -> None:
    problems = refused(
        {**FABRIC, "subnet": "10.77.0.1/24", "mtux": 9000, "mac_prefix": "03:00:00"}, nodes(1)
    )
    keys = {key for key, _ in problems}
    assert {"fabric.subnet", "fabric.mtux", "fabric.mac_prefix"} <= keys


def test_error_text_names_file_key_and_fix() -> None:
    with pytest.raises(SparkrackError) as info:
        compute_plan({**FABRIC, "vfs_in_use": [9]}, nodes(1), source="inventories/x/group_vars")
    text = str(info.value)
    assert text.startswith("inventories/x/group_vars: fabric.vfs_in_use: VF index 9")
    assert "fix: use a lower index or raise fabric.vf_count" in text


def test_pod_annotation_carries_the_planned_host_address() -> None:
    plan = compute_plan(FABRIC, nodes(4))
    spark3 = plan.node("spark3")
    annotation = json.loads(pod_network_annotation(spark3, "sparkrack"))
    assert annotation == [
        {
            "name": nad_name(0),
            "namespace": "sparkrack",
            "interface": POD_FABRIC_IFNAME,
            "ips": [spark3.vf(0).cidr],
            "mac": spark3.vf(0).mac,
        }
    ]
    assert spark3.vf(0).cidr == "10.77.0.19/24"


def test_rdma_names_follow_kernel_naming() -> None:
    assert rdma_name("enp1s0f0np0") == "rocep1s0f0"
    assert rdma_name("enP2p1s0f1np1") == "roceP2p1s0f1"


def test_plan_round_trips_through_the_fact() -> None:
    from sparkrack.addressplan import FabricPlan

    plan = compute_plan({**FABRIC, "vfs_in_use": [1, 2], "gid_index": 3}, nodes(4))
    assert FabricPlan.from_dict(plan.to_dict()) == plan
    with pytest.raises(SparkrackError, match="import playbooks/preflight.yml first"):
        FabricPlan.from_dict({"subnet": "10.77.0.0/24"})
