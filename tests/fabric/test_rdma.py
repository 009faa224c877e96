"""The per-rail RDMA preflight parser and verdicts (sparkrack.fabric.rdma) on perftest-format output."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkrack.errors import Problem
from sparkrack.fabric.rdma import (
    DEFAULT_FLOOR_GBPS,
    RailFacts,
    describe,
    judge_rail,
    parse_rdma_links,
    parse_write_bw,
    rail_facts,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "rdma"
HEALTHY_SYSFS = {
    "speed": "200000\n",
    "current_link_width": "4\n",
    "current_link_speed": "32.0 GT/s PCIe\n",
    "fw_ver": "28.45.4028\n",
}


def text(name: str) -> str:
    return (DATA / name).read_text()


def facts(netdev: str = "enp1s0f0np0", dev: str = "rocep1s0f0", **sysfs: str) -> RailFacts:
    return rail_facts(netdev, dev, text("rdma_link.txt"), {**HEALTHY_SYSFS, **sysfs})


def rules(problems: list[Problem]) -> list[str]:
    return [p.rule for p in problems]


def test_healthy_rail_is_parsed_and_passes() -> None:
    result = parse_write_bw(text("write_bw_healthy.txt"))
    assert result.device == "rocep1s0f0" and result.qps == 8
    assert result.link_type == "Ethernet" and result.mtu == 4096
    assert result.msg_bytes == 65536
    assert result.average_gbps == pytest.approx(92.57) and result.error is None
    assert judge_rail(facts(), result) == []
    line = describe(facts(), result)
    assert line == (
        "rocep1s0f0 <-> enp1s0f0np0 (ACTIVE), 200 Gb/s, PCIe 32.0 GT/s PCIe x4, "
        "fw 28.45.4028: ib_write_bw 92.57 Gb/s"
    )


def test_second_rail_maps_to_its_own_netdev() -> None:
    result = parse_write_bw(text("write_bw_second_rail.txt"))
    assert result.device == "roceP2p1s0f0" and result.average_gbps == pytest.approx(97.28)
    rail = facts("enP2p1s0f0np0", "roceP2p1s0f0")
    assert rail.mapped_netdev == "enP2p1s0f0np0" and rail.link_state == "ACTIVE"
    assert judge_rail(rail, result) == []


def test_degraded_cx7_is_named_with_its_recovery() -> None:
    result = parse_write_bw(text("write_bw_degraded.txt"))
    assert result.average_gbps == pytest.approx(13.23)
    (problem,) = judge_rail(facts(), result)
    assert problem.rule == "rdma-degraded-cx7"
    assert "13.23 Gb/s" in problem.message and "~13 Gb/s" in problem.message
    assert "remove AC power" in problem.fix and "power-cycle" in problem.fix


def test_same_bandwidth_with_a_narrow_pcie_link_is_not_called_degraded_cx7() -> None:
    """Negative control: the degraded-CX-7 verdict needs a healthy link and PCIe x4."""
    result = parse_write_bw(text("write_bw_degraded.txt"))
    assert rules(judge_rail(facts(current_link_width="2"), result)) == ["rdma-pcie-width"]
    assert rules(judge_rail(facts(speed="100000"), result)) == ["rdma-link-speed"]
    slow = parse_write_bw(text("write_bw_healthy.txt").replace("92.57", "41.00"))
    assert rules(judge_rail(facts(), slow)) == ["rdma-below-floor"]


def test_floor_is_per_rail_and_adjustable() -> None:
    result = parse_write_bw(text("write_bw_healthy.txt"))
    assert DEFAULT_FLOOR_GBPS == 60.0
    assert rules(judge_rail(facts(), result, floor_gbps=95.0)) == ["rdma-below-floor"]


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("write_bw_connect_failed.txt", "Couldn't connect to 10.77.0.2:18515"),
        ("write_bw_no_device.txt", "IB device roceP2p1s0f0 not found"),
        ("write_bw_mbytes.txt", "run ib_write_bw with --report_gbits"),
    ],
)
def test_failed_runs_say_why(name: str, needle: str) -> None:
    result = parse_write_bw(text(name))
    assert result.average_gbps is None
    assert result.error is not None and needle in result.error
    (problem,) = judge_rail(facts(), result)
    assert problem.rule == "rdma-no-result" and needle in problem.message


def test_rdma_link_mapping_and_a_wrong_rail() -> None:
    links = parse_rdma_links(text("rdma_link.txt"))
    assert {d: (link.netdev, link.state) for d, link in links.items()} == {
        "rocep1s0f0": ("enp1s0f0np0", "ACTIVE"),
        "rocep1s0f1": ("enp1s0f1np1", "DOWN"),
        "roceP2p1s0f0": ("enP2p1s0f0np0", "ACTIVE"),
        "roceP2p1s0f1": ("enP2p1s0f1np1", "DOWN"),
    }
    wrong = facts("enP2p1s0f0np0", "rocep1s0f0")
    result = parse_write_bw(text("write_bw_healthy.txt"))
    assert rules(judge_rail(wrong, result)) == ["rdma-mapping"]


def test_unreadable_sysfs_values_become_unknown() -> None:
    rail = rail_facts("enp1s0f0np0", "rocep1s0f0", "", {"speed": "-1\n"})
    assert rail.speed_mbps is None and rail.pcie_width is None and rail.firmware is None
    assert rail.mapped_netdev is None
    result = parse_write_bw(text("write_bw_degraded.txt"))
    assert rules(judge_rail(rail, result)) == ["rdma-below-floor"]


def test_pair_rounds_cover_every_spark_without_sharing_one_per_round() -> None:
    from sparkrack.fabric.rdma import pair_rounds

    four = pair_rounds(["s1", "s2", "s3", "s4"])
    assert four == [
        {
            "s1": {"role": "server", "peer": "s2"},
            "s2": {"role": "client", "peer": "s1"},
            "s3": {"role": "server", "peer": "s4"},
            "s4": {"role": "client", "peer": "s3"},
        }
    ]
    three = pair_rounds(["s1", "s2", "s3"])
    assert [sorted(r) for r in three] == [["s1", "s2"], ["s1", "s3"]]
    assert three[1]["s3"] == {"role": "client", "peer": "s1"}
    assert pair_rounds(["s1"]) == []


def test_rail_filter_reads_key_value_sysfs_lines() -> None:
    from sparkrack.adapters.ansible import FILTERS

    sysfs = (
        "speed=200000\ncurrent_link_width=4\ncurrent_link_speed=32.0 GT/s PCIe\nfw_ver=28.45.4028\n"
    )
    verdict = FILTERS["sparkrack_rdma_rail"](
        text("write_bw_degraded.txt"), "enp1s0f0np0", "rocep1s0f0", text("rdma_link.txt"), sysfs, 60
    )
    assert verdict["passed"] is False and verdict["rules"] == ["rdma-degraded-cx7"]
    assert "fw 28.45.4028" in verdict["line"]
    healthy = FILTERS["sparkrack_rdma_rail"](
        text("write_bw_healthy.txt"), "enp1s0f0np0", "rocep1s0f0", text("rdma_link.txt"), sysfs, 60
    )
    assert healthy["passed"] is True and healthy["average_gbps"] == pytest.approx(92.57)
