"""``sparkrack memguard``: per Spark, stop the largest engine pod before memory runs out."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from sparkrack import contract
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.watch import KUBECONFIG_HELP, api_client
from sparkrack.errors import Problem, UsageError
from sparkrack.inputs.forms import memory_bytes
from sparkrack.planner.memory import DEFAULT_OS_HEADROOM_GB
from sparkrack.watch.memguard import DEFAULT_FULL_AVG10, Floor, Guard, read_pressure


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    p.description = (
        "Reads memory pressure (PSI) and MemFree of this Spark; below the floor it deletes "
        f"the engine pod (one that {contract.ENGINE_SELECTOR} selects) using the most memory "
        "on --node and records why in an Event on it. --once: one look, exit 0 above the "
        "floor, 1 when it acted or found no pod to stop."
    )
    p.add_argument("--node", required=True, help="this Spark's node name (downward API)")
    p.add_argument("--namespace", default="sparkrack", help="the serving namespace")
    p.add_argument(
        "--proc", type=Path, default=Path("/proc"), help="a /proc of the node (the pod's own)"
    )
    p.add_argument(
        "--cgroup", type=Path, default=None, help="the host's /sys/fs/cgroup (pods' usage)"
    )
    p.add_argument(
        "--floor",
        default=f"{DEFAULT_OS_HEADROOM_GB:g}G",
        help="act below this MemFree (default: the planner's OS headroom, %(default)s)",
    )
    p.add_argument(
        "--psi-full",
        type=float,
        default=DEFAULT_FULL_AVG10,
        help="act at this PSI full avg10 percentage (default %(default)g)",
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between looks")
    p.add_argument("--grace", type=int, default=10, help="seconds the stopped pod gets")
    p.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    p.add_argument("--once", action="store_true", help="one look, then exit")
    p.set_defaults(handler=cmd_memguard)


def floor_from_args(args: argparse.Namespace) -> Floor:
    size = memory_bytes(str(args.floor))
    if size is None or size <= 0:
        raise UsageError(
            Problem("--floor", "--floor", f"{args.floor!r} is not a memory size", "e.g. 8G")
        )
    if not 0 < args.psi_full <= 100:
        raise UsageError(Problem("--psi-full", "--psi-full", "must be in (0, 100]", "e.g. 10"))
    if not (args.proc / "pressure" / "memory").is_file():
        raise UsageError(
            Problem(
                str(args.proc),
                "--proc",
                "no pressure/memory in it (a kernel without PSI, or not /proc)",
                "give the host's /proc; PSI needs a kernel with CONFIG_PSI (psi=1)",
            )
        )
    return Floor(size, args.psi_full)


def cmd_memguard(args: argparse.Namespace) -> int:
    floor = floor_from_args(args)
    guard = Guard(api_client(args.kubeconfig), args.node, args.namespace, args.grace)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while True:
        pressure = read_pressure(args.proc)
        decision = guard.check(pressure, floor, args.cgroup)
        if decision.reasons or args.once:
            print(decision.message(pressure), file=sys.stdout, flush=True)
        if args.once:
            return ExitCode.FAILED if decision.reasons else ExitCode.OK
        if stop.wait(args.interval):
            return ExitCode.OK
