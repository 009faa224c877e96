"""The memory settle step of a GB10 engine boot (STDLIB ONLY), and the one reader of
``/proc/meminfo``.

On a GB10 the CPU and the GPU share 128 GB. ``MemAvailable`` counts the page cache as
reclaimable, but the NVIDIA allocator cannot take page cache back in time: an engine start fails
with ``NV_ERR_NO_MEMORY`` while ``MemAvailable`` still shows room (the source is
``src:gb10-memavailable-bug``; ``src:spark-oom-page-cache`` traces it to the page cache). Right before a rank starts, the fetch
step has just written the model's weights, so the page cache is at its largest. The settle step
has two parts:

* :func:`gate` (the ``wait-memory`` init container): each attempt syncs, drops the page cache and
  compacts memory (:func:`flush`), then reads ``MemFree``. It passes when ``MemFree`` covers the
  rank's planned footprint. It records ``MemFree`` at every attempt, and it stops retrying when
  free memory recedes (:data:`RECEDING`), the shape that comes before a wedge.
* :func:`hold` (the ``settle`` sidecar, and :func:`run_during` in the lab): while the engine
  loads, it flushes every ``interval`` seconds, whatever the memory readings say, until the load
  ends. A flusher that waits for a threshold can stay under it and still leave the allocator
  short: 4-Spark owners found that only an unconditional loop for the whole load made large KV
  allocations pass.

Writing ``drop_caches`` and ``compact_memory`` takes ``CAP_SYS_ADMIN`` and a writable
``/proc/sys``; a container runtime mounts ``/proc/sys`` read-only in every container that is not
privileged, and no capability alone makes it writable. So both parts run privileged, as root.
``--vm`` points them at another directory (the lab's recorded stand-in for ``/proc/sys/vm``).

Shipped verbatim in the switch ConfigMap beside ``fetch_step.py``, which imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

GB = 1_000_000_000
GIB = 1 << 30
PROC_VM = Path("/proc/sys/vm")
PROC_MEMINFO = Path("/proc/meminfo")
DROP_CACHES = "drop_caches"
COMPACT_MEMORY = "compact_memory"
DROP_ALL = "3"
"""Page cache, dentries and inodes (``Documentation/admin-guide/sysctl/vm.rst``)."""
COMPACT_ALL = "1"
RECEDING = 3
"""Readings in a row, each lower than the one before, after which :func:`gate` stops retrying
(112.15 -> 112.05 -> 111.95 GiB is the recorded shape)."""
DEFAULT_INTERVAL_S = 10.0
DEFAULT_ATTEMPTS = 60
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_SHORT = 3
"""Every attempt flushed and ``MemFree`` stayed short (the fetch step's timeout code)."""
EXIT_RECEDING = 4

_LINE = re.compile(r"^([A-Za-z0-9_()]+):\s+([0-9]+)(?:\s+kB)?$")


class SettleError(Exception):
    """A refusal: the message is the one line printed after ``FAILED:``."""

    def __init__(self, message: str, code: int = EXIT_FAILED, readings: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.readings = list(readings)
        """``MemFree`` at each attempt of :func:`gate` before it gave up."""


@dataclass(frozen=True)
class Meminfo:
    """The fields of ``/proc/meminfo`` sparkrack reads, in bytes."""

    total: int
    free: int
    """``MemFree``: what the GPU allocator can take now. The settle step and the memory guard
    decide on this one."""
    available: int
    """``MemAvailable``: ``MemFree`` plus what the kernel counts as reclaimable. Shown, never
    decided on."""
    cached: int


def parse_meminfo(text: str) -> Meminfo:
    """The :class:`Meminfo` of a ``/proc/meminfo`` text; ValueError when a field is missing."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            unit = 1024 if line.rstrip().endswith("kB") else 1
            values[m.group(1)] = int(m.group(2)) * unit
    wanted = ("MemTotal", "MemFree", "MemAvailable", "Cached")
    missing = [name for name in wanted if name not in values]
    if missing:
        raise ValueError(f"no {', '.join(missing)} line: not /proc/meminfo")
    return Meminfo(*(values[name] for name in wanted))


def read_meminfo(path: Path = PROC_MEMINFO) -> Meminfo:
    try:
        return parse_meminfo(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SettleError(f"{path}: {exc}") from exc


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def flush(vm: Path) -> None:
    """Sync, drop the page cache, compact memory: one write each to ``vm``'s two files."""
    os.sync()
    for name, value in ((DROP_CACHES, DROP_ALL), (COMPACT_MEMORY, COMPACT_ALL)):
        path = vm / name
        try:
            # A procfs file takes the write as it is: no temporary file, no truncation.
            with path.open("w", encoding="ascii") as f:
                f.write(value)
        except OSError as exc:
            raise SettleError(
                f"cannot write {path} ({exc.strerror}): the settle step runs privileged as root; "
                "a container that is not privileged sees /proc/sys read-only"
            ) from exc


def receding(frees: Sequence[int]) -> bool:
    """The last :data:`RECEDING` readings each lower than the one before."""
    tail = list(frees[-RECEDING:])
    return len(tail) == RECEDING and all(b < a for a, b in zip(tail, tail[1:], strict=False))


def say(message: str) -> None:
    print(f"[settle] {message}", flush=True)


def gate(
    need_bytes: float,
    meminfo: Path,
    vm: Path,
    attempts: int,
    interval: float,
    sleep: Callable[[float], None] = time.sleep,
) -> list[int]:
    """Flush, then read ``MemFree``, until it covers ``need_bytes``; the readings, in order.
    SettleError when free memory recedes (:func:`receding`) or ``attempts`` run out."""
    if attempts < 1:
        raise SettleError(f"--attempts {attempts}: at least one")
    frees: list[int] = []
    for attempt in range(1, attempts + 1):
        flush(vm)
        free = read_meminfo(meminfo).free
        frees.append(free)
        enough = free >= need_bytes
        say(
            f"attempt {attempt}: MemFree {gib(free)} {'>=' if enough else '<'} "
            f"need {gib(need_bytes)} after drop_caches and compact_memory"
        )
        if enough:
            return frees
        if receding(frees):
            trail = " -> ".join(gib(f) for f in frees[-RECEDING:])
            raise SettleError(
                f"MemFree recedes after every flush ({trail}): something on this Spark keeps "
                "taking memory; not retrying into a wedge. Look for a leftover engine process "
                "or container on this node (`nvidia-smi`, `ps aux --sort=-rss`)",
                EXIT_RECEDING,
                frees,
            )
        if attempt < attempts:
            sleep(interval)
    raise SettleError(
        f"MemFree {gib(frees[-1])} < need {gib(need_bytes)} after {attempts} flushes",
        EXIT_SHORT,
        frees,
    )


def hold(
    vm: Path,
    interval: float,
    done: Callable[[], bool],
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Flush every ``interval`` s until ``done()`` says the load ended; the number of flushes.
    Unconditional: no memory reading decides whether a flush happens."""
    flushes = 0
    while not done():
        flush(vm)
        flushes += 1
        sleep(interval)
    return flushes


def url_ready(url: str, timeout: float = 5.0) -> Callable[[], bool]:
    """``done`` for :func:`hold`: the engine's health URL answers 2xx."""

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (http only)
                return 200 <= int(resp.status) < 300
        except (urllib.error.URLError, OSError, ValueError):
            return False

    return check


def deadline(seconds: float, clock: Callable[[], float] = time.monotonic) -> Callable[[], bool]:
    end = clock() + seconds
    return lambda: clock() >= end


def run_during(vm: Path, interval: float, argv: Sequence[str]) -> tuple[int, int]:
    """Run ``argv`` (the load) and flush every ``interval`` s while it runs; (its exit code,
    flushes)."""
    proc = subprocess.Popen(list(argv))  # noqa: S603 (the operator's command)
    flushes = hold(vm, interval, lambda: proc.poll() is not None)
    return proc.wait(), flushes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memsettle.py", description=__doc__.split("\n")[0])
    parser.add_argument("--vm", type=Path, default=PROC_VM, help="where drop_caches lives")
    parser.add_argument("--meminfo", type=Path, default=PROC_MEMINFO)
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S)
    parser.add_argument("--record", type=Path, help="write the readings here (JSON)")
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("gate", help="flush, then wait until MemFree covers the footprint")
    p.add_argument("--need-gb", type=float, required=True)
    p.add_argument("--attempts", type=int, default=DEFAULT_ATTEMPTS)
    p = sub.add_parser("hold", help="flush on the interval until the engine is ready")
    p.add_argument("--ready-url", required=True)
    p.add_argument("--max-s", type=float, required=True, help="stop flushing after this anyway")
    p.add_argument("--idle", action="store_true", help="then sleep until stopped (a sidecar)")
    p = sub.add_parser("run", help="flush on the interval while a command runs: run -- CMD...")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    record: dict[str, object] = {"step": args.step, "vm": str(args.vm)}
    code = EXIT_OK
    try:
        if args.step == "gate":
            frees = gate(args.need_gb * GB, args.meminfo, args.vm, args.attempts, args.interval)
            record["memfree_bytes"] = frees
        elif args.step == "hold":
            ready, late = url_ready(args.ready_url), deadline(args.max_s)
            flushes = hold(args.vm, args.interval, lambda: ready() or late())
            record["flushes"] = flushes
            say(f"{flushes} flushes while the engine loaded; stopped")
            while args.idle:
                time.sleep(3600)
        else:
            load = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not load:
                raise SettleError("run: no command after --")
            code, flushes = run_during(args.vm, args.interval, load)
            record |= {"flushes": flushes, "exit": code}
            say(f"{flushes} flushes of {args.vm} while the load ran (exit {code})")
    except SettleError as exc:
        print(f"[settle] FAILED: {exc}", file=sys.stderr, flush=True)
        record["failed"] = str(exc)
        if exc.readings:
            record["memfree_bytes"] = exc.readings
        code = exc.code
    if args.record is not None:
        args.record.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main())
