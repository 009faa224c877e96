"""The fabric gate's small-message report on real sweeps from 8 KiB (tests/data/nccl/captured/sweep:
the fabric-check script and nccl-tests all_reduce_perf, NVLink and socket transports)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkrack.fabric.nccl import (
    SMALL_MESSAGE_LOW_RATIO,
    SMALL_MESSAGE_MAX_BYTES,
    gate,
    parse_nccl_log,
    size_regions,
    small_message_problems,
)

SWEEP = Path(__file__).resolve().parents[1] / "data" / "nccl" / "captured" / "sweep"
CAPTURED = SWEEP.parent
SHAPES = ["fabric-check", "all_reduce_perf"]


def text(name: str) -> str:
    return (SWEEP / name).read_text()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", ["nvlink", "socket"])
def test_both_shapes_parse_from_8_kib(shape: str, case: str) -> None:
    report = parse_nccl_log(text(f"{shape}-{case}.log"))
    sizes = [r.size for r in report.rows]
    assert sizes[0] == 8 << 10
    assert sizes == [sizes[0] << i for i in range(len(sizes))]
    assert all(r.time_us is not None and r.time_us > 0 for r in report.rows)
    assert report.wrong == 0


@pytest.mark.parametrize("shape", SHAPES)
def test_the_regions_are_the_rows_split_at_1_mib(shape: str) -> None:
    report = parse_nccl_log(text(f"{shape}-nvlink.log"))
    regions = size_regions(report)
    assert regions is not None
    small = [r for r in report.rows if r.size <= SMALL_MESSAGE_MAX_BYTES]
    assert regions.small_peak_gbps == max(r.busbw_gbps for r in small)
    assert regions.large_peak_gbps == report.busbw_gbps
    assert regions.small_min_size == 8 << 10
    assert regions.small_latency_us == small[0].time_us


@pytest.mark.parametrize("shape", SHAPES)
def test_a_small_region_far_below_the_peak_warns(shape: str) -> None:
    # NVLink: the small region is latency-bound, about a tenth of the 1 GiB peak.
    report = parse_nccl_log(text(f"{shape}-nvlink.log"))
    failures, warnings = small_message_problems(report, "log")
    assert failures == []
    assert [w.rule for w in warnings] == ["nccl-small-message-low"]
    assert "LOW" in warnings[0].message and "mis-spanned" in warnings[0].fix


@pytest.mark.parametrize("shape", SHAPES)
def test_negative_control_a_small_region_near_the_peak_does_not_warn(shape: str) -> None:
    # Sockets: flat from 1 MiB on, the small region is above 0.4x of the peak.
    report = parse_nccl_log(text(f"{shape}-socket.log"))
    regions = size_regions(report)
    assert regions is not None and regions.ratio >= SMALL_MESSAGE_LOW_RATIO
    assert small_message_problems(report, "log") == ([], [])


def test_the_gate_reports_the_regions_and_fails_below_the_rails_small_floor() -> None:
    log = text("fabric-check-socket.log")
    verdict = gate(log, "socket", source="log")
    assert verdict.passed, verdict.problems
    assert verdict.regions is not None and verdict.warnings == []
    small = verdict.regions.small_peak_gbps
    floored = gate(log, "socket", source="log", min_small_busbw_gbps=small + 0.5)
    assert [p.rule for p in floored.problems] == ["nccl-small-message-floor"]
    assert gate(log, "socket", source="log", min_small_busbw_gbps=small - 0.5).passed


def test_a_sweep_that_starts_at_1_mib_fails_the_gate() -> None:
    # The earlier capture ran the script from 1 MiB: the gate no longer accepts that sweep.
    verdict = gate((CAPTURED / "socket.log").read_text(), "socket")
    assert [p.rule for p in verdict.problems] == ["nccl-no-small-messages"]


def test_the_cli_prints_the_small_message_line_and_the_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sparkrack.cli import main

    log = str(SWEEP / "fabric-check-socket.log")
    assert main(["fabric-check", "--log", log, "--requested", "socket"]) == 0
    out = capsys.readouterr().out
    assert "small messages: peak 2.21 GB/s at 1048576 B, latency 64.5 us at 8192 B" in out
    assert "WARN" not in out and out.rstrip().endswith("PASS")
    assert main(["fabric-check", "--log", log, "--requested", "socket", "--min-small-busbw", "3"])
    assert "nccl-small-message-floor" in capsys.readouterr().out
