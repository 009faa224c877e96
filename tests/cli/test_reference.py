"""docs/reference/ is the code written out: each generated page equals what its generator writes
from the code now, and a planted stale line in a page is a difference."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sparkrack.cli import COMMANDS, build_parser
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.reference import PAGES, exit_meanings
from sparkrack.inputs.variables import VARIABLES, doc_text
from sparkrack.sources import SOURCES

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
FIX = "run: python -m sparkrack.cli.reference"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_page_is_written_from_the_code(name: str) -> None:
    assert (REFERENCE / name).read_text() == PAGES[name](), f"docs/reference/{name}: {FIX}"


def test_the_inventory_page_is_written_from_the_variables() -> None:
    assert (REFERENCE / "inventory.md").read_text() == doc_text()


@pytest.mark.parametrize("name", sorted(PAGES))
def test_a_stale_line_is_a_difference(name: str) -> None:
    """Negative control: a page with one planted line that the code no longer says."""
    text = (REFERENCE / name).read_text()
    stale = text.replace("\n", "\n| `--retired-option` | a row the code no longer has |\n", 1)
    assert stale != PAGES[name]()


def every_option() -> set[str]:
    """Every option string of every command's parser, subcommands included."""
    found: set[str] = set()
    pending = [build_parser(name) for name in COMMANDS]
    while pending:
        parser = pending.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending += list(action.choices.values())
            elif not isinstance(action, argparse._HelpAction):
                found.update(action.option_strings)
    return found - {"--version"}


def test_the_pages_name_everything() -> None:
    commands = (REFERENCE / "commands.md").read_text()
    assert all(f"## sparkrack {name}\n" in commands for name in COMMANDS)
    for option in every_option():
        assert f"`{option}`" in commands, option
    codes = (REFERENCE / "exit-codes.md").read_text()
    assert all(f"`{name}`" in codes for name in ExitCode.__members__)
    assert set(exit_meanings()) == set(ExitCode.__members__)
    sources = (REFERENCE / "sources.md").read_text()
    assert all(s.title in sources and f'id="{s.slug}"' in sources for s in SOURCES.values())
    inventory = (REFERENCE / "inventory.md").read_text()
    assert all(f"`{v.name}`" in inventory for v in VARIABLES)
