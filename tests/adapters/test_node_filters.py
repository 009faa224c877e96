"""The Jinja filters the Spark node roles call: thin wrappers that turn refusals into filter errors."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError

from sparkrack.adapters.ansible import FILTERS
from sparkrack.fabric.addressplan import NodeInput
from sparkrack.fabric.layout import compute_plan

ROOT = Path(__file__).resolve().parents[2]


def plugin() -> ModuleType:
    """filter_plugins/sparkrack_filters.py, loaded the way Ansible's loader does: from its path."""
    path = ROOT / "filter_plugins" / "sparkrack_filters.py"
    spec = importlib.util.spec_from_file_location("sparkrack_filters_plugin", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


PLAN = compute_plan(
    {"subnet": "10.77.0.0/24", "ports": ["enp1s0f0np0"], "vf_count": 2, "vfs_in_use": [1]},
    [NodeInput("spark1", "172.28.250.11")],
).to_dict()


def test_the_plugin_exposes_the_adapter_table() -> None:
    assert plugin().FilterModule().filters() == FILTERS
    assert {"sparkrack_netplan", "sparkrack_gid_standin", "sparkrack_rdma_rail"} <= set(FILTERS)
    # The GID table has one reader, gidtable.py, run on the node: no filter parses a dump of it.
    assert "sparkrack_roce_gid_index" not in FILTERS


def test_netplan_filter_renders_and_refuses_management() -> None:
    filters = FILTERS
    doc = filters["sparkrack_netplan"](PLAN, "spark1", ["eth0"])
    assert doc["network"]["ethernets"]["enp1s0f0v1"]["addresses"] == ["10.77.0.33/24"]
    assert filters["sparkrack_fabric_interfaces"](PLAN, "spark1") == ["enp1s0f0np0", "enp1s0f0v1"]
    with pytest.raises(AnsibleFilterError, match="enp1s0f0np0 carries the management address"):
        filters["sparkrack_netplan"](PLAN, "spark1", ["enp1s0f0np0"])


def test_node_filters_raise_filter_errors() -> None:
    filters = FILTERS
    with pytest.raises(
        AnsibleFilterError, match="driver mismatch: found 580.142, expected 580.159"
    ):
        filters["sparkrack_driver_check"]("580.142\n", "580.159")
    with pytest.raises(AnsibleFilterError, match="roce_simulated_gid_index"):
        filters["sparkrack_gid_standin"]([], "/x", 1)


def test_fabric_gate_filter_takes_rails_from_the_plan_fact() -> None:
    gate = FILTERS["sparkrack_fabric_gate"]
    rails = ["enp1s0f0np0", "enP2p1s0f0np0"]
    two = compute_plan(
        {"subnet": "10.77.0.0/24", "ports": rails, "rails": rails, "vfs_in_use": [0]},
        [NodeInput("spark1", "172.28.250.11"), NodeInput("spark2", "172.28.250.12")],
    ).to_dict()
    text = (ROOT / "tests" / "data" / "nccl" / "captured" / "ib-forced.log").read_text()
    result = gate(text, "roce", None, two)
    assert not result["passed"] and "nccl-net-ib-no-device" in result["problems"][0]
    assert result["floor_gbps"] == 16.0 and result["nccl_version"] == "2.28.9"
    assert [r["device"] for r in result["rails"]] == ["rocep1s0f0v0", "roceP2p1s0f0v0"]
    assert gate(text, "roce", 3.0, PLAN)["floor_gbps"] == 3.0
    with pytest.raises(AnsibleFilterError, match="roce|socket"):
        gate(text, "tcp")
