"""Benchmark: ``sparkrack check`` on the shipped inventories, each in a fresh process (not
collected by pytest).

    .venv/bin/python tests/check_benchmark.py [RUNS]

Prints wall and CPU seconds per run (the whole command: Python start, imports, ansible-core's
inventory reading, every check) with the machine's load average, and the median.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(inventory: str, *extra: str) -> tuple[float, float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkrack", "check", "-i", inventory, *extra],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    return (
        time.perf_counter() - start,
        usage.ru_utime + usage.ru_stime,
        os.waitstatus_to_exitcode(status),
    )


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for inventory in ("inventories/example", "inventories/lab"):
        for extra in ((), ("--no-engine-check",)):
            results = [one(inventory, *extra) for _ in range(runs)]
            walls = [w for w, _c, _code in results]
            cpus = [c for _w, c, _code in results]
            label = f"{inventory} {' '.join(extra)}".strip()
            print(
                f"{label:45} exit {results[0][2]}  wall median {statistics.median(walls):.2f} s "
                f"(max {max(walls):.2f})  CPU median {statistics.median(cpus):.2f} s"
            )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
