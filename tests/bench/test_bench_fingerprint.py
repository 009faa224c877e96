"""Post-hoc garbage fingerprint: what the live guard let through is still marked GARBAGE."""

from __future__ import annotations

import itertools

import pytest

from sparkrack.bench import server, server_text
from sparkrack.bench.client import RequestSpec
from sparkrack.bench.detectors import mattr
from sparkrack.bench.fingerprint import fingerprint_level, request_is_garbage, request_signals
from sparkrack.bench.guard import GuardConfig
from sparkrack.bench.runner import BenchConfig, RunResult, run_bench
from sparkrack.bench.stats import LevelResult, RequestResult

# tools: serves HTTP on loopback; serial: bounds wall or CPU time, alone, never beside a worker
pytestmark = [pytest.mark.tools, pytest.mark.serial]


def _run(model: str, n: int, tokens: int, guard: bool, rate: int = 3000) -> RunResult:
    with server.spawn(["--rate", str(rate), "--tokens-per-chunk", "6"]) as url:
        spec = RequestSpec(
            url=url, model=model, max_tokens=tokens, guard=GuardConfig(enabled=guard)
        )
        # The fingerprint alone: the answer canary would call these levels WRONG-ANSWERS.
        config = BenchConfig(spec=spec, concurrency=[n], progress=False, canary=False)
        return run_bench(config)


def test_uniform_collapse_at_n8_is_garbage_even_when_the_guard_missed_it() -> None:
    """src:roce-post: 8/8 'done' at a bogus rate, all length, no content -> GARBAGE."""
    # 5 s per stream. The rate is measured between a stream's first and last chunk, so a late
    # wake-up at either end skews it. With both cores overcommitted 2-3x that lateness reached
    # 10-20 ms: 1.02 % over a 1 s stream (past the 1 % "uniform" spread), under 0.5 % over 4 s.
    run = _run(f"{server.BASE_MODEL}-uniform", 8, 600, guard=False, rate=120)
    level = run.levels[0]
    assert (level.ok, level.failed) == (8, 0)  # the live run saw nothing wrong ...
    assert level.status == "GARBAGE"  # ... the fingerprint does
    assert any(r.startswith("uniform-stats: all 8 requests") for r in level.garbage_reasons)
    for req in level.requests:
        assert req.finish_reason == "length" and req.content_tokens == 0
        assert req.output_tokens == 600 and req.guard == "off"


def test_word_salad_passes_the_guard_but_not_the_fingerprint() -> None:
    run = _run(f"{server.BASE_MODEL}-word-salad", 4, 500, guard=True)
    level = run.levels[0]
    assert level.ok == 4  # no n-gram flood, no loop: the live guard has nothing to say
    assert level.status == "GARBAGE"
    assert level.garbage_reasons == ["text signals in 4/4 successful requests"]
    notes = " ".join(n for r in level.requests for n in r.notes)
    assert "no-punctuation" in notes and "loop-markers" in notes


def test_healthy_level_is_not_garbage() -> None:
    run = _run(server.BASE_MODEL, 8, 600, guard=True)
    level = run.levels[0]
    assert (level.ok, level.status, level.garbage_reasons) == (8, "ok", [])


def _req(
    i: int, tps: float, content: int, finish: str = "length", tokens: int = 3072
) -> RequestResult:
    return RequestResult(
        index=i,
        prompt_id="p",
        decode_tok_s=tps,
        output_tokens=tokens,
        output_tokens_source="usage",
        finish_reason=finish,
        reasoning_tokens=tokens - content,
        content_tokens=content,
        content_chars=content * 4,
    )


def test_seed_003_rule_identical_tok_s_to_two_decimals() -> None:
    level = LevelResult(8, [_req(i, 18.234 + i * 0.0001, 0) for i in range(8)], 170.0, 1.0)
    level.summarize()
    assert fingerprint_level(level) and level.status == "GARBAGE"
    assert "identical to two decimals" in level.garbage_reasons[0]


def test_uniform_rule_needs_every_signal() -> None:
    cases = [
        [_req(i, 18.23, 0) for i in range(7)] + [_req(7, 18.23, 5)],  # one has content
        [_req(i, 18.23, 0) for i in range(7)] + [_req(7, 18.23, 0, "stop")],  # one stopped
        [_req(i, 18.23 + i, 0) for i in range(8)],  # rates differ by far more than 1 %
        [_req(i, 18.23, 0, tokens=3000 + i) for i in range(8)],  # token counts differ
        [_req(0, 18.23, 0)],  # a single request is not a pattern
    ]
    for requests in cases:
        level = LevelResult(len(requests), requests, 170.0, 1.0)
        level.summarize()
        assert fingerprint_level(level) == [] and level.status == "ok"


def test_text_signals() -> None:
    natural = "".join(itertools.islice(server_text.token_stream("normal", 3), 3000))
    assert request_signals(natural) == []
    assert mattr(natural.split(), 50) > 0.5
    bang = " ".join(["!"] * 400)
    assert str(request_is_garbage(bang)[0]).startswith("char-loop")
    salad = "".join(itertools.islice(server_text.token_stream("word-salad", 3), 800))
    sig = " ".join(str(s) for s in request_is_garbage(salad))
    assert "few-function-words" in sig and "loop-markers" in sig
    rambling = natural[:2000] + " wait, self-correct: stop rambling, retire retire. " * 3
    signals = request_signals(rambling)
    assert [s.name for s in signals] == ["loop-markers"]
    assert request_is_garbage(rambling) == []  # English markers alone never decide
