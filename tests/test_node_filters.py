"""The Jinja filters the Spark node roles call: thin wrappers that turn refusals into filter errors."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError

from sparkrack.addressplan import NodeInput, compute_plan

ROOT = Path(__file__).resolve().parent.parent


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "filter_plugins" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


PLAN = compute_plan(
    {"subnet": "10.77.0.0/24", "ports": ["enp1s0f0np0"], "vf_count": 2, "vfs_in_use": [1]},
    [NodeInput("spark1", "172.28.250.11")],
).to_dict()


def test_filters_are_registered() -> None:
    assert set(load("sparkrack_netplan").FilterModule().filters()) == {
        "sparkrack_netplan",
        "sparkrack_fabric_interfaces",
    }
    assert set(load("sparkrack_node").FilterModule().filters()) == {
        "sparkrack_roce_gid_index",
        "sparkrack_driver_check",
        "sparkrack_rdma_rounds",
        "sparkrack_rdma_rail",
    }


def test_netplan_filter_renders_and_refuses_management() -> None:
    filters = load("sparkrack_netplan").FilterModule().filters()
    doc = filters["sparkrack_netplan"](PLAN, "spark1", ["eth0"])
    assert doc["network"]["ethernets"]["enp1s0f0v1"]["addresses"] == ["10.77.0.33/24"]
    assert filters["sparkrack_fabric_interfaces"](PLAN, "spark1") == ["enp1s0f0np0", "enp1s0f0v1"]
    with pytest.raises(AnsibleFilterError, match="enp1s0f0np0 carries the management address"):
        filters["sparkrack_netplan"](PLAN, "spark1", ["enp1s0f0np0"])


def test_node_filters_raise_filter_errors() -> None:
    filters = load("sparkrack_node").FilterModule().filters()
    with pytest.raises(
        AnsibleFilterError, match="driver mismatch: found 580.142, expected 580.159"
    ):
        filters["sparkrack_driver_check"]("580.142\n", "580.159")
    with pytest.raises(AnsibleFilterError, match="has no GID entries"):
        filters["sparkrack_roce_gid_index"]("", "rocep1s0f0v1", "10.77.0.33", "enp1s0f0v1")


def test_fabric_gate_filter_takes_rails_from_the_plan_fact() -> None:
    cluster = load("sparkrack_cluster")
    rails = ["enp1s0f0np0", "enP2p1s0f0np0"]
    two = compute_plan(
        {"subnet": "10.77.0.0/24", "ports": rails, "rails": rails, "vfs_in_use": [0]},
        [NodeInput("spark1", "172.28.250.11"), NodeInput("spark2", "172.28.250.12")],
    ).to_dict()
    text = (ROOT / "tests" / "data" / "nccl" / "captured" / "ib-forced.log").read_text()
    result = cluster.fabric_gate(text, "roce", None, two)
    assert not result["passed"] and "nccl-net-ib-no-device" in result["problems"][0]
    assert result["floor_gbps"] == 16.0 and result["nccl_version"] == "2.28.9"
    assert [r["device"] for r in result["rails"]] == ["rocep1s0f0v0", "roceP2p1s0f0v0"]
    assert cluster.fabric_gate(text, "roce", 3.0, PLAN)["floor_gbps"] == 3.0
    with pytest.raises(AnsibleFilterError, match="roce|socket"):
        cluster.fabric_gate(text, "tcp")
