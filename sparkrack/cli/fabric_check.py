"""``sparkrack fabric-check --log``: the fabric gate on an NCCL INFO log (exit 1 = FAIL)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.errors import Problem, UsageError
from sparkrack.fabric.nccl import MIN_BUSBW_PER_RAIL_GBPS, MIN_BUSBW_SOCKET_GBPS, gate, hca_devices
from sparkrack.fabric.ncclenv import TRANSPORTS


def add_arguments(command: str, f: argparse.ArgumentParser) -> None:
    f.add_argument("--log", required=True, help="NCCL_DEBUG=INFO log ('-' for stdin)")
    f.add_argument("--requested", choices=list(TRANSPORTS), default=TRANSPORTS[0])
    f.add_argument(
        "--min-busbw",
        type=float,
        help=f"floor in GB/s (default: {MIN_BUSBW_PER_RAIL_GBPS:g} per rail for roce, "
        f"{MIN_BUSBW_SOCKET_GBPS:g} for socket)",
    )
    f.add_argument(
        "--min-small-busbw",
        type=float,
        help="floor in GB/s of the small-message region (8 KiB .. 1 MiB); default: none, "
        "only the warning below 0.4x of the large-message peak",
    )
    f.add_argument(
        "--hca",
        help="NCCL_IB_HCA the ranks ran with (=dev1,dev2: one device per rail); "
        "default: the log's 'NCCL_IB_HCA set to' line",
    )
    f.set_defaults(handler=run_fabric_check)


def run_fabric_check(args: argparse.Namespace) -> int:
    if args.log == "-":
        text = sys.stdin.read()
    else:
        path = Path(args.log)
        if not path.is_file():
            raise UsageError(
                Problem(args.log, "--log", "does not exist", "pass the NCCL INFO log of the test")
            )
        text = path.read_text(errors="replace")
    hcas = hca_devices(args.hca) if args.hca else ()
    verdict = gate(
        text,
        args.requested,
        args.min_busbw,
        source=args.log,
        hcas=hcas,
        min_small_busbw_gbps=args.min_small_busbw,
    )
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
    print(f"small messages: {verdict.small_message_line()}")
    for w in verdict.warnings:
        print(f"WARN {w}")
    if verdict.problems:
        for p in verdict.problems:
            print(f"FAIL {p}")
        return ExitCode.FAILED
    print("PASS")
    return ExitCode.OK
