"""Options several commands share, defined once."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Final

from sparkrack.errors import Problem
from sparkrack.inputs.inventory import VAULT_ENV

DEFAULT_INVENTORY: Final = "inventories/example"


def add_inventory(
    parser: argparse.ArgumentParser,
    *,
    default: str | None = DEFAULT_INVENTORY,
    help: str = "inventory directory",
) -> None:
    """``--inventory/-i DIR``: the Ansible inventory the command reads, and
    ``--vault-password-file`` for its ansible-vault content (what ``ANSIBLE_VAULT_PASSWORD_FILE``
    gives otherwise)."""
    parser.add_argument("--inventory", "-i", default=default, metavar="DIR", help=help)
    parser.add_argument(
        "--vault-password-file",
        metavar="FILE",
        default=None,
        help=f"file holding the inventory's ansible-vault password (default: ${VAULT_ENV})",
    )


def print_warnings(warnings: Iterable[Problem]) -> None:
    """What a command reports without refusing, on stderr: every command that shows a
    deployment repeats its warnings."""
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def add_format(parser: argparse.ArgumentParser, *choices: str) -> None:
    """``--format``: the first choice is the default."""
    parser.add_argument("--format", choices=list(choices), default=choices[0])
