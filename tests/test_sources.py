"""Source documents are cited by slug and printed by title and place: every ``src:`` slug in the
repository names a document of :data:`sparkrack.sources.SOURCES`, no citation by number is left,
and what sparkrack prints carries the title, not the slug."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from sparkrack.cli import main
from sparkrack.errors import Problem
from sparkrack.sources import SOURCES, expand, unknown

ROOT = Path(__file__).resolve().parent.parent
BY_NUMBER = re.compile(r"\b[Ss]eeds? 00[0-9]")


def tracked_text() -> dict[str, str]:
    names = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    out = {}
    for name in names:
        path = ROOT / name
        if name == "tests/test_sources.py" or not path.is_file():
            continue
        try:
            out[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return out


def numbered(files: dict[str, str]) -> list[str]:
    return [f"{n}: {m[0]}" for n, t in files.items() for m in BY_NUMBER.finditer(t)]


def test_no_citation_by_number_remains() -> None:
    assert numbered(tracked_text()) == []


def test_numbered_citation_is_found() -> None:
    assert numbered({"x.md": "as seed 003 says"}) == ["x.md: seed 003"]


def test_every_slug_names_a_document() -> None:
    bad = {n: unknown(t) for n, t in tracked_text().items() if unknown(t)}
    assert bad == {}


def test_unknown_slug_is_found() -> None:
    assert unknown("src:roce-post and src:no-such-post") == ["no-such-post"]


def test_printed_refusal_names_title_and_place() -> None:
    text = str(
        Problem("p.yml", "image", "moving tag (src:super-guide names it)", "pin (src:roce-post)")
    )
    assert "src:" not in text
    assert SOURCES["super-guide"].title in text and SOURCES["super-guide"].published in text
    assert SOURCES["roce-post"].title in text


def test_expand_leaves_unknown_slug() -> None:
    assert expand("src:no-such-post") == "src:no-such-post"


def raw_slugs_in_prose(text: str) -> list[str]:
    """``src:`` slugs in a page's prose (outside code), where a reader would see the slug."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return REFERENCE_SLUG.findall(prose)


REFERENCE_SLUG = re.compile(r"src:[a-z0-9-]+")


def test_pages_cite_by_title() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert {p.name: raw_slugs_in_prose(p.read_text()) for p in pages} == {p.name: [] for p in pages}


def test_a_page_citing_by_slug_is_found() -> None:
    assert raw_slugs_in_prose("as src:roce-post says; `src:<slug>` is the form") == [
        "src:roce-post"
    ]


def test_command_output_names_title_and_place(capsys: pytest.CaptureFixture[str]) -> None:
    """`sparkrack plan` prints the engines' memory notes, which cite a source by slug."""
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    assert "src:" not in out
    assert SOURCES["super-mtp-post"].cite() in out
