"""Fixtures and options every test folder shares.

* ``ansible_playbook``: runs the real ``ansible-playbook`` of this Python from the checkout, with
  the repository's ``ansible.cfg``, roles and filter plugin and the warnings that only add noise
  switched off;
* ``lab``: the lab driver ``lab/lab.py`` loaded as a module (it is a script, not a package);
* ``--update-golden`` / ``update_golden``: rewrite ``tests/data/golden/`` (an explicit act);
* ``kube_api``: a real Kubernetes control plane on loopback (the plugin ``tests/kube_api.py``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

import pytest

pytest_plugins = ["kube_api"]

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ANSIBLE_ENV = {
    "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
    "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
    "ANSIBLE_FILTER_PLUGINS": str(ROOT / "filter_plugins"),
    "ANSIBLE_LOCALHOST_WARNING": "false",
    "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
}

Playbook = Callable[..., "subprocess.CompletedProcess[str]"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/data/golden/ from what the code renders now (an explicit act: review "
        "the diff before committing it)",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was asked to rewrite the golden renders."""
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def ansible_playbook() -> Playbook:
    """``ansible_playbook(*args, env={...}, timeout=300)``: the finished run (stdout, stderr and
    the return code captured); ``env`` adds to or overrides the shared environment."""

    def run(
        *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "ansible-playbook"), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **ANSIBLE_ENV, **(env or {})},
            cwd=ROOT,
            timeout=timeout,
        )

    return run


@pytest.fixture(scope="session")
def lab() -> ModuleType:
    """``lab/lab.py``, the lab driver, as a module."""
    spec = importlib.util.spec_from_file_location("sparkrack_lab", ROOT / "lab" / "lab.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sparkrack_lab"] = module
    spec.loader.exec_module(module)
    return module
