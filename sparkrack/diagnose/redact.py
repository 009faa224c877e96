"""Secrets out of text: the one redaction every log, bundle and report goes through.

Engine, admin, gateway and Hugging Face keys reach logs in a few known shapes: SGLang prints its
whole ``server_args=ServerArgs(...)`` at start-up (``api_key='...'``, ``admin_api_key='...'``),
HTTP clients log ``Authorization: Bearer ...`` headers, a command line carries ``--api-key X``,
an environment dump carries ``SPARKRACK_ENGINE_KEY=X``, and a Hugging Face token is ``hf_``
followed by its characters. :func:`redact` replaces the value
of each with :data:`MASK` and keeps the rest of the line, so a diagnosis still reads it.
``sparkrack diagnose`` (its text and its JSON), ``sparkrack status`` (verdicts and job reasons)
and the watchdog's evidence bundles (:mod:`sparkrack.diagnose.bundle`) call it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MASK = "***"

_KEY_NAMES = r"(?:[A-Za-z_-]{0,40}(?:api[_-]?key|token|secret|password|master[_-]?key))"

_SECRET_KEY = re.compile(_KEY_NAMES, re.IGNORECASE)


@dataclass(frozen=True)
class _Shape:
    """One shape of a key in text: ``pattern`` and its ``replacement``; ``needles`` are literals
    of which every match holds one (compared case-folded when the pattern ignores case), so a
    text without any of them is passed over without running the pattern. A scan for a literal
    costs a fraction of the pattern's, which tries every position of an 18 MB log."""

    pattern: re.Pattern[str]
    replacement: str
    needles: tuple[str, ...]

    def may_match(self, text: str, folded: str) -> bool:
        haystack = folded if self.pattern.flags & re.IGNORECASE else text
        return any(needle in haystack for needle in self.needles)


_KEY_NEEDLES = ("api_key", "api-key", "apikey", "token", "secret", "password", "master")
"""One of these stands in every match of :data:`_KEY_NAMES`."""

_SHAPES: tuple[_Shape, ...] = (
    # Python reprs and keyword arguments: api_key='x', admin_api_key="x", hf_token='x'
    _Shape(
        re.compile(rf"\b({_KEY_NAMES})(\s*=\s*)(['\"])((?:\\.|(?!\3)[^\\\n])*)\3", re.I),
        rf"\1\2\3{MASK}\3",
        _KEY_NEEDLES,
    ),
    # JSON / YAML shaped: "api_key": "x"
    _Shape(
        re.compile(rf"([\"']?\b{_KEY_NAMES}[\"']?\s*:\s*)([\"'])((?:\\.|(?!\2)[^\\\n])*)\2", re.I),
        rf"\1\2{MASK}\2",
        _KEY_NEEDLES,
    ),
    # JSON inside a JSON string (a structured log's message): {\"api_key\": \"x\"}
    _Shape(
        re.compile(rf"(\\[\"']{_KEY_NAMES}\\[\"']\s*:\s*\\[\"'])([^\\\n]*)", re.I),
        rf"\1{MASK}",
        _KEY_NEEDLES,
    ),
    # YAML with a plain value: api_key: x, master_key: sk-x (LiteLLM's config)
    _Shape(
        re.compile(rf"(\b{_KEY_NAMES}\s*:[ \t]+)(?![\"'\s]|None\b|null\b)([^\s,}}#]+)", re.I),
        rf"\1{MASK}",
        _KEY_NEEDLES,
    ),
    # unquoted assignments: API_KEY=x, --api-key=x, api_key = x
    _Shape(
        re.compile(
            rf"\b({_KEY_NAMES})([ \t]*=[ \t]*)(?!['\"]|None\b)([^\s,;)'\"]+)",
            re.IGNORECASE,
        ),
        rf"\1\2{MASK}",
        _KEY_NEEDLES,
    ),
    # argv words: --api-key x, --api_key x, --admin-api-key "x", --hf-token \<newline> x
    _Shape(
        re.compile(
            r"(?<![-\w])(--[A-Za-z_-]{0,40}(?:api[-_]key|token|secret|password))"
            r"(\s+(?:\\\s+)?)(?!--)(\"[^\"\n]*\"|'[^'\n]*'|\S+)",
            re.I,
        ),
        rf"\1\2{MASK}",
        ("api-key", "api_key", "token", "secret", "password"),
    ),
    # environment dumps of key variables: SPARKRACK_ENGINE_KEY=x, SPARKRACK_ADMIN_KEY=x
    _Shape(
        re.compile(r"\b([A-Z][A-Z0-9_]{0,60}_KEY)=(?!['\"])([^\s,;)'\"]+)"),
        rf"\1={MASK}",
        ("_KEY",),
    ),
    # HTTP headers: Authorization: Bearer x, Authorization: Basic x, x-api-key: x
    _Shape(
        re.compile(r"(\bAuthorization['\"]?\s*[:=]\s*['\"]?)(\w+\s+)?([^\s'\",}]+)", re.I),
        rf"\1\2{MASK}",
        ("authorization",),
    ),
    _Shape(re.compile(r"(\bBearer\s+)([^\s'\",}]+)", re.I), rf"\1{MASK}", ("bearer",)),
    _Shape(
        re.compile(r"(\bx-api-key['\"]?\s*[:=]\s*['\"]?)([^\s'\",}]+)", re.I),
        rf"\1{MASK}",
        ("x-api-key",),
    ),
    # Hugging Face tokens wherever they stand
    _Shape(re.compile(r"\bhf_[A-Za-z0-9]{8,}"), f"hf_{MASK}", ("hf_",)),
)


_REACH = 3
"""Lines past the one a match starts on that it may reach: a pattern crosses a line break only
inside a run of whitespace, and the header shape holds the most such runs (after the name,
around the colon, after ``Bearer``). Every match starts on a line that holds one of its needles,
since each shape begins with its key."""


_FOLD_I = str.maketrans({"\u0130": "i", "\u0131": "i"})
"""The two letters :data:`re.IGNORECASE` matches to ``i`` that case folding does not make ``i``
(the dotted capital folds to two characters, the dotless small to itself); every other letter
it matches to an ASCII letter folds to that letter."""


def _fold(text: str) -> str:
    """``text`` as :data:`re.IGNORECASE` compares it with an ASCII needle."""
    return text.translate(_FOLD_I).casefold()


def _redact_all(text: str) -> str:
    folded = _fold(text)
    for shape in _SHAPES:
        if shape.may_match(text, folded):
            text, count = shape.pattern.subn(shape.replacement, text)
            if count:
                folded = _fold(text)
    return text


def _needle_lines(text: str) -> set[int]:
    """The numbers (from 0) of the lines of ``text`` that hold a needle of some shape."""
    folded = _fold(text)  # folding keeps every line break, so line numbers agree
    found: set[int] = set()
    for shape in _SHAPES:
        haystack = folded if shape.pattern.flags & re.IGNORECASE else text
        for needle in shape.needles:
            line = seen = 0
            pos = haystack.find(needle)
            while pos != -1:
                line += haystack.count("\n", seen, pos)
                found.add(line)
                seen = pos
                pos = haystack.find(needle, pos + 1)
    return found


def _regions(lines: list[str], starts: set[int]) -> list[tuple[int, int]]:
    """[start, end) line ranges that hold every possible match: each line of ``starts`` and the
    lines up to its :data:`_REACH`-th non-blank successor, overlaps merged."""
    regions: list[tuple[int, int]] = []
    for i in sorted(starts):
        end, left = i + 1, _REACH
        while end < len(lines) and left:
            left -= bool(lines[end].strip())
            end += 1
        if regions and i <= regions[-1][1]:
            regions[-1] = (regions[-1][0], max(end, regions[-1][1]))
        else:
            regions.append((i, end))
    return regions


def redact_data(value: Any) -> Any:
    """``value`` (JSON-shaped data) with :func:`redact` applied to every string in it, keys
    included, and the whole string under a key named like a secret (``{"api_key": "x"}``: the
    value alone has no shape to match): redacting the data, not its JSON text, keeps it valid."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {
            redact_data(k): (
                MASK
                if isinstance(k, str) and isinstance(v, str) and _SECRET_KEY.fullmatch(k)
                else redact_data(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    return value


def redact(text: str) -> str:
    """``text`` with every key value in a known shape replaced by :data:`MASK`: the patterns run
    on the lines that may hold a match (:func:`_regions`), the rest is passed over."""
    lines = text.split("\n")
    out: list[str] = []
    done = 0
    for start, end in _regions(lines, _needle_lines(text)):
        out += lines[done:start]
        out.append(_redact_all("\n".join(lines[start:end])))
        done = end
    out += lines[done:]
    return "\n".join(out)
