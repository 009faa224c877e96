"""``sparkrack patch``: run the SM121 patch catalog against a site-packages directory.

    sparkrack patch --site-packages DIR (--check | --apply) [--arch CLASS] [--list] [-- SERVER ARGV]

The server argv after ``--`` feeds the flag conditions (e.g. ``--ep-size 4``), exactly as the
launcher in the serving container sees it. Exit 1 when any patch is in DRIFT.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.errors import Problem, UsageError
from sparkrack.patches import PATCHES, run_catalog
from sparkrack.patches.engine import DRIFT
from sparkrack.sources import expand


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--site-packages",
        action="append",
        default=[],
        metavar="DIR",
        help="site-packages root (repeatable; searched in order)",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="report only, write nothing")
    mode.add_argument("--apply", action="store_true", help="apply the applicable patches")
    mode.add_argument("--list", action="store_true", help="list the catalog")
    parser.add_argument(
        "--arch", default="", help="model architecture class, e.g. Qwen3MoeForCausalLM"
    )
    parser.add_argument("server_argv", nargs="*", help="server argv (after --) for flag conditions")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.list:
        for p in PATCHES:
            print(f"{p.id}: {p.description}")
            for t in p.targets:
                print(f"    {t.path}  [{' / '.join(t.dists)} {t.versions or 'any'}]")
            if p.flags:
                print(f"    when {' and '.join(r.describe() for r in p.flags)}")
            print(f"    source: {expand(p.seed)}")
        return ExitCode.OK
    if not args.site_packages:
        raise UsageError(
            Problem(
                "command line",
                "--site-packages",
                "no site-packages directory given",
                fix="pass --site-packages DIR (the image's, e.g. /usr/local/lib/python3.12/dist-packages)",
            )
        )
    roots = [Path(d) for d in args.site_packages]
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        raise UsageError(
            Problem(
                "command line",
                "--site-packages",
                f"not a directory: {', '.join(missing)}",
                fix="point --site-packages at an existing site-packages directory",
            )
        )
    # Only the directories given: a .pth file or PYTHONPATH never widens what is written.
    reports = run_catalog(
        PATCHES,
        roots,
        model_arch=args.arch,
        server_argv=list(args.server_argv),
        write=bool(args.apply),
    )
    for report in reports:
        print(report.line())
    return ExitCode.FAILED if any(r.status == DRIFT for r in reports) else ExitCode.OK
