"""``sparkrack check -i INV``: everything the inventory asks for, before ``site.yml`` runs.

The inventory's variables, the address plan, every deployment and its profile's rules, the
memory per Spark, the objects the serve play would apply, images, secrets and the real engine
parser when it is cached: one line per finding, the warnings, every problem as
``<file>: <key>: <message> — fix: <fix> [<rule>]``, and a verdict. Exit 0 when nothing is
refused (warnings allowed), 1 on any problem, 2 on a usage error. ``--json`` prints the same
report as one JSON object: ``inventory``, ``ok``, ``deployments``, ``lines``, ``warnings`` and
``problems`` (each ``file``, ``key``, ``message``, ``fix``, ``rule``) and ``verdict``.
"""

from __future__ import annotations

import argparse

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.options import add_inventory, add_json


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_inventory(parser)
    parser.add_argument(
        "--no-engine-check",
        action="store_true",
        help="leave out the real engine parser (it runs from the cache only, and says when it "
        "cannot)",
    )
    add_json(parser)
    parser.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace) -> int:
    from sparkrack.errors import SparkrackError, UsageError, printable
    from sparkrack.inputs.inventory import load_inventory
    from sparkrack.preflight.check import Report, check_inventory

    try:
        inv = load_inventory(args.inventory)
    except UsageError:
        raise
    except SparkrackError as exc:  # the files themselves: nothing else can be checked
        report = Report(args.inventory)
        report.lines.append(f"inventory {printable(args.inventory)}: its files are refused")
        report.refuse(exc.problems)
    else:
        report = check_inventory(inv, engine_check=not args.no_engine_check)
    if args.json:
        import json

        print(json.dumps(report.to_dict(), indent=2))
    else:
        for line in report.text():
            print(line)
    return ExitCode.OK if report.ok else ExitCode.FAILED
