"""docs/reference/ports.md's port table is the engines' listener declarations, written out."""

from __future__ import annotations

from pathlib import Path

from sparkrack.serving.engines import ENGINES
from sparkrack.serving.engines.listeners import TABLE_BEGIN, TABLE_END, port_table

PAGE = Path(__file__).resolve().parents[3] / "docs" / "reference" / "ports.md"


def declared() -> str:
    return port_table(
        {name: (e.multi_rank_listeners, e.single_rank_listeners) for name, e in ENGINES.items()}
    )


def shipped(text: str) -> str:
    start = text.index(TABLE_BEGIN)
    return text[start : text.index(TABLE_END, start) + len(TABLE_END)]


def test_the_port_page_is_the_declaration() -> None:
    assert shipped(PAGE.read_text()) == declared(), (
        "docs/reference/ports.md drifted from the engines' listeners: run python -m sparkrack.cli.reference"
    )


def test_a_drifted_table_is_caught() -> None:
    """Negative control: one changed cell is a difference."""
    text = PAGE.read_text().replace("| random |", "| 29500 |", 1)
    assert shipped(text) != declared()


def test_the_table_has_a_row_per_listener() -> None:
    rows = sum(len(e.multi_rank_listeners) + len(e.single_rank_listeners) for e in ENGINES.values())
    assert shipped(PAGE.read_text()).count("\n| ") - 1 == rows
