"""Options several commands share, defined once."""

from __future__ import annotations

import argparse
from typing import Final

DEFAULT_INVENTORY: Final = "inventories/example"


def add_inventory(
    parser: argparse.ArgumentParser,
    *,
    default: str | None = DEFAULT_INVENTORY,
    help: str = "inventory directory",
) -> None:
    """``--inventory/-i DIR``: the Ansible inventory the command reads."""
    parser.add_argument("--inventory", "-i", default=default, metavar="DIR", help=help)


def add_format(parser: argparse.ArgumentParser, *choices: str) -> None:
    """``--format``: the first choice is the default."""
    parser.add_argument("--format", choices=list(choices), default=choices[0])
