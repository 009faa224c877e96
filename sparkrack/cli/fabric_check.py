"""``sparkrack fabric-check --log``: the fabric gate on an NCCL INFO log (exit 1 = FAIL); with
``--rail-log DEVICE=FILE`` for each rail, on every rail's own sweep too, each reported."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.errors import Problem, UsageError
from sparkrack.fabric.nccl import (
    ALL_RAILS,
    MIN_BUSBW_PER_RAIL_GBPS,
    MIN_BUSBW_SOCKET_GBPS,
    Sweep,
    Verdict,
    gate,
    gate_sweeps,
    hca_devices,
)
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
    f.add_argument(
        "--rail-log",
        action="append",
        default=[],
        metavar="DEVICE=FILE",
        help="the log of the sweep over that rail's device alone (NCCL_IB_HCA==DEVICE), once per "
        "rail in rail order; --log is then the sweep over all of them and --min-small-busbw one "
        "rail's floor",
    )
    f.set_defaults(handler=run_fabric_check)


def _read_log(name: str, flag: str = "--log") -> str:
    if name == "-":
        return sys.stdin.read()
    path = Path(name)
    if not path.is_file():
        raise UsageError(
            Problem(name, flag, "does not exist", "pass the NCCL INFO log of the test")
        )
    return path.read_text(errors="replace")


def _rail_logs(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        device, sep, name = item.partition("=")
        if not sep or not device or not name or name == "-":
            raise UsageError(
                Problem(
                    item, "--rail-log", "is not DEVICE=FILE", "e.g. --rail-log rocep1s0f0v0=r0.log"
                )
            )
        out.append((device, _read_log(name, "--rail-log")))
    return out


def _print_verdict(verdict: Verdict, requested: str, prefix: str = "") -> None:
    report = verdict.report
    bw = "n/a" if report.busbw_gbps is None else f"{report.busbw_gbps:.2f} GB/s"
    link = f"/{report.link_layer}" if report.link_layer else ""
    version = f"  NCCL {report.nccl_version}" if report.nccl_version else ""
    print(
        f"{prefix}transport: {report.transport or 'unknown'}{link}  requested: {requested}  "
        f"peak busbw: {bw}  floor: {verdict.floor_gbps:.2f} GB/s "
        f"({len(verdict.rails) or 1} rail(s)){version}"
    )
    for dev, listed, channels in verdict.rail_use():
        state = f"used, {channels} channel(s)" if listed else "NOT used"
        print(f"{prefix}rail {dev}: {state}")
    print(f"{prefix}small messages: {verdict.small_message_line()}")


def run_fabric_check(args: argparse.Namespace) -> int:
    text = _read_log(args.log)
    rail_logs = _rail_logs(args.rail_log)
    if rail_logs:
        devices = tuple(dev for dev, _ in rail_logs)
        sweeps = [
            Sweep(ALL_RAILS, tuple(range(len(devices))), devices),
            *(Sweep(f"rail{i}", (i,), (dev,)) for i, dev in enumerate(devices)),
        ]
        logs = {ALL_RAILS: text, **{f"rail{i}": log for i, (_, log) in enumerate(rail_logs)}}
        judged = gate_sweeps(logs, sweeps, args.requested, args.min_busbw, args.min_small_busbw)
    else:
        hcas = hca_devices(args.hca) if args.hca else ()
        alone = gate(
            text,
            args.requested,
            args.min_busbw,
            source=args.log,
            hcas=hcas,
            min_small_busbw_gbps=args.min_small_busbw,
        )
        judged = [(Sweep(ALL_RAILS, (), alone.rails), alone)]
    failed = False
    for sweep, verdict in judged:
        prefix = f"{sweep.name}: " if rail_logs else ""
        _print_verdict(verdict, args.requested, prefix)
        for w in verdict.warnings:
            print(f"WARN {w}")
        for p in verdict.problems:
            print(f"FAIL {p}")
        failed = failed or not verdict.passed
    if failed:
        return ExitCode.FAILED
    print("PASS")
    return ExitCode.OK
