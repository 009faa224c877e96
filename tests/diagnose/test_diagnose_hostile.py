"""``sparkrack diagnose`` on hostile logs: huge lines, many near-matches, window edges.

Timing is measured in tests/diagnose_benchmark.py; here a generous bound only says "no hang".
The windowed matcher is checked against the plain definition (scan every context line), which
the test spells out in ``reference``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_logs import NCCL_SPAM, dense_matches, hostile_log, huge_line, near_matches

from sparkrack.cli import main
from sparkrack.diagnose.signatures import MAX_LINE_CHARS, Finding, diagnose, load_signatures

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
DECODE = "illegal-instruction-decode"
ILLEGAL = "RuntimeError: CUDA error: an illegal instruction was encountered"


def reference(text: str) -> list[tuple[str, int, int]]:
    """(id, first line, count) by the definition: every line, every context line in the window."""
    lines = [line[:MAX_LINE_CHARS] for line in text.splitlines()]
    out = []
    for sig in load_signatures():
        hits = []
        for i, line in enumerate(lines):
            if not sig.match.search(line):
                continue
            ctx = lines[max(0, i - sig.window) : i + sig.window + 1]
            if sig.near and not any(p.search(c) for p in sig.near for c in ctx):
                continue
            if any(p.search(c) for p in sig.not_near for c in ctx):
                continue
            hits.append(i + 1)
        if hits:
            out.append((sig.id, hits[0], len(hits)))
    return sorted(out, key=lambda t: t[1])


def summary(findings: list[Finding]) -> list[tuple[str, int, int]]:
    return [(f.id, f.line, f.count) for f in findings]


def test_a_signature_after_a_huge_line_is_found_on_its_line() -> None:
    log = (LOGS / "cudnn-not-available.log").read_text()
    (alone,) = diagnose(log)
    (finding,) = diagnose(huge_line(5_000_000) + "\n" + log)
    assert (finding.id, finding.line) == ("cudnn-not-available", alone.line + 1)


def test_a_line_is_read_up_to_the_bound_only() -> None:
    message = "RuntimeError: cuDNN is not available"
    inside = "x" * (MAX_LINE_CHARS - len(message)) + message
    beyond = "x" * MAX_LINE_CHARS + message
    assert [f.id for f in diagnose(inside)] == ["cudnn-not-available"]
    assert diagnose(beyond) == []
    (finding,) = diagnose(message + " " + "y" * 10_000)
    assert len(finding.evidence) <= 300


@pytest.mark.parametrize(("gap", "found"), [(40, True), (41, False)])
def test_context_window_edges(gap: int, found: bool) -> None:
    lines = [ILLEGAL] + ["filler"] * (gap - 1) + ["  in process_batch_result_decode"]
    assert (DECODE in [f.id for f in diagnose("\n".join(lines))]) is found
    before = ["  in forward_decode"] + ["filler"] * (gap - 1) + [ILLEGAL]
    assert (DECODE in [f.id for f in diagnose("\n".join(before))]) is found


def test_matches_the_definition_on_mixed_logs() -> None:
    rng = random.Random(12)
    pool = [p.read_text().splitlines() for p in sorted(LOGS.glob("*.log"))]
    pool.append(near_matches(50))
    pool.append([NCCL_SPAM * 3, "NCCL INFO Using network Socket", "ibv_modify_qp failed"])
    for _ in range(30):
        lines: list[str] = []
        for _ in range(rng.randint(1, 8)):
            chunk = rng.choice(pool)
            start = rng.randrange(len(chunk))
            lines += chunk[start : start + rng.randint(1, 60)]
            lines += ["noise"] * rng.randint(0, 50)
        text = "\n".join(lines)
        assert summary(diagnose(text)) == reference(text)


@pytest.mark.parametrize("make", [hostile_log, dense_matches], ids=["huge-lines", "dense-matches"])
def test_an_18_megabyte_hostile_log_does_not_hang(
    tmp_path: Path, make: Callable[[int], str]
) -> None:
    log = tmp_path / "hostile.log"
    log.write_text(make(18_700_000) + "\n" + (LOGS / "mem-fraction-too-low.log").read_text())
    start = time.monotonic()
    assert main(["diagnose", "--json", str(log)]) == 1
    assert time.monotonic() - start < 60  # measured 1-2 s (tests/diagnose_benchmark.py)
