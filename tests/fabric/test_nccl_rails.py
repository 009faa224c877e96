"""The fabric gate per rail: one sweep over every rail, then one per rail, each judged and
reported on its own.

No per-rail capture exists: tests/data/nccl/captured/sweep/ holds sweeps of two GPUs of one host
(NVLink and sockets), not of a Spark's RoCE rails. The per-rail judging is tested on those real
outputs relabelled per rail: the log of one capture stands for the all-rails sweep and the logs
of others stand for rail0 and rail1. What is real is the output's shape and figures; which rail
it came from is the test's label."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkrack.adapters.ansible import FILTERS
from sparkrack.errors import SparkrackError
from sparkrack.fabric.addressplan import FabricPlan, NodeInput
from sparkrack.fabric.layout import compute_plan
from sparkrack.fabric.nccl import (
    ALL_RAILS,
    fabric_sweeps,
    gate_sweeps,
    parse_nccl_log,
    size_regions,
)
from sparkrack.fabric.ncclenv import rank_env
from sparkrack.k8s import ClusterOptions
from sparkrack.k8s.fabric_check import render_fabric_check

SWEEP = Path(__file__).resolve().parents[1] / "data" / "nccl" / "captured" / "sweep"
RAILS = ["enp1s0f0np0", "enP2p1s0f0np0"]


def two_rails() -> FabricPlan:
    spec = {"subnet": "10.77.0.0/24", "ports": RAILS, "rails": RAILS, "vfs_in_use": [0]}
    return compute_plan(
        spec, [NodeInput("spark1", "172.28.250.11"), NodeInput("spark2", "172.28.250.12")]
    )


def one_rail() -> FabricPlan:
    spec = {"subnet": "10.77.0.0/24", "vfs_in_use": [0]}
    return compute_plan(
        spec, [NodeInput("spark1", "172.28.250.11"), NodeInput("spark2", "172.28.250.12")]
    )


def text(name: str) -> str:
    return (SWEEP / name).read_text()


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_two_rails_give_a_combined_sweep_then_one_per_rail() -> None:
    sweeps = fabric_sweeps(two_rails())
    assert [(s.name, s.rails, s.devices) for s in sweeps] == [
        (ALL_RAILS, (0, 1), ("rocep1s0f0v0", "roceP2p1s0f0v0")),
        ("rail0", (0,), ("rocep1s0f0v0",)),
        ("rail1", (1,), ("roceP2p1s0f0v0",)),
    ]
    # one rail: the combined sweep is that rail's sweep, run once
    assert [s.name for s in fabric_sweeps(one_rail())] == [ALL_RAILS]


def test_a_one_rail_sweep_gives_nccl_that_rails_device_alone() -> None:
    plan = two_rails()
    rail1 = fabric_sweeps(plan)[2]
    pods = [
        d
        for d in render_fabric_check(plan, ClusterOptions(), "roce", sweep=rail1)
        if d["kind"] == "Pod"
    ]
    for pod, node in zip(pods, plan.nodes, strict=True):
        env = env_of(pod)
        assert env["NCCL_IB_HCA"] == f"={node.vf(0, 1).rdma_device}" == "=roceP2p1s0f0v0"
        assert "NCCL_IB_MERGE_NICS" not in env
        assert env["SPARKRACK_GID_TARGETS"] == f"roceP2p1s0f0v0={node.vf(0, 1).address}"
        assert env == {**env, **rank_env(plan, node, transport="roce", rails=(1,))}
        assert pod["metadata"]["name"] == f"sparkrack-fabric-check-rail1-{node.name}"
    # negative control: the combined sweep's pods get both rails, merged
    combined = env_of(render_fabric_check(plan, ClusterOptions(), "roce")[1])
    assert combined["NCCL_IB_HCA"] == "=rocep1s0f0v0,roceP2p1s0f0v0"
    assert combined["NCCL_IB_MERGE_NICS"] == "1"


def test_a_socket_sweep_of_one_rail_binds_that_rails_interface() -> None:
    plan = two_rails()
    env = rank_env(plan, plan.nodes[0], transport="socket", rails=(1,))
    assert env["NCCL_SOCKET_IFNAME"] == "net2" and env["GLOO_SOCKET_IFNAME"] == "net1"
    assert rank_env(plan, plan.nodes[0], transport="socket")["NCCL_SOCKET_IFNAME"] == "net1"


def test_a_rail_the_plan_does_not_have_is_refused() -> None:
    plan = two_rails()
    with pytest.raises(SparkrackError, match="fabric.rails"):
        rank_env(plan, plan.nodes[0], transport="roce", rails=(2,))
    with pytest.raises(SparkrackError, match="fabric.rails"):
        rank_env(plan, plan.nodes[0], transport="roce", rails=())


def judged(logs: dict[str, str], small_floor: float | None = None) -> dict[str, Any]:
    sweeps = fabric_sweeps(two_rails())
    return {s.name: v for s, v in gate_sweeps(logs, sweeps, "socket", None, small_floor)}


def test_each_rail_is_judged_and_reported_on_its_own_log() -> None:
    # relabelled: the script's socket sweep stands for every rail at once and for rail0,
    # nccl-tests' socket sweep for rail1
    logs = {
        ALL_RAILS: text("fabric-check-socket.log"),
        "rail0": text("fabric-check-socket.log"),
        "rail1": text("all_reduce_perf-socket.log"),
    }
    verdicts = judged(logs)
    assert all(v.passed and not v.warnings for v in verdicts.values())
    line = verdicts["rail1"].small_message_line()
    assert line.startswith("peak 1.93 GB/s at 1048576 B, latency 45.0 us at 8192 B")
    assert "large-message peak 2.70 GB/s" in line
    assert verdicts["rail0"].small_message_line().startswith("peak 2.21 GB/s")
    assert [p.file for v in verdicts.values() for p in v.problems] == []


def test_negative_control_a_rail_whose_small_region_is_below_04x_warns() -> None:
    # relabelled: the NVLink sweep (small region 0.09x of its peak) stands for rail1
    logs = {
        ALL_RAILS: text("fabric-check-socket.log"),
        "rail0": text("all_reduce_perf-socket.log"),
        "rail1": text("fabric-check-nvlink.log"),
    }
    verdicts = judged(logs)
    regions = size_regions(parse_nccl_log(logs["rail1"]))
    assert regions is not None and regions.ratio < 0.4
    assert [w.rule for w in verdicts["rail1"].warnings] == ["nccl-small-message-low"]
    assert verdicts["rail1"].warnings[0].file == "fabric check rail1"
    assert verdicts["rail0"].warnings == verdicts[ALL_RAILS].warnings == []


def test_negative_control_a_rail_below_the_small_message_floor_fails() -> None:
    # rail1's small-message peak is 1.93 GB/s, rail0's 2.21: a floor of 2.0 per rail fails rail1
    logs = {
        ALL_RAILS: text("fabric-check-socket.log"),
        "rail0": text("fabric-check-socket.log"),
        "rail1": text("all_reduce_perf-socket.log"),
    }
    verdicts = judged(logs, small_floor=2.0)
    assert [p.rule for p in verdicts["rail1"].problems] == ["nccl-small-message-floor"]
    assert "1.93 GB/s" in verdicts["rail1"].problems[0].message
    assert verdicts["rail0"].passed and verdicts[ALL_RAILS].passed
    assert judged(logs, small_floor=1.9)["rail1"].passed


def test_a_sweep_without_a_log_fails() -> None:
    verdicts = judged({ALL_RAILS: text("fabric-check-socket.log")})
    assert [p.rule for p in verdicts["rail0"].problems] == ["nccl-no-result"]
    assert not verdicts["rail1"].passed and verdicts[ALL_RAILS].passed


def test_roce_floors_per_rail_are_the_combined_floors_share() -> None:
    sweeps = fabric_sweeps(two_rails())
    log = text("fabric-check-socket.log")
    verdicts = dict(gate_sweeps({s.name: log for s in sweeps}, sweeps, "roce", None, 3.0))
    floors = {s.name: (v.floor_gbps, v.small_floor_gbps) for s, v in verdicts.items()}
    assert floors == {ALL_RAILS: (16.0, 6.0), "rail0": (8.0, 3.0), "rail1": (8.0, 3.0)}
    given = dict(gate_sweeps({s.name: log for s in sweeps}, sweeps, "roce", 20.0, None))
    assert [v.floor_gbps for v in given.values()] == [20.0, 10.0, 10.0]


def test_the_gate_filter_reports_every_sweep() -> None:
    logs = {
        ALL_RAILS: text("fabric-check-socket.log"),
        "rail0": text("fabric-check-socket.log"),
        "rail1": text("fabric-check-nvlink.log"),
    }
    result = FILTERS["sparkrack_fabric_gate"](logs, "socket", None, two_rails().to_dict(), None)
    assert [s["name"] for s in result["sweeps"]] == [ALL_RAILS, "rail0", "rail1"]
    assert [s["devices"] for s in result["sweeps"]][1:] == [["rocep1s0f0v0"], ["roceP2p1s0f0v0"]]
    assert all(s["small_messages"].startswith("peak ") for s in result["sweeps"])
    assert not result["passed"]  # rail1's "sweep" ran over NVLink inside one host
    assert any("fabric check rail1" in w and "LOW" in w for w in result["warnings"])
    assert all("fabric check rail1" in p for p in result["problems"])


def test_the_cli_reports_each_rail_and_fails_the_rail_below_its_floor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sparkrack.cli import main

    # relabelled: nccl-tests' socket sweep stands for rail1
    args = [
        "fabric-check",
        "--requested",
        "socket",
        "--log",
        str(SWEEP / "fabric-check-socket.log"),
        "--rail-log",
        f"rocep1s0f0v0={SWEEP / 'fabric-check-socket.log'}",
        "--rail-log",
        f"roceP2p1s0f0v0={SWEEP / 'all_reduce_perf-socket.log'}",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "rail1: small messages: peak 1.93 GB/s at 1048576 B, latency 45.0 us at 8192 B" in out
    assert "rail0: small messages: peak 2.21 GB/s" in out and out.rstrip().endswith("PASS")
    assert main([*args, "--min-small-busbw", "2"]) == 1
    fails = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and "fabric check rail1" in fails[0]
    assert "nccl-small-message-floor" in fails[0]
    assert main([*args[:-1], "roceP2p1s0f0v0"]) == 2  # not DEVICE=FILE
