"""Classify SGLang / NCCL crash logs against the known failure signatures of the seeds.

The signatures live in ``sparkrack/data/failure_signatures.yml`` (data, not code); this module
only matches them.  ``diagnose(text)`` is the Python API (contracts.md); ``sparkrack diagnose
LOG...`` the CLI; ``sparkrack matrix`` and the serve play call it when a deployment fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from sparkrack import safeyaml
from sparkrack.errors import Problem, SparkrackError

SIGNATURES_FILE = "failure_signatures.yml"


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
    """The matching log line (stripped, at most 300 characters)."""
    count: int = 1
    """How many lines matched this signature."""

    def __str__(self) -> str:
        key = f" [profile key: {self.profile_key}]" if self.profile_key else ""
        return (
            f"{self.id} (line {self.line}, {self.count}x): {self.evidence}\n"
            f"  cause: {self.cause}\n  fix:   {self.fix}{key}\n  seed:  {self.seed}"
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


def _context_ok(sig: Signature, lines: list[str], index: int) -> bool:
    if not sig.near and not sig.not_near:
        return True
    lo, hi = max(0, index - sig.window), min(len(lines), index + sig.window + 1)
    context = lines[lo:hi]
    if sig.near and not any(p.search(line) for p in sig.near for line in context):
        return False
    return not any(p.search(line) for p in sig.not_near for line in context)


def diagnose(text: str) -> list[Finding]:
    """Every known failure signature found in ``text``, in order of first appearance."""
    lines = text.splitlines()
    found: dict[str, Finding] = {}
    for sig in load_signatures():
        first: tuple[int, str] | None = None
        count = 0
        for i, line in enumerate(lines):
            if sig.match.search(line) and _context_ok(sig, lines, i):
                count += 1
                if first is None:
                    first = (i + 1, line.strip()[:300])
        if first is not None:
            found[sig.id] = Finding(
                sig.id, sig.cause, sig.fix, sig.profile_key, sig.seed, first[0], first[1], count
            )
    return sorted(found.values(), key=lambda f: f.line)
