"""Benchmark: the fetch step's verification rate (sha256 of a file, as ``fetch_base.verify``
reads it), per core and with every core, on a file of random bytes in the page cache.

    .venv/bin/python lab/bench_verify.py [--gb 2] [--dir /tmp] [--root DIR | --no-record]

Prints GB/s (wall) for 1 worker and for os.cpu_count() workers (one file per worker), the GB
hashed per CPU-second (what one core does, whatever else shares the machine), and the load
average; the issue asks for at least 1 GB/s per core. Writes the figures with the load before
and after as the record ``docs/dev/measurements/bench-verify.json`` and rewrites
``docs/dev/measurements.md`` (``--root``: another tree's ``docs/``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparkrack.bench import measurements  # noqa: E402
from sparkrack.serving.scripts import fetch_base  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="size of each file (GB)")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--root", type=Path, default=measurements.ROOT, help="where docs/ is")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()
    before = measurements.load_now()
    rows = []
    cores = os.cpu_count() or 1
    size = int(args.gb * fetch_base.GB)
    chunk = os.urandom(1 << 24)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="sparkrack-bench-") as tmp:
        paths = []
        for i in range(cores):
            path = Path(tmp, f"f{i}")
            with path.open("wb") as f:
                for _ in range(size // len(chunk)):
                    f.write(chunk)
            paths.append(path)
        digest = hashlib.sha256(paths[0].read_bytes()).hexdigest()  # warms the page cache
        for workers, files in ((1, paths[:1]), (cores, paths)):
            entries = {p.name: {"size": p.stat().st_size, "sha256": digest} for p in files}
            snap = fetch_base.Snapshot(
                "b/b", "main", "main", (), len(files), 0,
                tuple((p.name, str(p.relative_to(tmp))) for p in files),
            )  # fmt: skip
            start, cpu = time.monotonic(), time.process_time()
            bad = fetch_base.verify(Path(tmp), snap, entries, workers=workers)
            seconds, cpu = time.monotonic() - start, time.process_time() - cpu
            assert bad == {}, bad
            total = sum(p.stat().st_size for p in files)
            rate = total / seconds / fetch_base.GB
            per_cpu = total / cpu / fetch_base.GB
            print(
                f"verify: {workers} worker(s), {total / fetch_base.GB:.1f} GB in {seconds:.2f} s: "
                f"{rate:.2f} GB/s wall ({rate / workers:.2f} GB/s per worker); "
                f"{per_cpu:.2f} GB per CPU-second"
            )
            rows.append(
                [
                    str(workers),
                    f"{total / fetch_base.GB:.1f} GB",
                    f"{seconds:.2f} s",
                    f"{rate:.2f} GB/s ({rate / workers:.2f} per worker)",
                    f"{per_cpu:.2f}",
                ]
            )
    print(f"cores {cores}; load average {measurements.load_now().text()}")
    if not args.no_record:
        record = measurements.measured(
            "lab/bench_verify.py",
            "Weights: verification",
            f".venv/bin/python lab/bench_verify.py --gb {args.gb:g}",
            before,
            ["workers", "hashed", "time", "wall rate", "GB per CPU-second"],
            rows,
            [
                "Files of random bytes in the page cache, one per worker; the goal is at least "
                "1 GB per CPU-second."
            ],
        )
        print(f"record: {measurements.write(record, 'bench-verify', args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
