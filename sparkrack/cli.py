"""The ``sparkrack`` command line.

Each feature module registers its own sub-commands through a ``register(subparsers)`` function;
add a module to ``COMMAND_MODULES`` to expose it. Handlers return the process exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from sparkrack.errors import SparkrackError

# Feature modules that contribute sub-commands, in help order.
COMMAND_MODULES: list[str] = [
    "sparkrack.addressplan_cli",
    "sparkrack.bench_cli",
    "sparkrack.profiles_cli",
    "sparkrack.cluster_cli",
    "sparkrack.patches_cli",
    "sparkrack.planner_cli",
]

DEFAULT_INVENTORY = "inventories/example"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkrack",
        description="Provision DGX Spark clusters and serve LLMs across them.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except SparkrackError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
