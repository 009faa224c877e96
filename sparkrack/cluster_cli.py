"""``sparkrack manifests cluster`` and ``sparkrack fabric-check``.

``manifests cluster`` prints every cluster add-on manifest (Multus, namespace, NADs, device
plugin; with ``--fabric-check`` the NCCL test pods too) rendered from an inventory and validated
offline — exactly what playbooks/addons.yml applies. ``fabric-check --log`` runs the fabric gate
on an NCCL INFO log (exit 1 = FAIL).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from sparkrack.cluster import render_addons, validated
from sparkrack.cluster.fabric_check import render_fabric_check
from sparkrack.cluster.options import options_from
from sparkrack.errors import Problem, SparkrackError
from sparkrack.inventory import load_inventory
from sparkrack.nccl import MIN_BUSBW_PER_RAIL_GBPS, MIN_BUSBW_SOCKET_GBPS, gate, hca_devices


def register(sub: Any) -> None:
    from sparkrack.cli import DEFAULT_INVENTORY

    m: argparse.ArgumentParser = sub.add_parser(
        "manifests", help="print validated Kubernetes manifests rendered from an inventory"
    )
    msub = m.add_subparsers(dest="what", required=True, metavar="WHAT")
    c: argparse.ArgumentParser = msub.add_parser(
        "cluster", help="Multus, namespace, NADs per VF in use, NVIDIA device plugin"
    )
    c.add_argument("--inventory", "-i", default=DEFAULT_INVENTORY, help="inventory directory")
    c.add_argument("--fabric-check", action="store_true", help="also the NCCL fabric-check pods")
    c.add_argument("--transport", choices=["roce", "socket"], default="roce")
    c.add_argument("--output", "-o", help="write to this file instead of stdout")
    c.set_defaults(handler=run_manifests)

    f: argparse.ArgumentParser = sub.add_parser(
        "fabric-check", help="gate an NCCL INFO log: transport as requested, busbw above floor"
    )
    f.add_argument("--log", required=True, help="NCCL_DEBUG=INFO log ('-' for stdin)")
    f.add_argument("--requested", choices=["roce", "socket"], default="roce")
    f.add_argument(
        "--min-busbw",
        type=float,
        help=f"floor in GB/s (default: {MIN_BUSBW_PER_RAIL_GBPS:g} per rail for roce, "
        f"{MIN_BUSBW_SOCKET_GBPS:g} for socket)",
    )
    f.add_argument(
        "--hca",
        help="NCCL_IB_HCA the ranks ran with (=dev1,dev2: one device per rail); "
        "default: the log's 'NCCL_IB_HCA set to' line",
    )
    f.set_defaults(handler=run_fabric_check)


def run_manifests(args: argparse.Namespace) -> int:
    inv = load_inventory(args.inventory)
    plan = inv.plan()
    opts = options_from(inv.var("cluster_addons"), f"{args.inventory}/group_vars")
    docs = render_addons(plan, opts, str(args.inventory))
    if args.fabric_check:
        docs += validated(render_fabric_check(plan, opts, args.transport), "fabric check")
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {len(docs)} validated manifests to {args.output}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def run_fabric_check(args: argparse.Namespace) -> int:
    if args.log == "-":
        text = sys.stdin.read()
    else:
        path = Path(args.log)
        if not path.is_file():
            raise SparkrackError(
                Problem(args.log, "--log", "does not exist", "pass the NCCL INFO log of the test")
            )
        text = path.read_text(errors="replace")
    hcas = hca_devices(args.hca) if args.hca else ()
    verdict = gate(text, args.requested, args.min_busbw, source=args.log, hcas=hcas)
    report = verdict.report
    bw = "n/a" if report.busbw_gbps is None else f"{report.busbw_gbps:.2f} GB/s"
    link = f"/{report.link_layer}" if report.link_layer else ""
    version = f"  NCCL {report.nccl_version}" if report.nccl_version else ""
    print(
        f"transport: {report.transport or 'unknown'}{link}  requested: {args.requested}  "
        f"peak busbw: {bw}  floor: {verdict.floor_gbps:.2f} GB/s "
        f"({len(verdict.rails) or 1} rail(s)){version}"
    )
    for dev, listed, channels in verdict.rail_use():
        state = f"used, {channels} channel(s)" if listed else "NOT used"
        print(f"rail {dev}: {state}")
    if verdict.problems:
        for p in verdict.problems:
            print(f"FAIL {p}")
        return 1
    print("PASS")
    return 0
