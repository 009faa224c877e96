"""Streaming repetition guard: one independent instance per stream.

src:roce-post ("Finding 3") describes a guard that runs n-gram-flood, suffix-loop and stagnation
detection (4-gram, max-count 8 + ratio 14 %, suffix window 600 chars) and still let 3 of 4
garbage runs through at n=8, suspected because all streams reached ``max_tokens`` before the
detector had looked at enough output.  This guard cannot have that blind spot by construction:

* each stream owns its own :class:`RepetitionGuard` (no shared state, no shared task, no lock);
* :meth:`RepetitionGuard.feed` is called synchronously, inline, for every chunk of the stream, so
  the check happens before the next chunk is read, whatever the other streams do;
* the tail checks run at least every ``check_every_chars`` characters *and* once more in
  :meth:`RepetitionGuard.finish`, which the client calls when the stream ends for any reason
  (``[DONE]``, ``finish_reason=length``, connection close).  A stream can therefore never end
  un-checked, however fast all streams hit ``max_tokens`` together.

Besides the seed's word 4-gram flood and blank-chunk stagnation, the guard runs the decisive tail
detectors of :mod:`sparkrack.bench.detectors` (character loops of any unit, sub-word loops
included; whitespace floods; zlib ratio and character n-gram repeats of the tail), the same code
the post-hoc fingerprint runs over the whole text.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from sparkrack.bench.detectors import (
    DetectorConfig,
    blank_output,
    char_loop,
    repetitive_stretch,
    whitespace_flood,
)

_WORD = re.compile(r"\S+")
_ALNUM = re.compile(r"[^\W_]")
_MAX_WORD = 256  # a longer run without whitespace counts as a word (keeps feed() linear)


@dataclass(frozen=True)
class GuardConfig:
    """Thresholds (the word n-gram flood's are src:roce-post's, Finding 3)."""

    ngram: int = 4
    """n of the word n-grams counted by the flood detector."""
    ngram_max_count: int = 8
    """Flood trips when one n-gram occurs at least this often ..."""
    ngram_ratio: float = 0.14
    """... and makes up at least this share of all n-grams seen so far."""
    suffix_window: int = DetectorConfig().tail_chars
    """Characters at the end of the stream the tail detectors examine."""
    stagnation_chunks: int = 64
    """Stagnation trips after this many consecutive chunks that add no visible character."""
    check_every_chars: int = 64
    """Loop and flood checks run each time this many new characters arrived (and at the end);
    the compression / n-gram check of the tail every four such intervals."""
    detectors: DetectorConfig = field(default_factory=DetectorConfig)
    enabled: bool = True


@dataclass(frozen=True)
class GuardVerdict:
    detector: str  # "ngram-flood" | "stagnation" | a detectors.Signal name ("char-loop", ...)
    detail: str

    def __str__(self) -> str:
        return f"{self.detector}: {self.detail}"


class RepetitionGuard:
    """Feed it every text delta of ONE stream; it returns a verdict as soon as the stream loops."""

    def __init__(self, config: GuardConfig | None = None) -> None:
        self.config = config or GuardConfig()
        self._tail = ""  # last suffix_window characters
        self._chars_since_check = 0
        self._checks = 0
        self._words: list[str] = []  # trailing partial-word handling: last element may be partial
        self._wordy: list[bool] = []  # per word in _words: holds a letter or digit
        self._partial = ""
        self._ngrams: Counter[tuple[str, ...]] = Counter()
        self._ngram_total = 0
        self._top_count = 0
        self._top_ngram: tuple[str, ...] = ()
        self._idle_chunks = 0
        self.verdict: GuardVerdict | None = None
        self.chars_seen = 0

    # -- public API -----------------------------------------------------------------------------
    def feed(self, delta: str) -> GuardVerdict | None:
        """Account one chunk's text; return the verdict when the guard trips (sticky)."""
        if self.verdict is not None or not self.config.enabled:
            return self.verdict
        self.chars_seen += len(delta)
        self._tail = (self._tail + delta)[-self.config.suffix_window :]
        if not delta.strip():
            self._idle_chunks += 1
            if self._idle_chunks >= self.config.stagnation_chunks:
                self.verdict = GuardVerdict(
                    "stagnation",
                    f"{self._idle_chunks} consecutive chunks without a visible character",
                )
                return self.verdict
        else:
            self._idle_chunks = 0
        self._feed_words(delta)
        if self.verdict is None:
            self._chars_since_check += len(delta)
            if self._chars_since_check >= self.config.check_every_chars:
                self._check_tail(full=False)
        return self.verdict

    def finish(self) -> GuardVerdict | None:
        """End of stream: flush the partial word and run every check one last time."""
        if self.verdict is None and self.config.enabled:
            if self._partial:
                self._add_word(self._partial)
                self._partial = ""
            if self.verdict is None:
                self._check_tail(full=True)
        return self.verdict

    # -- detectors ------------------------------------------------------------------------------
    def _feed_words(self, delta: str) -> None:
        text = self._partial + delta
        words = _WORD.findall(text)
        if words and not text[-1].isspace() and len(words[-1]) < _MAX_WORD:
            self._partial = words.pop()
        else:
            self._partial = ""
        for word in words:
            self._add_word(word)
            if self.verdict is not None:
                return

    def _add_word(self, word: str) -> None:
        cfg = self.config
        self._words.append(word)
        self._wordy.append(_ALNUM.search(word) is not None)
        if len(self._words) > cfg.ngram:
            del self._words[0]
            del self._wordy[0]
        if len(self._words) < cfg.ngram:
            return
        self._ngram_total += 1
        if sum(self._wordy) < 2:
            return  # table rules, bullets, emoji cells: structure, not a looping phrase
        gram = tuple(self._words)
        self._ngrams[gram] += 1
        count = self._ngrams[gram]
        if count > self._top_count:
            self._top_count, self._top_ngram = count, gram
        if (
            self._top_count >= cfg.ngram_max_count
            and self._top_count / self._ngram_total >= cfg.ngram_ratio
        ):
            self.verdict = GuardVerdict(
                "ngram-flood",
                f"{cfg.ngram}-gram {' '.join(self._top_ngram)!r} seen {self._top_count}x "
                f"= {100 * self._top_count / self._ngram_total:.0f}% of {self._ngram_total} "
                f"(limits {cfg.ngram_max_count}x and {100 * cfg.ngram_ratio:.0f}%)",
            )

    def _check_tail(self, full: bool) -> None:
        self._chars_since_check = 0
        self._checks += 1
        cfg = self.config.detectors
        tail = self._tail
        signal = char_loop(tail, cfg) or whitespace_flood(tail, cfg)
        if signal is None and (full or self._checks % 4 == 0):
            signal = repetitive_stretch(tail[-cfg.window :], cfg)
        if signal is None and full and self.chars_seen == len(tail):
            signal = blank_output(tail, cfg)  # the whole stream, finished
        if signal is not None:
            self.verdict = GuardVerdict(signal.name, signal.detail)
