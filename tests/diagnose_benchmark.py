"""Benchmark: ``diagnose`` time against log size on hostile logs (not collected by pytest).

    PYTHONPATH=. python tests/diagnose_benchmark.py

Prints seconds per size for each log shape; linear time shows as a constant MB/s column.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from hostile_logs import dense_matches, hostile_log, huge_line, near_matches  # noqa: E402

from sparkrack.diagnose.signatures import diagnose, load_signatures  # noqa: E402

SHAPES: dict[str, Callable[[int], str]] = {
    "mixed (huge lines + near-matches)": hostile_log,
    "1000-char NCCL near-miss lines": lambda n: "\n".join([huge_line(1000)] * (n // 1001)),
    "short near-match lines": lambda n: "\n".join(near_matches(n // 90))[:n],
    "every line a context-less match": dense_matches,
}


def main() -> None:
    load_signatures()
    for name, make in SHAPES.items():
        for size in (1_870_000, 9_350_000, 18_700_000):
            text = make(size)
            start = time.perf_counter()
            cpu = time.process_time()
            diagnose(text)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            mb = len(text) / 1e6
            print(
                f"{name:36} {mb:6.1f} MB {seconds:6.2f} s wall {cpu:6.2f} s CPU"
                f" {mb / cpu:6.1f} MB/s of CPU",
                flush=True,
            )


if __name__ == "__main__":
    main()
