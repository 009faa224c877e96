"""``sparkrack manifests cluster``: every cluster add-on manifest of an inventory.

Multus, namespace, NADs, device plugin (with ``--fabric-check`` the NCCL test pods too),
rendered from an inventory and validated offline: exactly what playbooks/addons.yml applies.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.options import add_inventory
from sparkrack.fabric.nccl import fabric_sweeps
from sparkrack.fabric.ncclenv import TRANSPORTS
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k8s import render_addons, validated
from sparkrack.k8s.fabric_check import render_fabric_check
from sparkrack.k8s.options import options_from


def add_arguments(command: str, m: argparse.ArgumentParser) -> None:
    msub = m.add_subparsers(dest="what", required=True, metavar="WHAT")
    c: argparse.ArgumentParser = msub.add_parser(
        "cluster", help="Multus, namespace, NADs per VF in use, NVIDIA device plugin"
    )
    add_inventory(c)
    c.add_argument(
        "--fabric-check", action="store_true", help="also the NCCL fabric-check pods of every sweep"
    )
    c.add_argument("--transport", choices=list(TRANSPORTS), default=TRANSPORTS[0])
    c.add_argument("--output", "-o", help="write to this file instead of stdout")
    c.set_defaults(handler=run_manifests)


def run_manifests(args: argparse.Namespace) -> int:
    inv = load_inventory(args.inventory)
    plan = inv.plan()
    opts = options_from(inv.var("cluster_addons"), f"{args.inventory}/group_vars")
    docs = render_addons(plan, opts, str(args.inventory))
    if args.fabric_check:
        # every sweep's pods (they run one sweep after another); their ConfigMap once
        for i, sweep in enumerate(fabric_sweeps(plan)):
            sweep_docs = render_fabric_check(plan, opts, args.transport, sweep=sweep)
            docs += validated(
                sweep_docs if i == 0 else sweep_docs[1:], f"fabric check {sweep.name}"
            )
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {len(docs)} validated manifests to {args.output}", file=sys.stderr)
    else:
        print(text, end="")
    return ExitCode.OK
