"""Each fact of the owner's and developer's pages is told in one place: no line of prose or table
row of eight words or more appears on two pages (README.md and docs/**.md, code blocks aside).
A page that needs the fact links to the one that tells it."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIN_WORDS = 8
GENERATED = re.compile(r"^<!-- written by .* -->$")


def pages() -> dict[str, str]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return {str(p.relative_to(ROOT)): p.read_text() for p in found}


def told_twice(texts: dict[str, str]) -> dict[str, list[str]]:
    """Lines (whitespace folded, case ignored) that appear on more than one page."""
    where: dict[str, set[str]] = defaultdict(set)
    for name, text in texts.items():
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for line in prose.splitlines():
            folded = " ".join(line.split())
            if len(folded.split()) >= MIN_WORDS and not GENERATED.match(folded):
                where[folded.lower()].add(name)
    return {line: sorted(names) for line, names in where.items() if len(names) > 1}


def test_no_line_is_told_on_two_pages() -> None:
    assert told_twice(pages()) == {}


def test_a_copied_line_is_found() -> None:
    """Negative control: a line of the README planted on a guide page is reported, with both
    pages named; the same line inside a code block is not."""
    texts = pages()
    line = next(ln for ln in texts["README.md"].splitlines() if len(ln.split()) >= MIN_WORDS)
    planted = dict(texts, **{"docs/guide/x.md": f"# x\n\n{line}\n"})
    assert told_twice(planted) == {" ".join(line.split()).lower(): ["README.md", "docs/guide/x.md"]}
    fenced = dict(texts, **{"docs/guide/x.md": f"# x\n\n```text\n{line}\n```\n"})
    assert told_twice(fenced) == {}
