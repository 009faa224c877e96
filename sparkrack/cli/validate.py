"""``sparkrack validate [PROFILE ...]``: schema and every seed rule, optionally the real engine.

Every profile when none is given; exit 0, or exit 1 with one line per problem:
``<file>: <key>: <message> — fix: <fix> [<rule-id>]``; ``--json``: one object with ``ok``,
``profiles``, ``nodes``, ``warnings`` and ``problems``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.options import DEFAULT_INVENTORY, add_inventory, add_json
from sparkrack.errors import Problem, SparkrackError, printable


def add_arguments(command: str, v: argparse.ArgumentParser) -> None:
    v.add_argument(
        "profiles", nargs="*", metavar="PROFILE", help="path, name or HF id (default: all)"
    )
    add_inventory(
        v,
        help="inventory whose Spark count tp·pp must match (skipped if the directory is absent)",
    )
    v.add_argument("--nodes", type=int, help="Spark count to check tp·pp against (overrides -i)")
    v.add_argument(
        "--engine-check",
        action="store_true",
        help="also run every rank's rendered argv through the real parser and start-up checks of "
        "the upstream engine release the image carries (downloaded once into a cache)",
    )
    v.add_argument(
        "--offline",
        action="store_true",
        help="with --engine-check: use the cache only, never download",
    )
    add_json(v)
    v.set_defaults(handler=run_validate)


def _nodes(args: argparse.Namespace) -> int | None:
    if args.nodes is not None:
        return int(args.nodes)
    if not Path(args.inventory).exists():
        return None
    from sparkrack.inputs.inventory import load_inventory

    return len(load_inventory(args.inventory).sparks)


def trust_of_inventory(inventory: str, profile: Any) -> list[Problem]:
    """The inventory's trust refusals of ``profile`` (none without an inventory: a profile
    alone is checked for its own rules; the inventory decides which code may run)."""
    if not Path(inventory).exists():
        return []
    from sparkrack.inputs.inventory import load_inventory
    from sparkrack.serving.engines import engine_of
    from sparkrack.serving.trust import TRUST_VARS, trust_of, trust_problems

    inv = load_inventory(inventory)
    trust = trust_of({name: inv.var(name) for name in TRUST_VARS})
    return trust_problems(profile, engine_of(profile.data), trust)


def run_validate(args: argparse.Namespace) -> int:
    from sparkrack.serving import list_profiles, load_profile, profile_warnings, validate_profile

    if args.inventory != DEFAULT_INVENTORY:
        print(
            f"note: validate checks profiles and takes only the Spark count from -i; "
            f"`sparkrack check -i {printable(args.inventory)}` checks the inventory, its "
            "deployments and their profiles",
            file=sys.stderr,
        )

    refs = args.profiles or [str(p) for p in list_profiles()]
    nodes = _nodes(args)
    problems: list[Problem] = []
    warnings: list[Problem] = []
    loaded = []
    for ref in refs:
        try:
            profile = load_profile(ref)
        except SparkrackError as exc:
            problems += exc.problems
            continue
        found = [*trust_of_inventory(args.inventory, profile)]
        found += validate_profile(profile.data, profile.source, nodes)
        problems += found
        if not found:
            loaded.append(profile)
        warnings += profile_warnings(profile.data, profile.source)
    if not problems and args.engine_check:
        from sparkrack.serving.enginecheck.check import engine_check

        problems += engine_check(loaded, args.inventory, offline=args.offline)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not problems,
                    "profiles": len(refs),
                    "nodes": nodes,
                    "warnings": [asdict(w) for w in warnings],
                    "problems": [asdict(p) for p in problems],
                },
                indent=2,
            )
        )
        return ExitCode.FAILED if problems else ExitCode.OK
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for problem in problems:
        print(problem)
    if problems:
        return ExitCode.FAILED
    print(f"{len(refs)} profile(s) valid" + (f" for {nodes} Sparks" if nodes else ""))
    return ExitCode.OK
