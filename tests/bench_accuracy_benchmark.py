"""Benchmark: the bench client's accuracy and CPU cost, from fresh runs of
``tests/bench/test_bench_accuracy.py`` (not collected by pytest).

    .venv/bin/python tests/bench_accuracy_benchmark.py [RUNS] [--no-record]

Runs the accuracy test RUNS times (3 by default), each a fresh pytest process that reports each
concurrency level's figures through ``SPARKRACK_BENCH_REPORT``; prints per level the worst
per-request decode tok/s error over the runs (against the rate the server logged for that stream),
how far the server's delivered rates strayed from its schedule, and the client's CPU-seconds per
1 000 tokens, with
the load average and each run's pytest outcome; writes them with the load before and after as the
record ``docs/dev/measurements/bench-accuracy.json`` and rewrites ``docs/dev/measurements.md``.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkrack.bench import measurements  # noqa: E402

TEST = "tests/bench/test_bench_accuracy.py::test_decode_rate_within_one_percent"


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--no-record"]
    runs = int(args[0]) if args else 3
    before = measurements.load_now()
    print(f"load average {before.text()}")
    by_level: dict[int, list[dict[str, Any]]] = defaultdict(list)
    outcomes = []
    for i, (code, reports) in enumerate(measurements.pytest_reports(TEST, runs), 1):
        outcomes.append(code)
        for entry in reports:
            by_level[int(entry["n"])].append(entry)
        print(f"run {i}: pytest exit {code}, {len(reports)} levels reported")
    rows = []
    for n in sorted(by_level):
        entries = by_level[n]
        worst = max(abs(e["worst_request_error_pct"]) for e in entries)
        stray = max(
            abs(rate / e["scheduled_tok_s_per_stream"] - 1) * 100
            for e in entries
            for rate in e["delivered_tok_s_per_stream"]
        )
        cpu = [e["client_cpu_s_per_1k_tok"] for e in entries]
        cores = max(e["client_cores_busy"] for e in entries)
        print(
            f"n={n:<3} worst error {worst:.2f} % over {len(entries)} runs (delivered rates "
            f"within {stray:.2f} % of the schedule); client CPU "
            f"{min(cpu):.3f}-{max(cpu):.3f} s per 1 000 tokens, at most {cores:.2f} of a core"
        )
        rows.append(
            [
                f"n={n}",
                f"{worst:.2f} %",
                f"{stray:.2f} %",
                f"{min(cpu):.3f}–{max(cpu):.3f}",
                f"{cores:.2f}",
                str(len(entries)),
            ]
        )
    print(f"load average {measurements.load_now().text()}")
    if "--no-record" not in sys.argv[1:] and rows:
        passed = sum(code == 0 for code in outcomes)
        record = measurements.measured(
            "tests/bench_accuracy_benchmark.py",
            "Benchmark client accuracy",
            f".venv/bin/python tests/bench_accuracy_benchmark.py {runs}",
            before,
            [
                "concurrency",
                "worst per-request decode tok/s error (against the delivered rate)",
                "delivered rate off its schedule (worst)",
                "client CPU-seconds per 1 000 tokens",
                "client cores busy (max)",
                "runs",
            ],
            rows,
            [
                f"{runs} fresh runs of `{TEST}`; {passed} of them passed (pytest exit codes "
                f"{', '.join(map(str, outcomes))})."
            ],
        )
        print(f"record: {measurements.write(record, 'bench-accuracy')}")


if __name__ == "__main__":
    main()
