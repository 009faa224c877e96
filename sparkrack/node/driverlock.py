"""NVIDIA driver version lock: compare what DGX OS installed with ``nvidia_driver_lock.version``."""

from __future__ import annotations

import re

from sparkrack.errors import Problem, SparkrackError

_VERSION = re.compile(r"(?<![\d.])(\d{3}\.\d+(?:\.\d+)?)(?![\d.])")


def parse_driver_version(text: str) -> str | None:
    """Version from ``/proc/driver/nvidia/version`` or ``nvidia-smi --query-gpu=driver_version``."""
    for line in text.splitlines():
        if "NVRM version" in line or _VERSION.fullmatch(line.strip()):
            match = _VERSION.search(line)
            if match:
                return match.group(1)
    return None


def check_driver_version(text: str, expected: str, source: str = "group_vars") -> str:
    """Return the found version when it matches the lock (component prefix), else refuse."""
    if not re.fullmatch(r"\d{3}(\.\d+){0,2}", str(expected)):
        raise SparkrackError(
            Problem(
                source,
                "nvidia_driver_lock.version",
                f"{expected!r} is not a driver version",
                "write e.g. '580', '580.159' or '580.159.03'",
            )
        )
    found = parse_driver_version(text)
    if found is None:
        raise SparkrackError(
            Problem(
                source,
                "nvidia_driver_lock.version",
                "no NVIDIA driver found (no version in /proc/driver/nvidia/version)",
                "install the DGX OS driver packages; sparkrack never installs or upgrades a driver",
            )
        )
    want = str(expected).split(".")
    if found.split(".")[: len(want)] != want:
        raise SparkrackError(
            Problem(
                source,
                "nvidia_driver_lock.version",
                f"driver mismatch: found {found}, expected {expected}",
                "align the lock with the driver DGX OS ships on every Spark (or fix the node)",
            )
        )
    return found
