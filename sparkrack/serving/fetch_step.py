"""STAND-IN for the fetch step: it accepts the command line the manifests render and fails.

The real fetch step (``download``, ``receive``, ``push``, ``wait``, ``memwait``; stdlib only,
shipped verbatim in the switch ConfigMap) replaces this file. This stand-in exists only so the
switch ConfigMap has content to render and validate; every subcommand exits 2 without doing
anything.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fetch_step.py")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("download", "receive", "push", "wait", "memwait"):
        sub.add_parser(name).add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    print(f"fetch_step.py {args.command}: stand-in, not implemented", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
