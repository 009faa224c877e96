"""sparkrack.inputs.inventory reads inventories exactly like ansible-playbook, as plain Python data."""

from __future__ import annotations

from pathlib import Path

import yaml

from sparkrack.inputs.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]


def test_example_inventory_groups_and_vars_are_plain_data() -> None:
    inv = load_inventory(ROOT / "inventories" / "example")
    assert inv.sparks == ["spark1", "spark2", "spark3", "spark4"]
    assert inv.groups["control_plane"] == ["cp1"]
    # ansible-core hands out tagged str subclasses; callers dump these with yaml.safe_dump.
    assert all(type(h) is str for h in inv.sparks + list(inv.hostvars))
    assert yaml.safe_load(yaml.safe_dump({"groups": inv.groups}))["groups"]["sparks"] == inv.sparks
    assert inv.var("spark_hardware") == "real"
    assert inv.var("spark_index", host="spark3") == 3


def test_lab_inventory_is_simulated() -> None:
    inv = load_inventory(ROOT / "inventories" / "lab")
    assert inv.var("spark_hardware") == "simulated"
    assert inv.plan().node("spark1").node_ip == "172.28.250.11"
