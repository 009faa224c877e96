"""Garbage detectors over characters and tokens, shared by the live guard and the fingerprint.

Every detector works on any script and any format (prose, code, tables, JSON, YAML, Chinese, ...):
none of them decides from English words.  Each returns ``None`` or a :class:`Signal`:

* ``decisive`` signals are loops and floods that no well-formed answer contains:

  - ``char-loop`` — the tail of the text repeats one unit of 1..``max_period`` characters for at
    least ``min_loop_chars`` characters (a sub-word loop such as ``gorithm`` x 85, ``!!!!``, or
    a looped phrase);
  - ``whitespace-flood`` — one run of whitespace holding ``min_blank_lines`` newlines or
    ``max_whitespace_run`` characters;
  - ``blank-output`` — a finished answer of ``min_blank_chars`` characters or more, all of them
    whitespace (checked on whole answers only: a stream may start with blank lines);
  - ``compression`` — a ``window``-character stretch that zlib shrinks below
    ``max_compression_ratio`` of its UTF-8 size (near-verbatim repetition, exact or not);
  - ``ngram-repeat`` — in such a stretch, the share of character ``ngram``-grams (whitespace
    included) that already occurred is above ``max_repeat_share``;
  - ``junk-chars`` — replacement, control, private-use or unassigned characters above
    ``max_junk_share`` of the text;
  - ``script-mix`` — letters hop between ``min_scripts`` or more writing systems at a rate of
    ``min_script_switches`` per 100 letters (random-token output; Japanese kana + kanji count as
    one system);

* ``evidence`` signals are weak alone: ``low-diversity`` (moving-average type-token ratio of
  the words), ``no-punctuation`` (long runs of words without any punctuation or line break) and
  ``few-function-words`` (English only).  A text is garbage when it carries a decisive signal
  or at least ``min_evidence`` evidence signals.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from dataclasses import dataclass

DECISIVE = "decisive"
EVIDENCE = "evidence"


@dataclass(frozen=True)
class DetectorConfig:
    min_loop_chars: int = 200
    """A tail loop must span at least this many characters (and three periods)."""
    max_period: int = 200
    """Longest repeating unit, in characters, looked for at the tail."""
    min_blank_lines: int = 24
    min_blank_chars: int = 8
    """``blank-output``: a finished answer this long with no visible character."""
    max_whitespace_run: int = 400
    window: int = 1024
    """Characters per stretch for the compression and n-gram checks (stride: half of it)."""
    min_stretch: int = 256
    """A text shorter than ``window`` is checked as one stretch from this many characters on."""
    max_compression_ratio: float = 0.16
    ngram: int = 12
    max_repeat_share: float = 0.70
    max_junk_share: float = 0.02
    min_scripts: int = 3
    min_script_switches: float = 8.0
    min_letters: int = 200
    """Letters needed before the script-mix check looks at a text."""
    mattr_window: int = 50
    min_mattr: float = 0.30
    min_words: int = 60
    max_unpunctuated_run: int = 60
    """``no-punctuation``: this many words in a row without punctuation or a line break."""
    min_function_ratio: float = 0.06
    min_evidence: int = 2

    @property
    def tail_chars(self) -> int:
        """Characters of tail the live guard keeps so that every tail check can run."""
        return max(self.min_loop_chars + self.max_period, 3 * self.max_period, self.window)


@dataclass(frozen=True)
class Signal:
    name: str
    detail: str
    weight: str = DECISIVE

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}"


def char_loop(text: str, cfg: DetectorConfig) -> Signal | None:
    """The text ends in ``min_loop_chars`` (and >= 3 periods) of one repeated unit."""
    n = len(text)
    key_len = min(8, cfg.min_loop_chars, n)
    if key_len == 0:
        return None
    key = text[n - key_len :]
    lowest = max(0, n - key_len - cfg.max_period)
    # Every period p of the tail puts another copy of the last key_len characters p earlier;
    # str.rfind finds those candidates in C, nearest (shortest period) first.
    j = text.rfind(key, lowest, n - 1)
    while j != -1:
        period = n - key_len - j
        span = max(cfg.min_loop_chars, 2 * period)
        if span + period > n:
            return None
        if text[n - span :] == text[n - span - period : n - period]:
            size = span + period
            # Extend to the loop's full length, for the message only.
            while size < n and text[n - size - 1] == text[n - size - 1 + period]:
                size += 1
            unit = text[n - period :]
            return Signal(
                "char-loop",
                f"the last {size} characters repeat a {period}-character unit {unit[:40]!r} "
                f"{size / period:.0f} times",
            )
        j = text.rfind(key, lowest, j + key_len - 1)
    return None


def whitespace_flood(text: str, cfg: DetectorConfig) -> Signal | None:
    shortest = min(cfg.min_blank_lines, cfg.max_whitespace_run)
    for match in re.finditer(rf"\s{{{shortest},}}", text):
        run = match.group(0)
        lines = run.count("\n")
        if lines >= cfg.min_blank_lines or len(run) >= cfg.max_whitespace_run:
            return Signal(
                "whitespace-flood",
                f"{len(run)} whitespace characters in a row ({lines} line breaks) "
                f"at character {match.start()}",
            )
    return None


def blank_output(text: str, cfg: DetectorConfig) -> Signal | None:
    """A whole answer of ``min_blank_chars`` or more characters, none of them visible."""
    if len(text) >= cfg.min_blank_chars and not text.strip():
        return Signal("blank-output", f"{len(text)} characters, all whitespace")
    return None


def compression_ratio(text: str) -> float:
    """zlib-compressed size / UTF-8 size (1.0 for an empty text)."""
    raw = text.encode("utf-8", "surrogatepass")
    return len(zlib.compress(raw, 6)) / len(raw) if raw else 1.0


def repeat_share(text: str, n: int) -> float:
    """Share of the character n-grams of ``text`` that already occurred earlier in it."""
    total = len(text) - n + 1
    if total <= 0:
        return 0.0
    seen: set[str] = set()
    repeats = 0
    for i in range(total):
        gram = text[i : i + n]
        if gram in seen:
            repeats += 1
        else:
            seen.add(gram)
    return repeats / total


_NGRAM_CHECK_BELOW = 0.30
"""zlib ratio above which a stretch is too varied for the n-gram check (saves its cost)."""


def _stretches(text: str, size: int, shortest: int) -> list[tuple[int, str]]:
    if len(text) < size:
        return [(0, text)] if len(text) >= shortest else []
    step = max(size // 2, 1)
    starts = list(range(0, len(text) - size + 1, step))
    if starts[-1] != len(text) - size:
        starts.append(len(text) - size)
    return [(s, text[s : s + size]) for s in starts]


def repetitive_stretch(text: str, cfg: DetectorConfig) -> Signal | None:
    """The most repetitive ``window``-character stretch, by zlib ratio and by n-gram repeats."""
    for start, part in _stretches(text, cfg.window, cfg.min_stretch):
        ratio = compression_ratio(part)
        if ratio < cfg.max_compression_ratio:
            return Signal(
                "compression",
                f"characters {start}..{start + len(part)} compress to {100 * ratio:.1f}% "
                f"(limit {100 * cfg.max_compression_ratio:.0f}%)",
            )
        if ratio >= _NGRAM_CHECK_BELOW:
            continue  # far too varied for the n-gram repeats to reach their limit
        share = repeat_share(part, cfg.ngram)
        if share > cfg.max_repeat_share:
            return Signal(
                "ngram-repeat",
                f"{100 * share:.0f}% of the {cfg.ngram}-character n-grams in characters "
                f"{start}..{start + len(part)} are repeats (limit {100 * cfg.max_repeat_share:.0f}%)",
            )
    return None


_JUNK_CATEGORIES = frozenset({"Co", "Cn", "Cs"})


def junk_chars(text: str, cfg: DetectorConfig) -> Signal | None:
    if not text:
        return None
    junk = 0
    for ch in text:
        if ch == "\ufffd":
            junk += 1
            continue
        cat = unicodedata.category(ch)
        if cat in _JUNK_CATEGORIES or (cat == "Cc" and ch not in "\n\r\t"):
            junk += 1
    share = junk / len(text)
    if junk >= 8 and share > cfg.max_junk_share:
        return Signal(
            "junk-chars",
            f"{junk} replacement/control/private-use/unassigned characters "
            f"({100 * share:.1f}% of the text)",
        )
    return None


_SCRIPT_PREFIXES: tuple[tuple[str, str], ...] = (
    ("LATIN", "Latin"),
    ("CYRILLIC", "Cyrillic"),
    ("GREEK", "Greek"),
    ("ARABIC", "Arabic"),
    ("HEBREW", "Hebrew"),
    ("CJK", "CJK"),
    ("HIRAGANA", "CJK"),
    ("KATAKANA", "CJK"),
    ("HANGUL", "Hangul"),
    ("THAI", "Thai"),
    ("DEVANAGARI", "Devanagari"),
    ("ARMENIAN", "Armenian"),
    ("GEORGIAN", "Georgian"),
    ("ETHIOPIC", "Ethiopic"),
    ("TAMIL", "Tamil"),
    ("BENGALI", "Bengali"),
)


def _script(ch: str) -> str:
    if ch.isascii():
        return "Latin"
    name = unicodedata.name(ch, "")
    for prefix, script in _SCRIPT_PREFIXES:
        if name.startswith(prefix):
            return script
    return "other"


def script_mix(text: str, cfg: DetectorConfig) -> Signal | None:
    scripts = [_script(ch) for ch in text if ch.isalpha()]
    if len(scripts) < cfg.min_letters:
        return None
    counts: dict[str, int] = {}
    for s in scripts:
        counts[s] = counts.get(s, 0) + 1
    major = [s for s, c in counts.items() if c >= 0.05 * len(scripts)]
    switches = sum(1 for a, b in zip(scripts, scripts[1:], strict=False) if a != b)
    rate = 100 * switches / len(scripts)
    if len(major) >= cfg.min_scripts and rate >= cfg.min_script_switches:
        return Signal(
            "script-mix",
            f"letters switch between {len(major)} writing systems ({', '.join(sorted(major))}) "
            f"{rate:.0f} times per 100 letters",
        )
    return None


_WORD = re.compile(r"\w+", re.UNICODE)
_TOKEN = re.compile(r"\w+|[^\w\s]|\n")
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


def evidence(text: str, cfg: DetectorConfig) -> list[Signal]:
    """The weak signals: word diversity, punctuation, English function words."""
    found: list[Signal] = []
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < cfg.min_words:
        return found
    ratio = mattr(words, cfg.mattr_window)
    if ratio < cfg.min_mattr:
        found.append(Signal("low-diversity", f"word MATTR {ratio:.2f} < {cfg.min_mattr}", EVIDENCE))
    run = longest = 0
    for tok in _TOKEN.findall(text):
        if tok[0].isalnum() or tok[0] == "_":
            run += 1
            longest = max(longest, run)
        else:
            run = 0
    if longest >= cfg.max_unpunctuated_run:
        found.append(
            Signal(
                "no-punctuation",
                f"{longest} words in a row without punctuation or a line break",
                EVIDENCE,
            )
        )
    alpha = [w for w in words if w.isascii() and w.isalpha()]
    if len(alpha) >= cfg.min_words and len(alpha) >= 0.5 * len(words):
        func = sum(1 for w in alpha if w in FUNCTION_WORDS) / len(alpha)
        if func < cfg.min_function_ratio:
            found.append(
                Signal(
                    "few-function-words",
                    f"English function words are {100 * func:.0f}% of the words",
                    EVIDENCE,
                )
            )
    return found


def text_signals(text: str, cfg: DetectorConfig | None = None) -> list[Signal]:
    """Every signal of a finished text; see :func:`is_garbage` for the verdict."""
    cfg = cfg or DetectorConfig()
    found: list[Signal] = []
    checks = (blank_output, char_loop, whitespace_flood, repetitive_stretch, junk_chars, script_mix)
    for check in checks:
        signal = check(text, cfg)
        if signal is not None:
            found.append(signal)
    found.extend(evidence(text, cfg))
    return found


def is_garbage(signals: list[Signal], cfg: DetectorConfig | None = None) -> bool:
    cfg = cfg or DetectorConfig()
    if any(s.weight == DECISIVE for s in signals):
        return True
    return sum(1 for s in signals if s.weight == EVIDENCE) >= cfg.min_evidence
