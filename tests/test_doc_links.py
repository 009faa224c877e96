"""Every relative link in README.md and docs/**.md points at a file that exists, and every
``#anchor`` at a heading (or an ``id``) of that page. A planted broken link and a planted broken
anchor are both found."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)
ID = re.compile(r'id="([^"]+)"')


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(h) for h in HEADING.findall(text)} | set(ID.findall(text))


def broken(path: Path, text: str) -> list[str]:
    out = []
    for target in LINK.findall(FENCE.sub("", text)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            out.append(f"{path.relative_to(ROOT)}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{path.relative_to(ROOT)}: {target}: no such anchor")
    return out


def test_every_link_resolves() -> None:
    assert [b for p in pages() for b in broken(p, p.read_text())] == []


def test_a_broken_link_and_anchor_are_found() -> None:
    readme = ROOT / "README.md"
    planted = "[a](docs/no-such-page.md) [b](docs/reference/commands.md#no-such-heading)"
    assert len(broken(readme, planted)) == 2
    assert broken(readme, "[c](docs/reference/commands.md#sparkrack-check)") == []
