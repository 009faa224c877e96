"""Jinja filters for node checks (RoCE GID index, driver lock). Thin wrappers over sparkrack/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from ansible.errors import AnsibleFilterError  # noqa: E402

from sparkrack.driverlock import check_driver_version  # noqa: E402
from sparkrack.errors import SparkrackError  # noqa: E402
from sparkrack.rdma import pair_rounds, rail_verdict  # noqa: E402
from sparkrack.roce import roce_v2_ipv4_index  # noqa: E402


def sparkrack_roce_gid_index(dump: str, device: str, address: str, netdev: str) -> int:
    try:
        return roce_v2_ipv4_index(dump, device, address, netdev)
    except SparkrackError as exc:
        raise AnsibleFilterError(str(exc)) from None


def sparkrack_driver_check(text: str, expected: str, source: str = "group_vars") -> str:
    try:
        return check_driver_version(text, expected, source)
    except SparkrackError as exc:
        raise AnsibleFilterError(str(exc)) from None


def sparkrack_rdma_rounds(order: list[str]) -> list[dict[str, dict[str, str]]]:
    """``{{ sparkrack_plan.order | sparkrack_rdma_rounds }}``: ib_write_bw pairs, round by round."""
    return pair_rounds([str(h) for h in order])


def sparkrack_rdma_rail(
    output: str,
    netdev: str,
    rdma_device: str,
    rdma_links: str,
    sysfs_lines: str,
    floor_gbps: float,
    source: str = "rdma preflight",
) -> dict[str, Any]:
    """Judge one rail: ``sysfs_lines`` are ``key=value`` lines (speed, current_link_width, ...)."""
    sysfs = dict(line.split("=", 1) for line in str(sysfs_lines).splitlines() if "=" in line)
    return rail_verdict(
        str(output), netdev, rdma_device, str(rdma_links), sysfs, float(floor_gbps), source
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sparkrack_roce_gid_index": sparkrack_roce_gid_index,
            "sparkrack_driver_check": sparkrack_driver_check,
            "sparkrack_rdma_rounds": sparkrack_rdma_rounds,
            "sparkrack_rdma_rail": sparkrack_rdma_rail,
        }
