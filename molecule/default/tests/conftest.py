"""Fixtures for the lab's testinfra checks: the nodes come from lab/lab.py (the same topology
`make lab` builds), expected addresses from the address plan, expected settings from role
defaults — the tests never restate them."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
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
    lab()  # lab.py puts lab/ on sys.path for the modules it imports, labnodes among them
    return importlib.import_module("labnodes").load_topology()


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


# --- the cluster side: the lab's real API and the plays run against it -------------------------

from sparkrack import contract  # noqa: E402

KUBECONFIG = Path.home() / contract.KUBECONFIG_FILE
"""The kubeconfig k3s_server's join.yml wrote on the control machine."""
LAB_INVENTORY = ROOT / "inventories" / "lab"
PLAY_LOGS: list[str] = []
"""The output of every playbook these tests ran (the wait-coverage test reads it)."""
PROFILE_LINE = re.compile(r"^(\S.*?) -{3,} (\d+\.\d+)s$", re.M)
"""A task's line in ansible.posix.profile_tasks' summary at the end of a play run."""


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The slowest tasks over every play these tests ran, summed by task name: where verify's
    time goes inside the plays, next to pytest's per-test durations."""
    spent: dict[str, float] = {}
    for log in PLAY_LOGS:
        for name, seconds in PROFILE_LINE.findall(log):
            spent[name] = spent.get(name, 0.0) + float(seconds)
    if spent:
        terminalreporter.section("slowest play tasks over verify's playbook runs")
        for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:25]:
            terminalreporter.write_line(f"{seconds:8.1f}s  {name}")


@cache
def kube() -> Any:
    """A client through the kubeconfig the roles wrote on the control machine."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(KUBECONFIG))


@cache
def admin() -> Any:
    """A client through the lab control plane's own admin kubeconfig: it outlives reset.yml,
    which removes the roles' kubeconfig."""
    from kubernetes import config

    return config.new_client_from_config(
        config_file=str(lab().CONTROL_PLANE_STATE / "admin.kubeconfig")
    )


def run_play(
    playbook: str, *extra: str, inventory: Path = LAB_INVENTORY
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook as an owner runs it, against the lab; the output is kept in PLAY_LOGS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="0",
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            playbook,
            "-i",
            str(inventory),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=1200,
    )
    PLAY_LOGS.append(proc.stdout + proc.stderr)
    return proc


def inventory_copy(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """inventories/lab copied, with each (old, new) text edit made in group_vars/all.yml."""
    copy = tmp_path / "inventory"
    shutil.copytree(LAB_INVENTORY, copy)
    path = copy / "group_vars" / "all.yml"
    text = path.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} is not one line of {path}"
        text = text.replace(old, new)
    path.write_text(text)
    return copy


def recap_changed(output: str) -> dict[str, int]:
    return {
        m[0]: int(m[1]) for m in re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)", output, re.M)
    }
