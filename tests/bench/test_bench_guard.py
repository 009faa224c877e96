"""Streaming repetition guard: unit behaviour, and the n=8 blind spot of src:roce-post (Finding 3)."""

from __future__ import annotations

import itertools
import time

import pytest

from sparkrack.bench import server, server_text
from sparkrack.bench.client import RequestSpec
from sparkrack.bench.detectors import DetectorConfig
from sparkrack.bench.guard import GuardConfig, RepetitionGuard
from sparkrack.bench.runner import BenchConfig, run_bench

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback


def _feed_all(guard: RepetitionGuard, tokens: list[str]) -> int | None:
    """Feed tokens one by one; return the index at which the guard tripped."""
    for i, tok in enumerate(tokens):
        if guard.feed(tok) is not None:
            return i
    return None if guard.finish() is None else len(tokens)


def test_flood_defaults_are_seed_003() -> None:
    cfg = GuardConfig()
    assert (cfg.ngram, cfg.ngram_max_count, cfg.ngram_ratio) == (4, 8, 0.14)
    # The seed's 600-character suffix window let a 595-character sub-word loop through; the
    # tail detectors need only min_loop_chars of loop and keep enough tail for every check.
    assert cfg.detectors.min_loop_chars < 600 <= cfg.suffix_window


def test_natural_text_never_trips() -> None:
    tokens = list(itertools.islice(server_text.token_stream("normal", 7), 4000))
    guard = RepetitionGuard()
    assert _feed_all(guard, tokens) is None
    assert guard.chars_seen > 20000


def test_ngram_flood_trips_on_a_looping_sentence() -> None:
    tokens = list(itertools.islice(server_text.token_stream("repetition", 1), 400))
    no_tail_checks = DetectorConfig(
        min_loop_chars=10**6, max_compression_ratio=0.0, max_repeat_share=1.0
    )
    guard = RepetitionGuard(GuardConfig(detectors=no_tail_checks))
    tripped = _feed_all(guard, tokens)
    assert tripped is not None and tripped < 200
    assert guard.verdict is not None and guard.verdict.detector == "ngram-flood"
    assert "4-gram" in guard.verdict.detail


def test_char_loop_trips_on_single_token_collapse() -> None:
    guard = RepetitionGuard()
    tripped = _feed_all(guard, ["Let me think."] + ["!"] * 2000)
    assert guard.verdict is not None and guard.verdict.detector == "char-loop"
    # min_loop_chars of loop + one period, found at the next periodic check.
    limit = GuardConfig().detectors.min_loop_chars + 1 + GuardConfig().check_every_chars + 15
    assert tripped is not None and tripped <= limit
    assert "'!'" in guard.verdict.detail


def test_subword_loop_without_spaces_trips() -> None:
    """A random-weight model's "gorithm" x 85 (595 characters, one "word") is caught live."""
    guard = RepetitionGuard()
    tripped = _feed_all(guard, ["The scheduling al"] + ["gorithm"] * 85)
    assert guard.verdict is not None and guard.verdict.detector == "char-loop"
    assert tripped is not None and tripped < 50
    assert "'gorithm'" in guard.verdict.detail


def test_stagnation_trips_on_blank_chunks() -> None:
    guard = RepetitionGuard(GuardConfig(stagnation_chunks=50))
    assert _feed_all(guard, ["Hello world."] + [""] * 49) is None
    guard2 = RepetitionGuard(GuardConfig(stagnation_chunks=50, check_every_chars=10**9))
    assert _feed_all(guard2, ["Hello world."] + [" "] * 60) == 50
    assert guard2.verdict is not None and guard2.verdict.detector == "stagnation"


def test_newline_flood_trips_by_default() -> None:
    """ "\n" x 170 as separate chunks: the blank-chunk run and the whitespace flood both see it."""
    guard = RepetitionGuard()
    tripped = _feed_all(guard, ["The al"] + ["\n"] * 170)
    assert tripped is not None and tripped <= GuardConfig().stagnation_chunks
    assert guard.verdict is not None
    assert guard.verdict.detector in ("stagnation", "whitespace-flood", "char-loop")


def test_thresholds_are_configurable() -> None:
    loop = ["alpha beta gamma delta "] * 9
    strict = RepetitionGuard(GuardConfig(ngram_max_count=8))
    lax_loops = DetectorConfig(min_loop_chars=5000, max_compression_ratio=0.0, max_repeat_share=1.0)
    lax = RepetitionGuard(GuardConfig(ngram_max_count=50, detectors=lax_loops))
    assert _feed_all(strict, loop) is not None
    assert _feed_all(lax, loop) is None


def test_disabled_guard_never_trips() -> None:
    guard = RepetitionGuard(GuardConfig(enabled=False))
    assert _feed_all(guard, ["!"] * 5000) is None


def test_finish_catches_a_loop_the_periodic_check_never_saw() -> None:
    """The stream ends before the next periodic check: finish() still runs the detector."""
    cfg = GuardConfig(check_every_chars=10**9, ngram_max_count=10**9)
    guard = RepetitionGuard(cfg)
    for tok in ["x"] + ["!"] * 700:
        assert guard.feed(tok) is None
    verdict = guard.finish()
    assert verdict is not None and verdict.detector == "char-loop"


@pytest.mark.parametrize("mode", ["repetition", "uniform"])
def test_eight_concurrent_garbage_streams_all_trip(mode: str) -> None:
    """src:roce-post's blind spot: 8 garbage streams that all hit max_tokens at the same instant.

    The loop is only just long enough for the detector (660 '!' / ~100 looped words) and the
    periodic check is pushed out of reach, so only the end-of-stream check can see it — for all
    8 streams finishing together.  Every one must still be caught, aborted/failed, with its reason.
    """
    tokens = 660 if mode == "uniform" else 160
    with server.spawn(["--rate", "4000", "--tokens-per-chunk", "8"]) as url:
        guard = GuardConfig(check_every_chars=10**9)
        spec = RequestSpec(
            url=url, model=f"{server.BASE_MODEL}-{mode}", max_tokens=tokens, guard=guard
        )
        run = run_bench(BenchConfig(spec=spec, concurrency=[8], progress=False))
    level = run.levels[0]
    assert (level.ok, level.failed, level.status) == (0, 8, "FAILED")
    for req in level.requests:
        assert req.status == "failed" and req.guard == "tripped"
        assert req.guard_reason and req.error and "repetition guard" in req.error
    assert level.peak_tok_s == 0.0


def test_tripped_stream_is_aborted_early() -> None:
    """With default thresholds a looping stream is cut long before max_tokens."""
    with server.spawn(["--rate", "400", "--tokens-per-chunk", "2"]) as url:
        spec = RequestSpec(url=url, model=f"{server.BASE_MODEL}-repetition", max_tokens=4000)
        t0 = time.monotonic()
        run = run_bench(BenchConfig(spec=spec, concurrency=[8], progress=False))
        elapsed = time.monotonic() - t0
    level = run.levels[0]
    assert level.failed == 8
    assert elapsed < 3.0  # 4000 tokens at 400 tok/s would take 10 s
    for req in level.requests:
        assert req.output_tokens is not None and req.output_tokens < 400
        assert req.guard_reason and req.guard_reason.split(":")[0] in ("ngram-flood", "char-loop")
