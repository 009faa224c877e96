"""RoCE GID index discovery from a sysfs GID table dump (format of roles/roce)."""

from __future__ import annotations

import pytest

from sparkrack.errors import SparkrackError
from sparkrack.fabric.roce import ipv4_gid, parse_gid_dump, roce_v2_ipv4_index

ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"
LL = "fe80:0000:0000:0000:0053:50ff:fe01:0000"


def dump(*rows: tuple[str, int, str, str, str]) -> str:
    return "".join("\t".join(map(str, row)) + "\n" for row in rows)


def test_ipv4_gid_spelling() -> None:
    assert ipv4_gid("10.77.0.17") == "0000:0000:0000:0000:0000:ffff:0a4d:0011"


def test_finds_roce_v2_ipv4_entry_not_index_3() -> None:
    text = dump(
        ("rocep1s0f0v0", 0, LL, "IB/RoCE v1", "enp1s0f0v0"),
        ("rocep1s0f0v0", 1, LL, "RoCE v2", "enp1s0f0v0"),
        ("rocep1s0f0v0", 2, ZERO, "", ""),
        ("rocep1s0f0v0", 4, ipv4_gid("10.77.0.17"), "IB/RoCE v1", "enp1s0f0v0"),
        ("rocep1s0f0v0", 5, ipv4_gid("10.77.0.17"), "RoCE v2", "enp1s0f0v0"),
        ("rocep1s0f0v1", 3, ipv4_gid("10.77.0.17"), "RoCE v2", "enp1s0f0v1"),
    )
    assert roce_v2_ipv4_index(text, "rocep1s0f0v0", "10.77.0.17", "enp1s0f0v0") == 5


def test_only_link_local_entries_explain_seed_003() -> None:
    text = dump(
        ("rocep1s0f0v0", 0, LL, "IB/RoCE v1", "enp1s0f0v0"),
        ("rocep1s0f0v0", 1, LL, "RoCE v2", "enp1s0f0v0"),
    )
    with pytest.raises(SparkrackError) as info:
        roce_v2_ipv4_index(text, "rocep1s0f0v0", "10.77.0.17", "enp1s0f0v0")
    problem = info.value.problems[0]
    assert "no RoCE v2 GID for 10.77.0.17" in problem.message and "1=fe80" in problem.message
    assert "Network is unreachable" in problem.fix and "10.77.0.17" in problem.fix


def test_missing_device_is_named() -> None:
    with pytest.raises(SparkrackError, match="rocep1s0f0v0 .* has no GID entries"):
        roce_v2_ipv4_index("", "rocep1s0f0v0", "10.77.0.17", "enp1s0f0v0")


def test_parser_skips_empty_and_malformed_lines() -> None:
    text = "garbage\n" + dump(("d", 0, ZERO, "", ""), ("d", 1, LL, "RoCE v2", "n"))
    assert [(e.index, e.type) for e in parse_gid_dump(text)] == [(1, "RoCE v2")]
