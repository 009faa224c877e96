"""Benchmark: the api and docker tiers alone, then side by side as ``make unit`` runs them, with
the share of the 2 cores each kept busy (not collected by pytest).

    .venv/bin/python tests/tier_overlap_benchmark.py [--no-record]

Needs the control plane built (``make controlplane``) and a Docker engine; each run holds the
machine to itself. Busy is the machine's CPU time outside idle and I/O wait, from /proc/stat,
over the run's wall time and all cores: it counts whatever else runs, so run it on a quiet
machine. Writes the record ``docs/dev/measurements/tier-overlap.json`` and rewrites
``docs/dev/measurements.md``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkrack.bench import measurements  # noqa: E402

RUNS = (
    ("api tier alone", ["make", "-s", "api"]),
    ("docker tier alone", ["make", "-s", "docker"]),
    ("both side by side (make -j2 -O api docker)", ["make", "-s", "-j2", "-O", "api", "docker"]),
)


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def run(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds, busy share of all cores, and pytest's summary lines."""
    busy0, total0 = cpu_ticks()
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    busy1, total1 = cpu_ticks()
    summary = [line for line in proc.stdout.splitlines() if " passed" in line or " failed" in line]
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    return wall, (busy1 - busy0) / (total1 - total0), "; ".join(summary)


def main() -> None:
    before = measurements.load_now()
    print(f"load average {before.text()}")
    rows = []
    for what, argv in RUNS:
        wall, busy, summary = run(argv)
        print(f"  {what:45} wall {wall:6.1f} s  busy {busy:4.0%}  {summary}")
        rows.append([what, f"{wall:.1f} s", f"{busy:.0%}", summary])
    if "--no-record" in sys.argv:
        return
    record = measurements.measured(
        benchmark="tests/tier_overlap_benchmark.py",
        section="The lab",
        command=".venv/bin/python tests/tier_overlap_benchmark.py",
        before=before,
        columns=["run", "wall", "cores busy", "pytest"],
        rows=rows,
        notes=[
            "Warm: the control plane built, the node image cached. Each run had the machine to "
            "itself, one after the other.",
            "Cores busy: CPU time outside idle and I/O wait over wall time and both cores "
            "(/proc/stat), whatever ran.",
        ],
    )
    print(f"wrote {measurements.write(record, 'tier-overlap')}")


if __name__ == "__main__":
    main()
