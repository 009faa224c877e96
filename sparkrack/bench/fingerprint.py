"""Post-hoc garbage fingerprint over a finished level.

The live guard can be outrun (src:roce-post, Finding 3), so every finished level is checked again as
a whole.  Signals:

* ``uniform-stats`` — src:roce-post: every request ran into ``finish_reason=length`` with the same
  output-token count, produced no content, and all tok/s values are identical to two decimals
  (the seed's observation) or within ``uniform_spread`` of each other (our client measures
  with real clocks, so honest jitter separates values that a broken model makes equal).
* the text detectors of :mod:`sparkrack.bench.detectors` over each request's whole text (the
  live guard runs the same ones over the tail), plus ``loop-markers``: the self-correction /
  doubled-word markers grepped for in src:gemma-mtp-post ("self-correct", "stop rambling", "thinking
  thinking", "retire retire").  The markers are English, so they only add evidence.

A request is garbage when :func:`sparkrack.bench.detectors.is_garbage` says so; the level is
GARBAGE when ``uniform-stats`` fires or when at least half of its successful requests are garbage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkrack.bench.detectors import (
    EVIDENCE,
    DetectorConfig,
    Signal,
    is_garbage,
    text_signals,
)
from sparkrack.bench.stats import LevelResult, RequestResult

MARKERS: tuple[str, ...] = (
    "self-correct",
    "stop rambling",
    "thinking thinking",
    "retire retire",
)
_TRIPLE = re.compile(r"\b(\w+)(?:\s+\1\b){2,}", re.IGNORECASE)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class FingerprintConfig:
    uniform_spread: float = 0.01
    max_markers_per_1k_words: float = 2.0
    detectors: DetectorConfig = field(default_factory=DetectorConfig)


def loop_markers(text: str, cfg: FingerprintConfig) -> Signal | None:
    words = len(_WORD.findall(text))
    lowered = text.lower()
    hits = sum(lowered.count(m) for m in MARKERS) + len(_TRIPLE.findall(text))
    if hits and words and hits * 1000 / words >= cfg.max_markers_per_1k_words:
        return Signal("loop-markers", f"{hits} self-correction/doubled-word markers", EVIDENCE)
    return None


def request_signals(text: str, cfg: FingerprintConfig | None = None) -> list[Signal]:
    """Every garbage signal of one request's generated text (empty: looks like an answer)."""
    cfg = cfg or FingerprintConfig()
    found = text_signals(text, cfg.detectors)
    marker = loop_markers(text, cfg)
    if marker is not None:
        found.append(marker)
    return found


def request_is_garbage(text: str, cfg: FingerprintConfig | None = None) -> list[Signal]:
    """The signals of ``text`` when they make it garbage, else an empty list."""
    cfg = cfg or FingerprintConfig()
    found = request_signals(text, cfg)
    return found if is_garbage(found, cfg.detectors) else []


def _uniform_stats(good: list[RequestResult], cfg: FingerprintConfig) -> str | None:
    if len(good) < 2:
        return None
    if not all(r.finish_reason == "length" for r in good):
        return None
    if any((r.content_tokens or 0) > 0 or r.content_chars > 0 for r in good):
        return None
    tokens = {r.output_tokens for r in good}
    rates = [r.decode_tok_s for r in good if r.decode_tok_s is not None]
    if len(tokens) != 1 or len(rates) != len(good):
        return None
    identical = len({round(x, 2) for x in rates}) == 1
    spread = (max(rates) - min(rates)) / max(max(rates), 1e-9)
    if identical or spread <= cfg.uniform_spread:
        how = "identical to two decimals" if identical else f"within {100 * spread:.2f}%"
        return (
            f"uniform-stats: all {len(good)} requests finish_reason=length, "
            f"{tokens.pop()} output tokens each, no content, tok/s {how}"
        )
    return None


def fingerprint_level(level: LevelResult, cfg: FingerprintConfig | None = None) -> list[str]:
    """Mark ``level`` GARBAGE (in place) when it carries the fingerprint; return the reasons."""
    cfg = cfg or FingerprintConfig()
    good = [r for r in level.requests if r.status == "ok"]
    reasons: list[str] = []
    uniform = _uniform_stats(good, cfg)
    if uniform:
        reasons.append(uniform)
    flagged = 0
    for req in good:
        sig = request_is_garbage(req.text, cfg)
        if sig:
            flagged += 1
            req.notes.extend(f"fingerprint: {s}" for s in sig)
    if good and flagged * 2 >= len(good):
        reasons.append(f"text signals in {flagged}/{len(good)} successful requests")
    if reasons:
        level.status = "GARBAGE"
        level.garbage_reasons = reasons
    return reasons
