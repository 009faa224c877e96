"""sparkrack.fabric.nccl on NCCL INFO excerpts in the formats NCCL 2.2x and nccl-tests print."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sparkrack.fabric.nccl import (
    check_fabric,
    check_transport,
    default_min_busbw,
    gate,
    parse_nccl_log,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl"
SCRIPT = Path(__file__).resolve().parents[2] / "sparkrack" / "data" / "fabric-check"


def log(name: str) -> str:
    return (DATA / name).read_text()


def test_roce_log_is_ib_over_roce_with_peak_busbw() -> None:
    report = parse_nccl_log(log("roce_4node_allreduce.log"))
    assert report.transport == "IB"
    assert report.link_layer == "RoCE"
    assert report.ib_devices == ("rocep1s0f0v0",)
    assert report.ib_channels == 6 and report.socket_channels == 0
    assert report.busbw_gbps == pytest.approx(23.05)  # in-place column of the 1 GiB row
    assert report.avg_busbw_gbps == pytest.approx(19.9983)
    assert [r.size for r in report.rows][-1] == 1073741824
    assert report.wrong == 0


def test_roce_log_passes_the_gate() -> None:
    _, problems = check_fabric(log("roce_4node_allreduce.log"), "roce", 10.0)
    assert problems == []
    assert check_transport(log("roce_4node_allreduce.log"), "roce") == []


def test_silent_socket_fallback_fails_when_roce_requested() -> None:
    text = log("socket_fallback_unprivileged.log")
    report = parse_nccl_log(text)
    assert report.transport == "Socket"
    assert report.socket_channels == 4
    assert report.busbw_gbps == pytest.approx(1.97)
    problems = check_transport(text, "roce")
    assert [p.rule for p in problems] == ["nccl-socket-fallback"]
    assert "privileged" in problems[0].fix
    _, gate = check_fabric(text, "roce", 10.0)
    assert {p.rule for p in gate} == {"nccl-socket-fallback", "nccl-busbw-floor"}


def test_socket_baseline_passes_when_socket_requested() -> None:
    text = log("socket_fallback_unprivileged.log")
    assert check_transport(text, "socket") == []
    _, problems = check_fabric(text, "socket", 1.5)
    assert problems == []


def test_ib_when_socket_requested_is_refused() -> None:
    problems = check_transport(log("roce_4node_allreduce.log"), "socket")
    assert [p.rule for p in problems] == ["nccl-unexpected-ib"]


def test_one_socket_peer_is_enough_to_fail() -> None:
    text = log("mixed_one_peer_socket.log")
    report = parse_nccl_log(text)
    assert (report.ib_channels, report.socket_channels) == (1, 1)
    assert report.transport == "Socket"
    assert report.busbw_gbps == pytest.approx(1.87)  # srun " 0: " prefix, 9-column row
    assert [p.rule for p in check_transport(text, "roce")] == ["nccl-socket-fallback"]


def test_gid_unreachable_points_at_host_side_ipv4() -> None:
    text = log("roce_gid_unreachable.log")
    report = parse_nccl_log(text)
    assert report.gid_unreachable
    assert report.busbw_gbps is None
    _, problems = check_fabric(text, "roce", 10.0)
    rules = [p.rule for p in problems]
    assert rules == ["nccl-no-result", "nccl-gid-unreachable"]
    assert "host-side IPv4" in problems[1].fix


def test_log_without_nccl_debug_has_no_evidence() -> None:
    report = parse_nccl_log(log("no_debug.log"))
    assert report.transport is None
    assert [p.rule for p in check_transport(log("no_debug.log"), "roce")] == ["nccl-no-evidence"]


def test_floor_is_inclusive_and_configurable() -> None:
    text = log("roce_4node_allreduce.log")
    assert check_fabric(text, "roce", 23.05)[1] == []
    _, problems = check_fabric(text, "roce", 23.06)
    assert [p.rule for p in problems] == ["nccl-busbw-floor"]
    assert "23.05 GB/s" in problems[0].message


def test_wrong_results_fail() -> None:
    text = log("roce_4node_allreduce.log").replace("23.02      0  69871.5", "23.02     17  69871.5")
    _, problems = check_fabric(text, "roce", 10.0)
    assert [p.rule for p in problems] == ["nccl-wrong-results"]


def test_parser_reads_the_fabric_check_script_output() -> None:
    """The in-pod script prints nccl-tests rows; the parser must read exactly what it prints."""
    spec = importlib.util.spec_from_file_location("nccl_allreduce", SCRIPT / "nccl_allreduce.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sizes = mod.sizes(1 << 24)
    assert sizes == [1 << s for s in range(13, 25)]  # 8 KiB .. 16 MiB: decode's sizes first
    assert mod.sizes(1 << 24, 1 << 20) == [1 << 20, 1 << 21, 1 << 22, 1 << 23, 1 << 24]
    # 4 ranks, 16 MiB in 1 ms: algbw 16.78 GB/s, busbw = algbw * 2 * 3 / 4 = 25.17 GB/s
    lines = [
        *mod.header(),
        mod.row(1 << 20, 0.0002, 4, 0),
        mod.row(1 << 24, 0.001, 4, 0),
        *mod.footer([3.9, 25.17]),
    ]
    text = "spark1:1:1 [0] NCCL INFO Using network IB\n" + "\n".join(lines)
    report = parse_nccl_log(text)
    assert [r.size for r in report.rows] == [1 << 20, 1 << 24]
    assert report.busbw_gbps == pytest.approx(25.17, abs=0.01)
    assert report.avg_busbw_gbps == pytest.approx(14.535, abs=0.001)
    assert check_fabric(text, "roce", 20.0)[1] == []


def two_rail_log(devices: str, channels: tuple[int, ...], busbw: float) -> str:
    """The 4-node RoCE excerpt with NCCL told to use two rail VFs (``devices`` as NCCL lists them)."""
    lines = []
    for line in log("roce_4node_allreduce.log").splitlines():
        if "NCCL_IB_HCA set to" in line:
            line = line.split("set to")[0] + "set to =rocep1s0f0v0,roceP2p1s0f0v0"
        elif "NET/IB : Using" in line:
            line = line.split("Using")[0] + f"Using {devices} [RO]; OOB net1:10.77.0.17<0>"
        elif "via NET/IB/" in line:
            continue
        elif line[:1] == " " and line.split()[0].isdigit():
            continue  # result rows: replaced by the one below
        lines.append(line)
    small = busbw / 2  # a healthy small-message region: half the large-message peak
    lines.append(
        f"        8192          2048     float     sum      -1     40.2    0.20 {small:>7.2f}      0"
    )
    lines.append(
        f"  1073741824     268435456     float     sum      -1  69950.3   15.35 {busbw:>7.2f}      0"
    )
    for i, dev in enumerate(channels):
        lines.append(
            f"spark1:41:98 [0] NCCL INFO Channel {i:02d}/0 : 0[0] -> 1[0] via NET/IB/{dev}"
        )
    return "\n".join(lines)


BOTH = "[0]rocep1s0f0v0:1/RoCE [1]roceP2p1s0f0v0:1/RoCE"


def test_two_rails_used_pass_at_the_scaled_floor() -> None:
    verdict = gate(two_rail_log(BOTH, (0, 1, 0, 1), 20.1), "roce")
    assert verdict.rails == ("rocep1s0f0v0", "roceP2p1s0f0v0")
    assert verdict.floor_gbps == 16.0
    assert verdict.rail_use() == [("rocep1s0f0v0", True, 2), ("roceP2p1s0f0v0", True, 2)]
    assert verdict.passed, verdict.problems


def test_a_rail_nccl_does_not_list_fails_the_gate() -> None:
    one = "[0]rocep1s0f0v0:1/RoCE"
    verdict = gate(two_rail_log(one, (0, 0), 20.1), "roce")
    assert [p.rule for p in verdict.problems] == ["nccl-rail-unused"]
    assert "roceP2p1s0f0v0" in verdict.problems[0].message
    assert verdict.rail_use()[1] == ("roceP2p1s0f0v0", False, 0)


def test_one_rail_speed_fails_the_two_rail_floor() -> None:
    """~12 GB/s is a healthy single rail but shows the second rail idle when two are given."""
    verdict = gate(two_rail_log(BOTH, (0, 1), 12.2), "roce")
    assert [p.rule for p in verdict.problems] == ["nccl-busbw-floor"]
    assert gate(two_rail_log(BOTH, (0, 1), 12.2), "roce", hcas=["rocep1s0f0v0"]).passed
    assert default_min_busbw("socket", 2) == 1.0
