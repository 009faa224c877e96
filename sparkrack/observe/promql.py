"""The metric names a PromQL expression reads: enough of PromQL to check shipped queries."""

from __future__ import annotations

import re

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_WORD = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?")
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})


def metric_names(expr: str) -> set[str]:
    """Names of the series ``expr`` selects (function names, keywords, label names inside
    matchers and groupings, and numbers are not names)."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {
        word
        for word, call in _WORD.findall(text)
        if not call and word.lower() not in KEYWORDS and not word.startswith("$")
    }
