"""Post-hoc garbage fingerprint over a finished level.

The live guard can be outrun (seed 003, Finding 3), so every finished level is checked again as
a whole.  Signals:

* ``uniform-stats`` — seed 003: every request ran into ``finish_reason=length`` with the same
  output-token count, produced no content, and all tok/s values are identical to two decimals
  (the seed's observation) or within ``uniform_spread`` of each other (our client measures
  with real clocks, so honest jitter separates values that a broken model makes equal).
* ``low-type-token-ratio`` — moving-average type-token ratio of the generated words far below
  natural language (a collapsed model repeats a handful of tokens).
* ``loop-markers`` — the self-correction / doubled-word markers grepped for in seed 001
  ("self-correct", "stop rambling", "thinking thinking", "retire retire") and triple words.
* ``word-salad`` — long text with almost no function words (the/of/and/...): words without
  grammar.

Text signals count per request; the level is GARBAGE when ``uniform-stats`` fires or when at least
half of the successful requests carry a text signal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkrack.bench.stats import LevelResult, RequestResult

_WORD = re.compile(r"[A-Za-z']+|[^\sA-Za-z']")
MARKERS: tuple[str, ...] = (
    "self-correct",
    "stop rambling",
    "thinking thinking",
    "retire retire",
)
_TRIPLE = re.compile(r"\b(\w+)(?:\s+\1\b){2,}", re.IGNORECASE)
FUNCTION_WORDS = frozenset(
    [
        "the",
        "a",
        "an",
        "of",
        "and",
        "or",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "from",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "as",
        "not",
        "but",
        "if",
        "then",
        "so",
        "than",
        "we",
        "you",
        "they",
        "he",
        "she",
        "i",
        "my",
        "our",
        "your",
        "their",
        "there",
        "which",
        "what",
        "when",
        "how",
        "can",
        "will",
        "would",
        "should",
        "could",
        "do",
        "does",
        "has",
        "have",
        "had",
        "into",
        "over",
        "under",
        "about",
    ]
)


@dataclass(frozen=True)
class FingerprintConfig:
    uniform_spread: float = 0.01
    mattr_window: int = 50
    min_mattr: float = 0.30
    min_words: int = 60
    min_function_ratio: float = 0.12
    max_markers_per_1k_words: float = 2.0


def mattr(words: list[str], window: int) -> float:
    """Moving-average type-token ratio (robust against text length, unlike plain TTR)."""
    if not words:
        return 1.0
    if len(words) <= window:
        return len(set(words)) / len(words)
    counts: dict[str, int] = {}
    for w in words[:window]:
        counts[w] = counts.get(w, 0) + 1
    total = len(counts)
    steps = 1
    for i in range(window, len(words)):
        old, new = words[i - window], words[i]
        counts[old] -= 1
        if counts[old] == 0:
            del counts[old]
        counts[new] = counts.get(new, 0) + 1
        total += len(counts)
        steps += 1
    return total / (steps * window)


def text_signals(text: str, cfg: FingerprintConfig | None = None) -> list[str]:
    """Garbage signals of one request's generated text (empty list = looks like language)."""
    cfg = cfg or FingerprintConfig()
    words = [w.lower() for w in _WORD.findall(text)]
    alpha = [w for w in words if w[0].isalpha()]
    signals: list[str] = []
    if len(words) >= cfg.min_words:
        ratio = mattr(words, cfg.mattr_window)
        if ratio < cfg.min_mattr:
            signals.append(f"low-type-token-ratio (MATTR {ratio:.2f} < {cfg.min_mattr})")
    if len(alpha) >= cfg.min_words:
        func = sum(1 for w in alpha if w in FUNCTION_WORDS) / len(alpha)
        if func < cfg.min_function_ratio:
            signals.append(f"word-salad (function words {100 * func:.0f}% of words)")
    lowered = text.lower()
    hits = sum(lowered.count(m) for m in MARKERS) + len(_TRIPLE.findall(text))
    if hits and len(alpha) and hits * 1000 / max(len(alpha), 1) >= cfg.max_markers_per_1k_words:
        signals.append(f"loop-markers ({hits} self-correction/doubled-word markers)")
    return signals


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
        sig = text_signals(req.text, cfg)
        if sig:
            flagged += 1
            req.notes.extend(f"fingerprint: {s}" for s in sig)
    if good and flagged * 2 >= len(good):
        reasons.append(f"text signals in {flagged}/{len(good)} successful requests")
    if reasons:
        level.status = "GARBAGE"
        level.garbage_reasons = reasons
    return reasons
