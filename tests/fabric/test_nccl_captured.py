"""The fabric gate and diagnose on real NCCL 2.28.9 logs (tests/data/nccl/captured/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkrack.diagnose.signatures import diagnose
from sparkrack.fabric.nccl import default_min_busbw, gate, parse_nccl_log

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "nccl" / "captured"


def log(name: str) -> str:
    return (CAPTURED / f"{name}.log").read_text()


def rules(name: str, requested: str = "roce") -> list[str | None]:
    return [p.rule for p in gate(log(name), requested).problems]  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["ib-forced", "ib-forced-exact-hca", "ib-forced-subsys"])
def test_net_ib_init_failure_is_named_by_the_gate_and_diagnose(name: str) -> None:
    verdict = gate(log(name), "roce")
    assert [p.rule for p in verdict.problems] == ["nccl-net-ib-no-device"]
    problem = verdict.problems[0]
    assert "not visible in the pod" in problem.message
    assert "privileged" in problem.fix and "/sys/class/infiniband" in problem.fix
    assert verdict.report.nccl_version == "2.28.9"
    assert [f.id for f in diagnose(log(name))] == ["nccl-net-ib-no-device"]


def test_the_gate_names_the_hca_and_scales_its_floor_with_the_rails_it_lists() -> None:
    verdict = gate(log("ib-forced-exact-hca"), "roce")
    assert verdict.rails == ("rocep1s0f0v0", "roceP2p1s0f0v0")
    assert verdict.floor_gbps == default_min_busbw("roce", 2) == 16.0
    assert "=rocep1s0f0v0,roceP2p1s0f0v0" in verdict.problems[0].message
    assert gate(log("ib-forced-subsys"), "roce").floor_gbps == default_min_busbw("roce", 1)


def test_unknown_net_plugin_is_told_apart_from_missing_verbs_devices() -> None:
    assert rules("bogus-net") == ["nccl-net-plugin-not-found"]
    assert [f.id for f in diagnose(log("bogus-net"))] == ["nccl-net-plugin-not-found"]


def test_without_the_no_device_line_the_cause_changes() -> None:
    """Negative control: the NET/IB verdict rests on the 'No device found' line, not on luck."""
    text = "\n".join(
        line for line in log("ib-forced").splitlines() if "No device found" not in line
    )
    assert [p.rule for p in gate(text, "roce").problems] == ["nccl-net-plugin-not-found"]
    assert [f.id for f in diagnose(text)] == ["nccl-net-plugin-not-found"]


def test_socket_baseline_passes_as_socket_and_fails_as_roce() -> None:
    report = parse_nccl_log(log("socket"))
    assert report.transport == "Socket" and report.socket_channels == 8
    assert report.busbw_gbps == pytest.approx(4.11)
    # captured from 1 MiB: the gate now also asks for the sizes from 8 KiB
    assert [p.rule for p in gate(log("socket"), "socket").problems] == ["nccl-no-small-messages"]
    assert rules("socket")[:2] == ["nccl-socket-fallback", "nccl-busbw-floor"]
    assert [f.id for f in diagnose(log("socket"))] == ["nccl-socket-transport"]


def test_silent_fallback_is_caught_without_any_nccl_error() -> None:
    verdict = gate(log("silent-fallback"), "roce")
    assert [p.rule for p in verdict.problems] == [
        "nccl-socket-fallback",
        "nccl-busbw-floor",
        "nccl-no-small-messages",
    ]
    assert verdict.rail_use() == [("rocep1s0f0v0", False, 0)]
    assert "Failed to initialize any NET plugin" not in log("silent-fallback")
    assert [f.id for f in diagnose(log("silent-fallback"))] == ["nccl-socket-transport"]


def test_defaults_on_one_host_never_cross_the_fabric() -> None:
    report = parse_nccl_log(log("defaults"))
    assert report.local_channels == 48 and report.ib_channels == report.socket_channels == 0
    assert report.ib_no_device and not report.net_init_failed
    assert "nccl-no-fabric" in rules("defaults", "socket")
    # NCCL chose the socket network, but every channel runs over P2P: nothing goes over TCP.
    assert "Using network Socket" in log("defaults")
    assert diagnose(log("defaults")) == []
