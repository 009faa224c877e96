"""Benchmark: the lab control plane's build, its start to ``/readyz`` and its memory when idle,
on loopback (the placement the tests use; no container).

    .venv/bin/python lab/bench_controlplane.py [--runs 3] [--no-record]

Builds the binaries unless they are up to date (the seconds, or "up to date"), then starts and
stops the control plane RUNS times, each in a fresh state folder: the seconds from the first
process started to ``/readyz`` (KWOK included) and each process's RSS right after it. Prints
them with the load average; writes them with the load before and after as the record
``docs/dev/measurements/controlplane.json`` and rewrites ``docs/dev/measurements.md``. The
memory after a converge (objects in etcd, KWOK's nodes and pods) is ``make lab``'s figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import controlplane  # noqa: E402

from sparkrack.bench import measurements  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()
    before = measurements.load_now()
    print(f"load average {before.text()}")
    built = controlplane.build()
    rows = [
        [
            "build",
            ", ".join(
                f"{name} {'up to date' if s is None else f'built in {s:.0f} s'}"
                for name, s in built.items()
            ),
        ]
    ]
    print(rows[0][1])
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="sparkrack-cpbench-") as tmp:
            plane = controlplane.ControlPlane(Path(tmp) / "state")
            try:
                seconds = plane.start(controlplane.Placement.loopback())
                rss = plane.rss_mib()
            finally:
                plane.stop()
        memory = ", ".join(f"{k} {v:.0f}" for k, v in rss.items())
        load = measurements.load_now().text()
        print(f"run {run}: /readyz {seconds:.1f} s after start; RSS MiB {memory}; load {load}")
        rows.append([f"start {run}: first process to /readyz", f"{seconds:.1f} s"])
        rows.append(
            [f"start {run}: RSS when ready, idle", f"{memory} = {sum(rss.values()):.0f} MiB"]
        )
    print(f"load average {measurements.load_now().text()}")
    if not args.no_record:
        record = measurements.measured(
            "lab/bench_controlplane.py",
            "The lab",
            f".venv/bin/python lab/bench_controlplane.py --runs {args.runs}",
            before,
            ["what", "figure"],
            rows,
            ["On loopback, each start in a fresh state folder; the RSS is before any object."],
        )
        print(f"record: {measurements.write(record, 'controlplane')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
