"""The fabric netplan document is the address plan, rendered: pinned for the lab's spark3."""

from __future__ import annotations

import pytest
import yaml

from sparkrack.errors import SparkrackError
from sparkrack.fabric.addressplan import NodeInput
from sparkrack.fabric.layout import compute_plan
from sparkrack.fabric.netplan import fabric_interfaces, netplan_config

FABRIC = {"subnet": "10.77.0.0/24", "ports": ["enp1s0f0np0"], "vf_count": 4, "vfs_in_use": [0, 2]}


def plan(fabric: dict[str, object] = FABRIC, count: int = 4) -> dict[str, object]:
    nodes = [NodeInput(f"spark{i}", f"172.28.250.{10 + i}") for i in range(1, count + 1)]
    return compute_plan(fabric, nodes).to_dict()


def test_spark3_document_pinned() -> None:
    doc = netplan_config(plan(), "spark3", ["eth0"])
    common = {"mtu": 9000, "dhcp4": False, "dhcp6": False, "accept-ra": False}
    assert doc == {
        "network": {
            "version": 2,
            "renderer": "networkd",
            "ethernets": {
                "enp1s0f0np0": {**common, "addresses": ["10.77.0.3/24"]},
                "enp1s0f0v0": {
                    **common,
                    "addresses": ["10.77.0.19/24"],
                    "macaddress": "02:53:50:03:00:00",
                },
                "enp1s0f0v2": {
                    **common,
                    "addresses": ["10.77.0.51/24"],
                    "macaddress": "02:53:50:03:00:02",
                },
            },
        }
    }


def test_only_vfs_in_use_are_addressed() -> None:
    assert fabric_interfaces(plan(), "spark1") == ["enp1s0f0np0", "enp1s0f0v0", "enp1s0f0v2"]


def test_two_ports_both_addressed_vfs_on_first() -> None:
    fabric = {**FABRIC, "ports": ["enp1s0f0np0", "enp1s0f1np1"], "vfs_in_use": [1]}
    eth = netplan_config(plan(fabric, 2), "spark2")["network"]["ethernets"]
    assert eth["enp1s0f0np0"]["addresses"] == ["10.77.0.2/24"]
    assert eth["enp1s0f1np1"]["addresses"] == ["10.77.0.18/24"]
    assert eth["enp1s0f0v1"]["addresses"] == ["10.77.0.50/24"]
    assert set(eth) == {"enp1s0f0np0", "enp1s0f1np1", "enp1s0f0v1"}


def test_mac_survives_yaml_round_trip_as_string() -> None:
    fabric = {**FABRIC, "mac_prefix": "12:34:56"}
    text = yaml.safe_dump(netplan_config(plan(fabric), "spark1"))
    loaded = yaml.safe_load(text)
    assert loaded["network"]["ethernets"]["enp1s0f0v0"]["macaddress"] == "12:34:56:01:00:00"


def test_management_interface_is_refused() -> None:
    with pytest.raises(SparkrackError) as info:
        netplan_config(plan(), "spark1", ["enp1s0f0np0"])
    problem = info.value.problems[0]
    assert "management" in problem.message and "enp1s0f0np0" in problem.message
    assert problem.fix


def test_unknown_renderer_and_host_are_refused() -> None:
    with pytest.raises(SparkrackError, match="qsfp_network_renderer"):
        netplan_config(plan(), "spark1", renderer="ifupdown")
    with pytest.raises(SparkrackError, match="not a Spark"):
        netplan_config(plan(), "cp1")


def test_two_rails_address_both_pfs_and_each_rails_vf_in_use() -> None:
    rails = ["enp1s0f0np0", "enP2p1s0f0np0"]
    doc = netplan_config(plan({**FABRIC, "ports": rails, "rails": rails}), "spark2")
    eth = doc["network"]["ethernets"]
    assert list(eth) == [
        "enp1s0f0np0",
        "enP2p1s0f0np0",
        "enp1s0f0v0",
        "enp1s0f0v2",
        "enP2p1s0f0v0",
        "enP2p1s0f0v2",
    ]
    assert eth["enP2p1s0f0np0"]["addresses"] == ["10.77.1.18/24"]
    assert eth["enP2p1s0f0v0"]["addresses"] == ["10.77.1.34/24"]
    assert eth["enP2p1s0f0v0"]["macaddress"] == "02:53:50:02:01:00"
    assert {e["mtu"] for e in eth.values()} == {9000}
