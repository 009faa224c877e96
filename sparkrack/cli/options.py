"""Options several commands share, defined once."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from sparkrack.errors import Problem, UsageError
from sparkrack.inputs.inventory import VAULT_ENV

DEFAULT_INVENTORY: Final = "inventories/example"


class DefaultInventory(str):
    """``-i``'s value when it was not given: the command says on stderr which one it reads."""


def inventory_given(args: argparse.Namespace) -> None:
    """Before a command runs: say which inventory it reads when ``-i`` was left out, and refuse
    an inventory named on the command line that does not exist (a typo must not pass)."""
    inventory = getattr(args, "inventory", None)
    if isinstance(inventory, DefaultInventory):
        print(f"note: no -i given: reading {inventory}", file=sys.stderr)
    elif inventory is not None and not Path(inventory).is_dir():
        raise UsageError(
            Problem(
                str(inventory),
                "--inventory",
                "is not an inventory directory" if Path(inventory).exists() else "does not exist",
                "pass -i inventories/<name> (a directory holding hosts.yml and group_vars/)",
                "inventory",
            )
        )


def add_inventory(
    parser: argparse.ArgumentParser,
    *,
    default: str | None = DEFAULT_INVENTORY,
    help: str = "inventory directory",
) -> None:
    """``--inventory/-i DIR``: the Ansible inventory the command reads, and
    ``--vault-password-file`` for its ansible-vault content (what ``ANSIBLE_VAULT_PASSWORD_FILE``
    gives otherwise)."""
    if default is not None:
        default = DefaultInventory(default)
        help = f"{help} (default: {default}, said on stderr when used)"
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
    """``--json`` (the one spelling of machine-readable output on every command) and
    ``--format CHOICE``, the first choice the default; ``--format json`` is kept as an alias of
    ``--json``. Both set ``args.format``."""
    parser.add_argument(
        "--format",
        choices=list(choices),
        default=choices[0],
        help=f"output format (default {choices[0]}); --format json is the same as --json",
    )
    # after --format: its default is the one the shared destination starts from
    parser.add_argument(
        "--json",
        dest="format",
        action="store_const",
        const="json",
        help="machine-readable output (JSON)",
    )


def add_json(parser: argparse.ArgumentParser) -> None:
    """``--json`` on a command with one text form: ``args.json``."""
    parser.add_argument("--json", action="store_true", help="machine-readable output (JSON)")
