"""Fixtures and options every test folder shares.

* ``ansible_playbook``: runs the real ``ansible-playbook`` of this Python from the checkout, with
  the repository's ``ansible.cfg``, roles and filter plugin and the warnings that only add noise
  switched off;
* ``lab``: the lab driver ``lab/lab.py`` loaded as a module (it is a script, not a package);
* ``--update-golden`` / ``update_golden``: rewrite ``tests/data/golden/`` (an explicit act);
* ``kube_api``: a real Kubernetes control plane on loopback (the plugin ``tests/kube_api.py``);
* the tiers (``make fast``, ``make tools``, ``make api``, ``make docker``; docs/dev/testing.md):
  a test that uses ``kube_api`` is marked ``api``, one that uses a fixture of
  :data:`TOOL_FIXTURES` ``tools``, a module marks itself ``docker`` or ``tools``, every other
  test is ``fast``. With SPARKRACK_REQUIRE_API=1 (SPARKRACK_REQUIRE_DOCKER=1,
  SPARKRACK_REQUIRE_TOOLS=1), which ``make api`` (``make docker``, ``make tools``) sets, an
  ``api`` (``docker``, ``tools``) test that skips fails instead.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
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


TIERS = ("api", "docker", "tools")
"""Markers that take a test out of the fast tier (pyproject registers them with ``fast``)."""
TOOL_FIXTURES = {"ansible_playbook", "litellm", "wheel_files", "site_packages"}
"""Fixtures that run a real tool or fetch from PyPI: a test that uses one is ``tools``, in
whichever module it stands (tests/patch_fixtures.py, test_gateway_litellm.py, this file)."""
REQUIRED = {
    "api": "SPARKRACK_REQUIRE_API",
    "docker": "SPARKRACK_REQUIRE_DOCKER",
    "tools": "SPARKRACK_REQUIRE_TOOLS",
}
"""Tier -> the variable that makes its skips failures."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "kube_api" in fixtures:
            item.add_marker(pytest.mark.api)
        elif TOOL_FIXTURES & set(fixtures):
            item.add_marker(pytest.mark.tools)
        if not any(item.get_closest_marker(tier) for tier in TIERS):
            item.add_marker(pytest.mark.fast)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """Under a SPARKRACK_REQUIRE_* variable, a skip of that tier's test is a failure: a missing
    Go toolchain, Docker engine or rsync binary cannot pass ``make test`` unseen."""
    report: pytest.TestReport = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        for tier, variable in REQUIRED.items():
            if item.get_closest_marker(tier) and os.environ.get(variable) == "1":
                report.outcome = "failed"
                report.longrepr = f"{variable}=1 and this {tier} test skipped: {report.longrepr}"
    return report


class FastTestOpenedASocket(AssertionError):
    """A fast test connected or bound an internet socket: it belongs in the tools tier."""


@pytest.fixture(autouse=True)
def _fast_tests_open_no_socket(request: pytest.FixtureRequest) -> Iterator[None]:
    """The fast tier's "no network", held in the test's own process: a fast test that connects or
    binds an internet socket (a loopback server included) fails, naming the address. Such a test
    is ``tools`` (docs/dev/testing.md). Unix sockets and socket pairs stay allowed."""
    if request.node.get_closest_marker("fast") is None:
        yield
        return
    originals = {name: getattr(socket.socket, name) for name in ("connect", "connect_ex", "bind")}

    def refusing(name: str) -> Callable[..., object]:
        def call(sock: socket.socket, address: object, *args: object) -> object:
            if sock.family == socket.AF_UNIX:
                return originals[name](sock, address, *args)
            raise FastTestOpenedASocket(
                f"a fast test called socket.{name}({address!r}); mark its module "
                "pytestmark = pytest.mark.tools (docs/dev/testing.md)"
            )

        return call

    for name in originals:
        setattr(socket.socket, name, refusing(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(socket.socket, name, original)


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
