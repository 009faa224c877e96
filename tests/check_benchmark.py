"""Benchmark: ``sparkrack check`` on the shipped inventories, each in a fresh process (not
collected by pytest).

    .venv/bin/python tests/check_benchmark.py [RUNS] [--no-record]

Prints wall and CPU seconds per run (the whole command: Python start, imports, ansible-core's
inventory reading, every check) with the machine's load average, and the median; writes them
with the load before and after as the record ``docs/dev/measurements/check.json`` and rewrites
``docs/dev/measurements.md``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkrack.bench import measurements  # noqa: E402


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
    args = [a for a in sys.argv[1:] if a != "--no-record"]
    runs = int(args[0]) if args else 5
    before = measurements.load_now()
    print(f"load average {before.text()}")
    rows = []
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
            rows.append(
                [
                    f"`{label}`",
                    str(results[0][2]),
                    f"{statistics.median(walls):.2f} s",
                    f"{max(walls):.2f} s",
                    f"{statistics.median(cpus):.2f} s",
                ]
            )
    print(f"load average {measurements.load_now().text()}")
    if "--no-record" not in sys.argv[1:]:
        record = measurements.measured(
            "tests/check_benchmark.py",
            "sparkrack check",
            f".venv/bin/python tests/check_benchmark.py {runs}",
            before,
            ["inventory", "exit", "wall median", "wall max", "CPU median"],
            rows,
            [f"{runs} runs of each, every run a fresh process."],
        )
        print(f"record: {measurements.write(record, 'check')}")


if __name__ == "__main__":
    main()
