"""The garbage detectors against two corpora: realistic answers (none flagged) and the shapes of
broken output (all flagged), through the post-hoc fingerprint and through the live guard."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from bench_corpus import GARBAGE, GOOD

from sparkrack.bench.detectors import DECISIVE, DetectorConfig, is_garbage, text_signals
from sparkrack.bench.fingerprint import fingerprint_level, request_is_garbage
from sparkrack.bench.guard import GuardConfig, RepetitionGuard
from sparkrack.bench.stats import LevelResult, RequestResult

# Shapes a live guard can see in the tail of a stream (loops and floods); word salad and junk
# need the whole text and are the fingerprint's.
LOOPS = [
    name
    for name in GARBAGE
    if not name.startswith(("word-salad", "unicode-junk", "random-token-soup"))
]


def _chunks(text: str, size: int = 5) -> list[str]:
    """Stream-like pieces (a few characters each, as SSE deltas carry 1-2 tokens)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def _guard_verdict(text: str) -> str | None:
    guard = RepetitionGuard()
    for piece in _chunks(text):
        if guard.feed(piece) is not None:
            break
    verdict = guard.verdict or guard.finish()
    return None if verdict is None else str(verdict)


def test_corpora_are_large_and_varied() -> None:
    assert len(GOOD) >= 20 and len(GARBAGE) >= 15
    assert max(len(t) for t in GOOD.values()) > 2000
    for shape in ("word-salad", "phrase-loop", "newline-flood", "subword-loop"):
        assert shape in GARBAGE
    assert "single-token-collapse" in GARBAGE and "unicode-junk" in GARBAGE


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_answer_is_not_flagged(name: str) -> None:
    text = GOOD[name]
    assert request_is_garbage(text) == [], [str(s) for s in text_signals(text)]
    assert _guard_verdict(text) is None


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_shape_is_flagged(name: str) -> None:
    signals = request_is_garbage(GARBAGE[name])
    assert signals, name
    if name in LOOPS:
        assert any(s.weight == DECISIVE for s in signals)
        assert _guard_verdict(GARBAGE[name]) is not None


def test_a_good_answer_level_is_ok_and_a_garbage_level_is_garbage() -> None:
    def level(texts: list[str]) -> LevelResult:
        reqs = [
            RequestResult(
                index=i,
                prompt_id="p",
                text=t,
                finish_reason="stop",
                decode_tok_s=50.0 + i,
                output_tokens=len(t) // 4 + 1,
                output_tokens_source="usage",
            )
            for i, t in enumerate(texts)
        ]
        lv = LevelResult(len(reqs), reqs, 10.0, 0.1)
        lv.summarize()
        return lv

    good = level(list(GOOD.values()))
    assert fingerprint_level(good) == [] and good.status == "ok"
    bad = level(list(GARBAGE.values()))
    assert fingerprint_level(bad) == [
        f"text signals in {len(GARBAGE)}/{len(GARBAGE)} successful requests"
    ]
    assert bad.status == "GARBAGE"


def test_seed_003_uniform_stats_shape_is_flagged() -> None:
    """Finding 3: 8/8 'done', identical tok/s to two decimals, all length, 3072 tokens, no content."""
    reqs = [
        RequestResult(
            index=i,
            prompt_id="p",
            text="!" * 3072,
            finish_reason="length",
            decode_tok_s=143.27,
            output_tokens=3072,
            output_tokens_source="usage",
            reasoning_tokens=3072,
            content_tokens=0,
        )
        for i in range(8)
    ]
    level = LevelResult(8, reqs, 22.0, 0.2)
    level.summarize()
    reasons = fingerprint_level(level)
    assert level.status == "GARBAGE"
    assert reasons[0].startswith("uniform-stats: all 8 requests finish_reason=length, 3072")


def test_english_function_words_never_decide_alone() -> None:
    """German prose has almost no English function words: that is evidence, not a verdict."""
    signals = text_signals(GOOD["german-prose"])
    assert [s.name for s in signals] == ["few-function-words"]
    assert not is_garbage(signals)


def _only(**limits: Any) -> DetectorConfig:
    """Every detector switched off except the limits given."""
    off = DetectorConfig(
        min_loop_chars=10**6,
        min_blank_lines=10**6,
        min_blank_chars=10**6,
        max_whitespace_run=10**6,
        max_compression_ratio=0.0,
        max_repeat_share=1.01,
        max_junk_share=1.0,
        min_scripts=99,
        min_evidence=99,
    )
    return replace(off, **limits)


@pytest.mark.parametrize(
    ("name", "limits", "flagged"),
    [
        # Each detector alone, on both sides of its limit.
        ("subword-loop", {"min_loop_chars": 588}, True),
        ("subword-loop", {"min_loop_chars": 600}, False),
        ("counting-loop", {"max_compression_ratio": 0.16}, True),
        ("counting-loop", {"max_compression_ratio": 0.10}, False),
        ("counting-loop", {"max_repeat_share": 0.70}, True),
        ("counting-loop", {"max_repeat_share": 0.80}, False),
        ("newline-flood", {"min_blank_lines": 200}, True),
        ("newline-flood", {"min_blank_lines": 300}, False),
        ("whitespace-spaces-flood", {"max_whitespace_run": 800}, True),
        ("whitespace-spaces-flood", {"max_whitespace_run": 801}, False),
        ("blank-answer", {"min_blank_chars": 64}, True),
        ("blank-answer", {"min_blank_chars": 65}, False),
        ("replacement-char-junk", {"max_junk_share": 0.5}, True),
        ("replacement-char-junk", {"max_junk_share": 0.99}, False),
        ("random-token-soup", {"min_scripts": 3}, True),
        ("random-token-soup", {"min_scripts": 5}, False),
        ("word-salad", {"min_evidence": 2}, True),
        ("word-salad", {"min_evidence": 3}, False),
    ],
)
def test_each_detector_decides_at_its_limit(
    name: str, limits: dict[str, Any], flagged: bool
) -> None:
    cfg = _only(**limits)
    assert is_garbage(text_signals(GARBAGE[name], cfg), cfg) is flagged


def test_good_answers_sit_well_inside_the_limits() -> None:
    """The closest good answer keeps a margin to each limit (so the corpus result is not luck)."""
    cfg = DetectorConfig()
    flagged_at_half_margin = [
        name
        for name, text in GOOD.items()
        if is_garbage(
            text_signals(
                text,
                tight := replace(
                    cfg,
                    max_compression_ratio=cfg.max_compression_ratio * 1.5,
                    max_repeat_share=cfg.max_repeat_share * 0.6,
                ),
            ),
            tight,
        )
    ]
    assert flagged_at_half_margin == []


def test_guard_catches_the_random_model_shape_live() -> None:
    """Real random-weight Llama output: "\\n" x 170 then "gorithm" x 5..85, one token per chunk."""
    tokens = ["The", " al"] + ["\n"] * 170 + ["gorithm"] * 85
    guard = RepetitionGuard(GuardConfig())
    tripped = None
    for i, tok in enumerate(tokens):
        if guard.feed(tok) is not None:
            tripped = i
            break
    assert tripped is not None and tripped < 2 + 170  # inside the newline flood
