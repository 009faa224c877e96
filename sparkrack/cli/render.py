"""``sparkrack render``: the launch command, env, manifests, plan or gateway config.

``render PROFILE [-i DIR] [--rank N] --what command|env|manifests|plan`` renders one profile on
the inventory's Sparks; without PROFILE (or with ``--what gateway``) the inventory's
deployments. PROFILE is a path, a file stem or the HF model id.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.options import add_inventory, print_warnings
from sparkrack.errors import Problem, SparkrackError, UsageError


def add_arguments(command: str, r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "profile",
        metavar="PROFILE",
        nargs="?",
        help="one profile on the inventory's Sparks (default: the inventory's deployments)",
    )
    add_inventory(r)
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
        help="RoCE GID index override of a node (each rank otherwise reads its own at start)",
    )
    r.set_defaults(handler=run_render)


def _gid_overrides(values: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in values:
        node, sep, num = item.partition("=")
        if not sep or not num.isdigit():
            raise UsageError(
                Problem("--gid-index", item, "is not NODE=N", "e.g. --gid-index spark1=3", "cli")
            )
        out[node] = int(num)
    return out


def build(profile_ref: str, inventory: str, gid: dict[str, int] | None = None) -> Any:
    """The resolution of a profile on an inventory's Sparks; refuses an invalid profile."""
    from sparkrack.serving import load_checked, resolve
    from sparkrack.serving.context import context_from_inventory

    ctx = context_from_inventory(inventory, gid)
    return resolve(load_checked(profile_ref, nodes=ctx.nodes), ctx)


def serving_plan(res: Any) -> dict[str, Any]:
    """What the serve play prints in the lab: ranks, nodes, addresses, rank 0's command."""
    profile, ctx = res.profile, res.ctx
    if not res.engine.uses_fabric:
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
                for r in res.ranks
            ],
            "command_rank0": res.command(0),
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
            for r in res.ranks
        ],
        "command_rank0": res.command(0),
    }


def print_rank(res: Any, what: str, rank: int) -> None:
    """``--what command|env`` of one rank of a resolved deployment."""
    ranks = [r.rank for r in res.ranks]
    if rank not in ranks:
        raise UsageError(
            Problem(
                "--rank",
                str(rank),
                f"no such rank: {res.name} has ranks {', '.join(map(str, ranks))}",
                f"use --rank 0..{max(ranks)}",
                "cli",
            )
        )
    if what == "command":
        print(res.command(rank))
        return
    for key, value in res.env(res.rank(rank)).items():
        print(f"{key}={value}")


def print_manifests(docs: list[dict[str, Any]]) -> None:
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False, width=1000))


def run_render(args: argparse.Namespace) -> int:
    from sparkrack.serving.deployments.bundle import in_apply_order, render_serving, single

    if args.profile is None or args.what == "gateway":
        return run_render_inventory(args)
    res = build(args.profile, args.inventory, _gid_overrides(args.gid_index))
    if args.what in ("command", "env"):
        print_rank(res, args.what, args.rank)
    elif args.what == "plan":
        print(json.dumps(serving_plan(res), indent=2))
    else:
        # In the order the serve play applies them: the fetch step, then the deployment.
        rendered = render_serving(single(res), source=f"render {res.profile.name}")
        print_manifests(in_apply_order(rendered, deployment=res.name))
    return ExitCode.OK


def run_render_inventory(args: argparse.Namespace) -> int:
    """``render --inventory DIR [--deployment NAME]``: the inventory's deployments."""
    from sparkrack.serving.deployments import gateway
    from sparkrack.serving.deployments.bundle import from_inventory, in_apply_order, render_serving
    from sparkrack.serving.deployments.plan import deployment_plan

    deployments = from_inventory(args.inventory, _gid_overrides(args.gid_index))
    print_warnings(deployments.warnings)
    try:
        chosen = (
            [deployments.deployment(args.deployment)]
            if args.deployment
            else deployments.deployments
        )
    except SparkrackError as exc:
        raise UsageError(exc.problems) from None
    if args.what == "gateway":
        sys.stdout.write(gateway.config_text(deployments.deployments, deployments.ctx))
        return ExitCode.OK
    if args.what in ("command", "env"):
        if len(chosen) != 1:
            raise UsageError(
                Problem(
                    "--deployment",
                    "(missing)",
                    f"the inventory has {len(chosen)} deployments",
                    f"name one: {', '.join(d.name for d in chosen)}",
                    "cli",
                )
            )
        print_rank(chosen[0].res, args.what, args.rank)
        return ExitCode.OK
    if args.what == "plan":
        print(json.dumps([deployment_plan(d) for d in chosen], indent=2))
        return ExitCode.OK
    rendered = render_serving(deployments, source=f"render {args.inventory}")
    print_manifests(in_apply_order(rendered, deployment=args.deployment))
    return ExitCode.OK
