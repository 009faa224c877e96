"""A rank late to a Gloo monitored barrier (SGLang's loading barrier), named from a real capture
(tests/data/nccl/captured/gloo_barrier_late_rank, made by lab/gloo_barrier_capture.py): rank 0
names the late rank; the late rank's own log tells a failed rank from a slow one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkrack.cli import main
from sparkrack.diagnose import hangs
from sparkrack.diagnose.signatures import diagnose

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "nccl" / "captured"
BARRIER = CAPTURED / "gloo_barrier_late_rank"
SIGNATURE = "gloo-monitored-barrier-late-rank"


def logs() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(BARRIER.glob("rank*.log"))}


def test_the_late_rank_is_named_from_rank_0s_log() -> None:
    [finding] = hangs.analyse(logs())
    assert finding.id == "gloo-barrier-late-rank"
    assert (finding.waiting, finding.silent, finding.dead, finding.causes) == ((0,), (1,), (), {})
    assert "rank 0 waited 5000 ms at a Gloo monitored barrier" in finding.detail
    assert "rank 1 was late" in finding.detail


def test_a_late_rank_whose_log_ends_in_an_error_failed() -> None:
    """Rank 0's barrier log with the real out-of-memory log of a rank 1 (rank1_oom): the late
    rank is named dead with its own cause."""
    group = {"rank0.log": logs()["rank0.log"]}
    group["rank1.log"] = (CAPTURED / "hangs" / "rank1_oom" / "rank1.log").read_text()
    found = [f for f in hangs.analyse(group) if f.id == "gloo-barrier-late-rank"]
    assert [(f.silent, f.dead, f.causes) for f in found] == [((), (1,), {1: "cuda-out-of-memory"})]
    assert "rank 1 failed: its log ends in torch.OutOfMemoryError" in found[0].detail


def test_rank_0s_log_alone_still_names_the_late_rank() -> None:
    [finding] = hangs.analyse({"rank0.log": logs()["rank0.log"]})
    assert finding.silent == (1,) and "no log of it given" in finding.detail


def test_negative_control_without_the_barrier_lines_there_is_no_finding() -> None:
    group = logs()
    group["rank0.log"] = "\n".join(
        line for line in group["rank0.log"].splitlines() if "monitoredBarrier" not in line
    )
    assert hangs.analyse(group) == []
    assert SIGNATURE not in {f.id for t in group.values() for f in diagnose(t)}


def test_the_signature_matches_rank_0_and_not_the_late_ranks_own_error() -> None:
    found = {name: [f.id for f in diagnose(text)] for name, text in logs().items()}
    assert found == {"rank0.log": [SIGNATURE], "rank1.log": []}
    (hit,) = diagnose(logs()["rank0.log"])
    assert hit.evidence.endswith("Rank 1 failed to pass monitoredBarrier in 5000 ms")
    assert diagnose("rank 0: passed monitored_barrier") == []
    # more than one late rank, as PyTorch joins them (``Ranks 1, 2``)
    several = (
        "[rank0]: RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 480000 ms"
    )
    assert [f.id for f in diagnose(several)] == [SIGNATURE]
    [finding] = hangs.analyse({"rank0.log": several})
    assert finding.silent == (1, 3) and "480000 ms" in finding.detail


@pytest.mark.parametrize("scenario", ["healthy", "rank1_stops", "rank1_oom"])
def test_nccl_captures_get_no_barrier_finding(scenario: str) -> None:
    group = {p.name: p.read_text() for p in (CAPTURED / "hangs" / scenario).glob("*.log")}
    assert "gloo-barrier-late-rank" not in {f.id for f in hangs.analyse(group)}


def test_the_cli_names_the_captured_folder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--json", str(BARRIER)]) == 1
    report = json.loads(capsys.readouterr().out)
    group = next(r for r in report if "hangs" in r)
    assert [(h["id"], h["waiting"], h["silent"]) for h in group["hangs"]] == [
        ("gloo-barrier-late-rank", [0], [1])
    ]
