"""The test tiers of tests/conftest.py: every test lands in exactly one tier, under a
SPARKRACK_REQUIRE_* variable an api or docker test that skips fails, and a fast test that opens
an internet socket fails. Run on planted suites in a child pytest that loads the real hooks; the
same suite without the variables is the negative control (its skips stay skips), and so is the
same socket opened by a tools test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = f"""
import importlib.util

import pytest

_spec = importlib.util.spec_from_file_location("sparkrack_tiers", {str(ROOT / "tests" / "conftest.py")!r})
_tiers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tiers)
pytest_collection_modifyitems = _tiers.pytest_collection_modifyitems
pytest_runtest_makereport = _tiers.pytest_runtest_makereport
_fast_tests_open_no_socket = _tiers._fast_tests_open_no_socket


@pytest.fixture
def kube_api():
    pytest.skip("no real Kubernetes API here")


@pytest.fixture
def ansible_playbook():
    return None


def pytest_configure(config):
    for tier in ("fast", "tools", "api", "docker"):
        config.addinivalue_line("markers", tier)
"""

SUITE = """
import pytest


@pytest.mark.docker
def test_in_a_container():
    pytest.skip("no Docker engine answers")


def test_against_the_api(kube_api):
    pass


@pytest.mark.tools
@pytest.mark.skipif(True, reason="rsync is not installed")
def test_an_rsync_daemon():
    pass


def test_a_playbook(ansible_playbook):
    pass


def test_pure():
    pass


@pytest.mark.docker
@pytest.mark.xfail(reason="expected", strict=True)
def test_expected_failure():
    raise AssertionError
"""

SOCKETS = """
import socket

import pytest


def test_fast_binds_loopback():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))


def test_fast_connects_loopback():
    with socket.socket() as sock:
        sock.connect_ex(("127.0.0.1", 9))


def test_fast_binds_a_unix_socket(tmp_path):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s"))


@pytest.mark.tools
def test_tools_binds_loopback():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
"""


def run(tmp_path: Path, *args: str, suite: str = SUITE, **env: str) -> tuple[int, dict[str, str]]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(suite)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPARKRACK_REQUIRE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.findall(r"::(test_\w+) (PASSED|FAILED|SKIPPED|XFAIL|ERROR)", proc.stdout)
    outcomes = dict(found)
    return proc.returncode, outcomes


def test_each_test_lands_in_one_tier(tmp_path: Path) -> None:
    for tier, names in {
        "fast": {"test_pure"},
        "tools": {"test_a_playbook", "test_an_rsync_daemon"},
        "api": {"test_against_the_api"},
        "docker": {"test_in_a_container", "test_expected_failure"},
    }.items():
        _, outcomes = run(tmp_path, "-m", tier)
        assert set(outcomes) == names, tier


def test_tier_skips_fail_under_the_require_variables(tmp_path: Path) -> None:
    code, outcomes = run(
        tmp_path,
        SPARKRACK_REQUIRE_API="1",
        SPARKRACK_REQUIRE_DOCKER="1",
        SPARKRACK_REQUIRE_TOOLS="1",
    )
    assert code == 1
    assert outcomes["test_an_rsync_daemon"] == "ERROR"  # a skipif mark skips at setup
    assert outcomes["test_in_a_container"] == "FAILED"  # skipped in the test's body
    assert outcomes["test_against_the_api"] == "ERROR"  # skipped in its fixture
    assert outcomes["test_expected_failure"] == "XFAIL"  # an expected failure is not a skip
    assert outcomes["test_pure"] == "PASSED"


def test_without_the_variables_the_same_skips_stay_skips(tmp_path: Path) -> None:
    code, outcomes = run(tmp_path)
    assert code == 0
    assert outcomes["test_in_a_container"] == "SKIPPED"
    assert outcomes["test_against_the_api"] == "SKIPPED"
    assert outcomes["test_an_rsync_daemon"] == "SKIPPED"
    # One variable covers its own tier only.
    code, outcomes = run(tmp_path, SPARKRACK_REQUIRE_DOCKER="1")
    assert code == 1
    assert outcomes["test_in_a_container"] == "FAILED"
    assert outcomes["test_against_the_api"] == "SKIPPED"
    assert outcomes["test_an_rsync_daemon"] == "SKIPPED"


def test_a_fast_test_that_opens_an_internet_socket_fails(tmp_path: Path) -> None:
    code, outcomes = run(tmp_path, "-rf", suite=SOCKETS)
    assert code == 1
    assert outcomes == {
        "test_fast_binds_loopback": "FAILED",
        "test_fast_connects_loopback": "FAILED",
        "test_fast_binds_a_unix_socket": "PASSED",
        "test_tools_binds_loopback": "PASSED",  # the negative control: the same bind in tools
    }
