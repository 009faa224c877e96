"""``sparkrack validate`` and ``sparkrack render``: the serving-profile CLI.

* ``sparkrack validate [PROFILE ...]`` — every profile when none is given; exit 0, or exit 1
  with one line per problem: ``<file>: <key>: <message> — fix: <fix> [<rule-id>]``.
* ``sparkrack render PROFILE [--inventory DIR] [--rank N] --what command|env|manifests`` — the
  shell-quoted launch command of rank N, its ``KEY=VALUE`` environment, or every manifest as
  multi-document YAML. PROFILE is a path, a file stem or the HF model id.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from sparkrack.errors import Problem, SparkrackError


def register(sub: Any) -> None:
    from sparkrack.cli import DEFAULT_INVENTORY

    v: argparse.ArgumentParser = sub.add_parser(
        "validate", help="check serving profiles (schema + every seed rule)"
    )
    v.add_argument(
        "profiles", nargs="*", metavar="PROFILE", help="path, name or HF id (default: all)"
    )
    v.add_argument(
        "--inventory",
        "-i",
        default=DEFAULT_INVENTORY,
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
    v.set_defaults(handler=run_validate)

    r: argparse.ArgumentParser = sub.add_parser(
        "render", help="render the launch command, env or manifests of a serving profile"
    )
    r.add_argument(
        "profile",
        metavar="PROFILE",
        nargs="?",
        help="one profile on the inventory's Sparks (default: the inventory's deployments)",
    )
    r.add_argument("--inventory", "-i", default=DEFAULT_INVENTORY)
    r.add_argument("--deployment", "-d", help="one deployment of the inventory (by name)")
    r.add_argument("--rank", type=int, default=0)
    r.add_argument(
        "--what", choices=["command", "env", "manifests", "plan", "gateway"], required=True
    )
    r.add_argument(
        "--gid-index",
        action="append",
        default=[],
        metavar="NODE=N",
        help="discovered RoCE GID index of a node (the serve play passes the roce role's facts)",
    )
    r.set_defaults(handler=run_render)


def _nodes(args: argparse.Namespace) -> int | None:
    if args.nodes is not None:
        return int(args.nodes)
    if not Path(args.inventory).exists():
        return None
    from sparkrack.inventory import load_inventory

    return len(load_inventory(args.inventory).sparks)


def run_validate(args: argparse.Namespace) -> int:
    from sparkrack.profiles import list_profiles, load_profile, profile_warnings, validate_profile

    refs = args.profiles or [str(p) for p in list_profiles()]
    nodes = _nodes(args)
    problems: list[Problem] = []
    loaded = []
    for ref in refs:
        try:
            profile = load_profile(ref)
        except SparkrackError as exc:
            problems += exc.problems
            continue
        found = validate_profile(profile.data, profile.source, nodes)
        problems += found
        if not found:
            loaded.append(profile)
        for warning in profile_warnings(profile.data, profile.source):
            print(f"warning: {warning}", file=sys.stderr)
    if not problems and args.engine_check:
        from sparkrack.profiles.upstream_check import engine_check

        problems += engine_check(loaded, args.inventory, offline=args.offline)
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"{len(refs)} profile(s) valid" + (f" for {nodes} Sparks" if nodes else ""))
    return 0


def _gid_overrides(values: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in values:
        node, sep, num = item.partition("=")
        if not sep or not num.isdigit():
            raise SparkrackError(
                Problem("--gid-index", item, "is not NODE=N", "e.g. --gid-index spark1=3", "cli")
            )
        out[node] = int(num)
    return out


def build(profile_ref: str, inventory: str, gid: dict[str, int] | None = None) -> tuple[Any, Any]:
    """(profile, context) for a profile and an inventory; refuses invalid profiles/manifests."""
    from sparkrack.profiles import load_checked
    from sparkrack.profiles.core import context_from_inventory

    ctx = context_from_inventory(inventory, gid)
    return load_checked(profile_ref, nodes=ctx.nodes), ctx


def serving_plan(profile: Any, ctx: Any) -> dict[str, Any]:
    """What the serve play prints in the lab: ranks, nodes, addresses, rank 0's command."""
    from sparkrack.profiles import engine_of, render_command

    eng = engine_of(profile.data)
    ranks = eng.ranks(ctx)
    if not eng.uses_fabric:
        # One process on one Spark: no NCCL group, no fabric address, no dist-init address.
        return {
            "profile": profile.name,
            "model": profile.model,
            "image": profile.image,
            "transport": "none (single Spark)",
            "namespace": ctx.namespace,
            "dist_init_addr": "none (single Spark)",
            "ranks": [
                {"rank": r.rank, "node": str(r.node.name), "spark_index": r.node.spark_index}
                for r in ranks
            ],
            "command_rank0": render_command(profile, ctx, 0),
        }
    return {
        "profile": profile.name,
        "model": profile.model,
        "image": profile.image,
        "transport": profile.transport,
        "namespace": ctx.namespace,
        "dist_init_addr": f"{ctx.head_address}:{ctx.dist_port}",
        "ranks": [
            {
                "rank": r.rank,
                "node": str(r.node.name),
                "spark_index": r.node.spark_index,
                "fabric_address": r.node.serving_vf.address,
                "rdma_device": r.node.serving_vf.rdma_device,
            }
            for r in ranks
        ],
        "command_rank0": render_command(profile, ctx, 0),
    }


def run_render(args: argparse.Namespace) -> int:
    from sparkrack.k8svalidate import validate_manifests
    from sparkrack.profiles import render_command, render_env, render_manifests

    if args.profile is None or args.what == "gateway":
        return run_render_inventory(args)
    profile, ctx = build(args.profile, args.inventory, _gid_overrides(args.gid_index))
    if args.what == "command":
        print(render_command(profile, ctx, args.rank))
    elif args.what == "env":
        for key, value in render_env(profile, ctx, args.rank).items():
            print(f"{key}={value}")
    elif args.what == "plan":
        print(json.dumps(serving_plan(profile, ctx), indent=2))
    else:
        docs = render_manifests(profile, ctx)
        problems = validate_manifests(docs, source=f"render {profile.name}")
        if problems:
            raise SparkrackError(problems)
        sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False, width=1000))
    return 0


def run_render_inventory(args: argparse.Namespace) -> int:
    """``render --inventory DIR [--deployment NAME]``: the inventory's deployments."""
    from sparkrack.k8svalidate import validate_manifests
    from sparkrack.profiles import gateway, render_command, render_env
    from sparkrack.profiles.manifests import deployment_objects, namespace
    from sparkrack.profiles.serving import deployment_plan, from_inventory, render_serving

    serving = from_inventory(args.inventory, _gid_overrides(args.gid_index))
    ctx = serving.ctx
    chosen = [serving.deployment(args.deployment)] if args.deployment else serving.deployments
    if args.what == "gateway":
        sys.stdout.write(gateway.config_text(serving.deployments, ctx))
        return 0
    if args.what in ("command", "env"):
        if len(chosen) != 1:
            raise SparkrackError(
                Problem(
                    "--deployment",
                    "(missing)",
                    f"the inventory has {len(chosen)} deployments",
                    f"name one: {', '.join(d.name for d in chosen)}",
                    "cli",
                )
            )
        d = chosen[0]
        if args.what == "command":
            print(render_command(d.profile, d.context(ctx), args.rank))
        else:
            for key, value in render_env(d.profile, d.context(ctx), args.rank).items():
                print(f"{key}={value}")
        return 0
    if args.what == "plan":
        print(json.dumps([deployment_plan(d, ctx) for d in chosen], indent=2))
        return 0
    if args.deployment:
        docs = [namespace(ctx), *deployment_objects(chosen[0].profile, chosen[0].context(ctx))]
    else:
        docs = render_serving(serving)["manifests"]
    problems = validate_manifests(docs, source=f"render {args.inventory}")
    if problems:
        raise SparkrackError(problems)
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False, width=1000))
    return 0
