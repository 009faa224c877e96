"""Classify SGLang / NCCL crash logs against the known failure signatures of the seeds.

The signatures live in ``sparkrack/data/failure_signatures.yml`` (data, not code); this module
only matches them.  ``diagnose(text)`` is the Python API; ``sparkrack diagnose
LOG...`` the CLI; ``sparkrack matrix`` and the serve play call it when a deployment fails.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from sparkrack.diagnose.redact import redact
from sparkrack.errors import Problem, SparkrackError
from sparkrack.inputs import safeyaml
from sparkrack.sources import expand

SIGNATURES_FILE = "failure_signatures.yml"
MAX_LINE_CHARS = 1000
"""Characters of a log line the signatures see. Server and NCCL messages start their line; a
longer line (a dumped config, a hostile log) is cut, which keeps every search bounded."""


@dataclass(frozen=True)
class Finding:
    id: str
    cause: str
    fix: str
    profile_key: str | None
    seed: str
    line: int = 0
    """1-based line number of the first match in the diagnosed text."""
    evidence: str = ""
    """The matching log line (stripped, keys redacted, at most 300 characters): every caller
    (the CLI, the serve play's filter, the matrix records) gets it without secrets."""
    count: int = 1
    """How many lines matched this signature."""

    def __str__(self) -> str:
        key = f" [profile key: {self.profile_key}]" if self.profile_key else ""
        return (
            f"{self.id} (line {self.line}, {self.count}x): {self.evidence}\n"
            f"  cause: {expand(self.cause)}\n  fix:   {expand(self.fix)}{key}\n  source: {expand(self.seed)}"
        )


@dataclass(frozen=True)
class Signature:
    id: str
    match: re.Pattern[str]
    near: tuple[re.Pattern[str], ...]
    not_near: tuple[re.Pattern[str], ...]
    window: int
    cause: str
    fix: str
    profile_key: str | None
    seed: str
    ends_rank: bool = False
    """The error ends the rank's process (``ends_rank: true``): a dead rank's own cause."""


def _compile(sig: dict[str, Any], index: int) -> Signature:
    where = f"signatures[{index}]"
    try:
        return Signature(
            id=str(sig["id"]),
            match=re.compile(sig["match"]),
            near=tuple(re.compile(p) for p in sig.get("near") or ()),
            not_near=tuple(re.compile(p) for p in sig.get("not_near") or ()),
            window=int(sig.get("window", 40)),
            cause=" ".join(str(sig["cause"]).split()),
            fix=" ".join(str(sig["fix"]).split()),
            profile_key=sig.get("profile_key"),
            seed=str(sig["seed"]),
            ends_rank=sig.get("ends_rank", False) is True,
        )
    except (KeyError, re.error, TypeError, ValueError) as exc:
        raise SparkrackError(
            Problem(
                SIGNATURES_FILE,
                where,
                f"invalid signature: {exc}",
                "every signature needs id, match (regex), cause, fix, profile_key, seed",
                "diagnose-signature",
            )
        ) from exc


@lru_cache(maxsize=1)
def load_signatures() -> tuple[Signature, ...]:
    raw = resources.files("sparkrack").joinpath("data", SIGNATURES_FILE).read_bytes()
    data = safeyaml.load_bytes(raw, SIGNATURES_FILE)
    sigs = tuple(_compile(s, i) for i, s in enumerate(data["signatures"]))
    ids = [s.id for s in sigs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise SparkrackError(
            Problem(SIGNATURES_FILE, "signatures", f"duplicate ids {dupes}", "make ids unique")
        )
    return sigs


def _within(positions: list[int], index: int, window: int) -> bool:
    """Is any of the sorted line numbers ``positions`` within ``window`` lines of ``index``?"""
    first = bisect.bisect_left(positions, index - window)
    return first < len(positions) and positions[first] <= index + window


class _Lines:
    """The log's lines, cut to MAX_LINE_CHARS, and where each context pattern occurs (computed
    once per pattern, on first use): every line is searched once per pattern."""

    def __init__(self, text: str) -> None:
        self.lines = [line[:MAX_LINE_CHARS] for line in text.splitlines()]
        self._where: dict[str, list[int]] = {}

    def where(self, patterns: tuple[re.Pattern[str], ...]) -> list[int]:
        found: set[int] = set()
        for pattern in patterns:
            if pattern.pattern not in self._where:
                search = pattern.search
                self._where[pattern.pattern] = [
                    i for i, line in enumerate(self.lines) if search(line)
                ]
            found.update(self._where[pattern.pattern])
        return sorted(found)


def diagnose(text: str) -> list[Finding]:
    """Every known failure signature found in ``text``, in order of first appearance.

    Time is linear in the size of ``text``: each line is cut to MAX_LINE_CHARS and searched once
    per pattern; the near/not_near windows are answered from sorted match positions.
    """
    log = _Lines(text)
    found: dict[str, Finding] = {}
    for sig in load_signatures():
        search = sig.match.search
        hits = [i for i, line in enumerate(log.lines) if search(line)]
        if not hits:
            continue
        if sig.near:
            near = log.where(sig.near)
            hits = [i for i in hits if _within(near, i, sig.window)]
        if sig.not_near:
            not_near = log.where(sig.not_near)
            hits = [i for i in hits if not _within(not_near, i, sig.window)]
        if hits:
            evidence = redact(log.lines[hits[0]].strip())[:300]
            found[sig.id] = Finding(
                sig.id,
                sig.cause,
                sig.fix,
                sig.profile_key,
                sig.seed,
                hits[0] + 1,
                evidence,
                len(hits),
            )
    return sorted(found.values(), key=lambda f: f.line)
