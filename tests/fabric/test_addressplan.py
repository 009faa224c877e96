"""The fabric address plan: pinned layouts for 2, 4 and 8 Sparks and every refusal."""

from __future__ import annotations

import ipaddress
import json

import pytest

from sparkrack.contract import POD_FABRIC_IFNAME
from sparkrack.errors import SparkrackError
from sparkrack.fabric.addressplan import NodeInput, rdma_name
from sparkrack.fabric.layout import compute_plan
from sparkrack.k8s.nads import nad_name, pod_network_annotation

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
    from sparkrack.fabric.addressplan import FabricPlan

    plan = compute_plan({**FABRIC, "vfs_in_use": [1, 2], "gid_index": 3}, nodes(4))
    assert FabricPlan.from_dict(plan.to_dict()) == plan
    with pytest.raises(SparkrackError, match="import playbooks/preflight.yml first"):
        FabricPlan.from_dict({"subnet": "10.77.0.0/24"})


RAILS = ["enp1s0f0np0", "enP2p1s0f0np0"]
TWO_RAILS = {**FABRIC, "ports": RAILS, "rails": RAILS, "vfs_in_use": [0, 2]}


def test_default_rail_is_the_first_port() -> None:
    plan = compute_plan({**FABRIC, "ports": RAILS}, nodes(2))
    assert plan.rails == ("enp1s0f0np0",)
    assert {vf.pf for vf in plan.nodes[0].vfs} == {"enp1s0f0np0"}


def test_two_rails_pinned() -> None:
    plan = compute_plan(TWO_RAILS, nodes(4))
    assert plan.rails == tuple(RAILS)
    assert plan.rail_subnets == ("10.77.0.0/24", "10.77.1.0/24")
    spark3 = plan.node("spark3")
    assert [(p.name, p.address, p.rdma_device) for p in spark3.ports] == [
        ("enp1s0f0np0", "10.77.0.3", "rocep1s0f0"),
        ("enP2p1s0f0np0", "10.77.1.19", "roceP2p1s0f0"),
    ]
    # each rail has its own network with the same layout: only the third octet tells the rail
    assert [(v.rail, v.index, v.netdev, v.rdma_device, v.address, v.mac) for v in spark3.vfs] == [
        (0, 0, "enp1s0f0v0", "rocep1s0f0v0", "10.77.0.35", "02:53:50:03:00:00"),
        (0, 1, "enp1s0f0v1", "rocep1s0f0v1", "10.77.0.51", "02:53:50:03:00:01"),
        (0, 2, "enp1s0f0v2", "rocep1s0f0v2", "10.77.0.67", "02:53:50:03:00:02"),
        (0, 3, "enp1s0f0v3", "rocep1s0f0v3", "10.77.0.83", "02:53:50:03:00:03"),
        (1, 0, "enP2p1s0f0v0", "roceP2p1s0f0v0", "10.77.1.35", "02:53:50:03:01:00"),
        (1, 1, "enP2p1s0f0v1", "roceP2p1s0f0v1", "10.77.1.51", "02:53:50:03:01:01"),
        (1, 2, "enP2p1s0f0v2", "roceP2p1s0f0v2", "10.77.1.67", "02:53:50:03:01:02"),
        (1, 3, "enP2p1s0f0v3", "roceP2p1s0f0v3", "10.77.1.83", "02:53:50:03:01:03"),
    ]
    assert spark3.serving_vf.netdev == "enp1s0f0v0"
    assert [vf.netdev for vf in spark3.rail_vfs(2)] == ["enp1s0f0v2", "enP2p1s0f0v2"]
    one = compute_plan({**FABRIC, "ports": RAILS, "vfs_in_use": [0, 2]}, nodes(4))
    assert [v.address for v in one.node("spark3").vfs] == [v.address for v in spark3.vfs[:4]]
    assert one.rail_subnets == ("10.77.0.0/24",)
    again = type(plan).from_dict(plan.to_dict())
    assert again == plan


def test_management_inside_a_later_rail_network_is_refused() -> None:
    inside = [NodeInput("spark1", "10.77.1.200"), NodeInput("spark2", "192.168.1.12")]
    problems = refused(TWO_RAILS, inside)
    assert (
        "spark1.node_ip",
        "management address 10.77.1.200 lies inside the fabric subnet 10.77.1.0/24",
    ) in problems
    assert compute_plan(FABRIC, inside).rail_subnets == ("10.77.0.0/24",)


def test_two_rails_pod_annotation_has_one_interface_per_rail() -> None:
    spark2 = compute_plan(TWO_RAILS, nodes(4)).node("spark2")
    nets = json.loads(pod_network_annotation(spark2, "sparkrack", vf_index=2))
    assert [(n["name"], n["interface"], n["ips"], n["mac"]) for n in nets] == [
        ("sparkrack-vf2", "net1", ["10.77.0.66/24"], "02:53:50:02:00:02"),
        ("sparkrack-rail1-vf2", "net2", ["10.77.1.66/24"], "02:53:50:02:01:02"),
    ]
    assert json.loads(pod_network_annotation(spark2, "sparkrack"))[0]["name"] == "sparkrack-vf0"


@pytest.mark.parametrize(
    ("rails", "message"),
    [
        (["enp1s0f1np1"], "'enp1s0f1np1' is not in fabric.ports"),
        (RAILS + ["enp1s0f0np0"], "lists a PF twice"),
        ([], "must be a non-empty list"),
        ("enp1s0f0np0", "must be a non-empty list"),
    ],
)
def test_bad_rails_are_refused(rails: object, message: str) -> None:
    problems = refused({**FABRIC, "ports": RAILS, "rails": rails}, nodes(2))
    assert any(key == "fabric.rails" and message in text for key, text in problems), problems


def test_negative_gid_index_and_small_mtu_are_refused() -> None:
    problems = refused({**FABRIC, "gid_index": -1, "mtu": 1500}, nodes(2))
    assert (
        "fabric.gid_index",
        "-1 is not a GID table index (NCCL would get NCCL_IB_GID_INDEX=-1)",
    ) in problems
    assert any(k == "fabric.mtu" and "below 9000" in m for k, m in problems)
    assert compute_plan({**FABRIC, "gid_index": 0, "mtu": 9000}, nodes(2)).gid_index == 0


def test_rails_beyond_the_usable_ipv4_space_are_refused() -> None:
    problems = refused({**TWO_RAILS, "subnet": "223.255.255.0/24"}, nodes(2))
    assert (
        "fabric.subnet",
        "223.255.255.0/24 (rail 1's network 224.0.0.0/24) overlaps multicast (224.0.0.0/4)",
    ) in problems
    problems = refused({**TWO_RAILS, "subnet": "255.255.255.0/24"}, nodes(2))
    assert any(k == "fabric.rails" and "beyond the IPv4 space" in m for k, m in problems)
