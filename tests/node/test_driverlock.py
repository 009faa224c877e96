"""NVIDIA driver lock: found vs expected, from the real /proc and nvidia-smi spellings."""

from __future__ import annotations

import pytest

from sparkrack.errors import SparkrackError
from sparkrack.node.driverlock import check_driver_version, parse_driver_version

PROC = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.159.03  "
    "Release Build  (dvs-builder@U22-I3-AM08-03-1)  Mon Feb 10 2026\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)


def test_parses_proc_and_nvidia_smi() -> None:
    assert parse_driver_version(PROC) == "580.159.03"
    assert parse_driver_version("580.142\n") == "580.142"
    assert parse_driver_version("") is None


@pytest.mark.parametrize("lock", ["580", "580.159", "580.159.03"])
def test_prefix_lock_matches(lock: str) -> None:
    assert check_driver_version(PROC, lock) == "580.159.03"


@pytest.mark.parametrize("lock", ["580.142", "575", "580.159.02", "580.15"])
def test_mismatch_names_found_and_expected(lock: str) -> None:
    with pytest.raises(SparkrackError) as info:
        check_driver_version(PROC, lock, "inventories/example/group_vars")
    problem = info.value.problems[0]
    assert problem.message == f"driver mismatch: found 580.159.03, expected {lock}"
    assert (
        problem.file == "inventories/example/group_vars"
        and problem.key == "nvidia_driver_lock.version"
    )


def test_no_driver_and_bad_lock_are_refused() -> None:
    with pytest.raises(SparkrackError, match="no NVIDIA driver found"):
        check_driver_version("", "580")
    with pytest.raises(SparkrackError, match="not a driver version"):
        check_driver_version(PROC, "latest")
