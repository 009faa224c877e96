"""Fixtures for the lab's testinfra checks: the nodes come from lab/lab.py (the same topology
`make lab` builds), expected addresses from the address plan, expected settings from role
defaults — the tests never restate them."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import testinfra
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from sparkrack.inputs.inventory import load_inventory  # noqa: E402


@cache
def lab() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sparkrack_lab", ROOT / "lab" / "lab.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sparkrack_lab"] = module
    spec.loader.exec_module(module)
    return module


@cache
def topology() -> Any:
    return lab().load_topology()


@cache
def plan() -> dict[str, Any]:
    return load_inventory(ROOT / "inventories" / "lab").plan().to_dict()


@cache
def role_defaults(role: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        (ROOT / "roles" / role / "defaults" / "main.yml").read_text()
    )
    return data


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    nodes = topology().nodes
    if "node" in metafunc.fixturenames:
        metafunc.parametrize("node", [n.host for n in nodes])
    if "spark" in metafunc.fixturenames:
        metafunc.parametrize("spark", [n.host for n in nodes if n.spark])
    if "control_plane" in metafunc.fixturenames:
        metafunc.parametrize("control_plane", [n.host for n in nodes if not n.spark])


@cache
def host_of(name: str) -> Any:
    return testinfra.get_host(f"docker://{lab().PREFIX}{name}")
