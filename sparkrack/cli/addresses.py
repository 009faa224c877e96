"""``sparkrack addresses``: print the fabric address plan of an inventory."""

from __future__ import annotations

import argparse
import json

import yaml

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.options import add_format, add_inventory, print_warnings
from sparkrack.inputs.inventory import load_inventory


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    add_inventory(p)
    add_format(p, "table", "yaml", "json")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    plan = load_inventory(args.inventory).plan()
    if args.format == "json":
        print(json.dumps(plan.to_dict(), indent=2))
    elif args.format == "yaml":
        print(yaml.safe_dump(plan.to_dict(), sort_keys=False), end="")
    else:
        print(
            f"fabric {', '.join(plan.rail_subnets)}  mtu {plan.mtu}  VFs on {', '.join(plan.rails)}: "
            f"{plan.vf_count} (in use: {', '.join(map(str, plan.vfs_in_use))})"
        )
        print(f"{'node':<10} {'rank':>4} {'node-ip':<15} {'PF':<22} {'VF (in use)':<40}")
        for n in plan.nodes:
            pf = ", ".join(f"{p.name}={p.address}" for p in n.ports)
            vfs = ", ".join(f"{v.netdev}={v.address}" for v in n.vfs if v.in_use)
            print(f"{n.name:<10} {n.rank:>4} {n.node_ip:<15} {pf:<22} {vfs:<40}")
        print_deployments(args.inventory)
    return ExitCode.OK


def print_deployments(inventory: str) -> None:
    """Which VF each deployment of the inventory uses, on which Sparks."""
    from sparkrack.errors import SparkrackError, printable
    from sparkrack.serving.deployments.bundle import from_inventory

    try:
        deployments = from_inventory(inventory, check_memory=False)
    except SparkrackError as exc:
        print(f"\ndeployments: refused (sparkrack check -i {printable(inventory)} shows why)")
        for problem in exc.problems[:3]:
            print(f"  {problem}")
        return
    print_warnings(deployments.warnings)
    print(f"\n{'deployment':<28} {'engine':<7} {'VF':<4} sparks (head first)")
    for d in deployments.deployments:
        vf = "-" if d.vf is None else str(d.vf)
        eng = d.res.engine.name
        print(f"{d.name:<28} {eng:<7} {vf:<4} {', '.join(d.sparks)}")
