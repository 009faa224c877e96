"""Benchmark: the switch's copy estimate against a real rate-limited push on loopback, from
fresh runs of ``tests/serving/scripts/test_fetch_receiver.py``'s estimate test (not collected
by pytest).

    .venv/bin/python tests/fetch_copy_benchmark.py [RUNS] [--no-record]

Each run (3 by default) is a fresh pytest process; the test reports its estimate and the push's
own record of the copy and of the peer's verification. Prints them per run with the load; writes
them with the load before and after as ``docs/dev/measurements/fetch-copy-loopback.json`` and
rewrites ``docs/dev/measurements.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkrack.bench import measurements  # noqa: E402

TEST = (
    "tests/serving/scripts/test_fetch_receiver.py"
    "::test_the_copy_estimate_matches_a_rate_limited_copy"
)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--no-record"]
    runs = int(args[0]) if args else 3
    before = measurements.load_now()
    print(f"load average {before.text()}")
    rows = []
    outcomes = []
    for i, (code, reports) in enumerate(measurements.pytest_reports(TEST, runs), 1):
        outcomes.append(code)
        for r in reports:
            copy_off = 100 * (r["copy_predicted_s"] - r["copy_measured_s"]) / r["copy_measured_s"]
            print(
                f"run {i}: pytest exit {code}; {r['bytes'] / 1e6:.0f} MB at {r['kib_s']} KiB/s: "
                f"copy predicted {r['copy_predicted_s']:.2f} s, measured "
                f"{r['copy_measured_s']:.2f} s ({copy_off:+.0f} %); peer-verify predicted "
                f"{r['verify_predicted_s']:.2f} s, measured {r['verify_measured_s']:.2f} s; "
                f"load {r['load_before']:.2f} -> {r['load_after']:.2f}"
            )
            rows.append(
                [
                    str(i),
                    f"{r['bytes'] / 1e6:.0f} MB",
                    f"{r['kib_s']} KiB/s ({r['kib_s'] * 1024 * 8 / 1e6:.1f} Mbit/s)",
                    f"{r['copy_predicted_s']:.2f} s",
                    f"{r['copy_measured_s']:.2f} s ({copy_off:+.0f} %)",
                    f"{r['verify_predicted_s']:.2f} s",
                    f"{r['verify_measured_s']:.2f} s",
                    f"{r['load_before']:.2f} -> {r['load_after']:.2f}",
                ]
            )
        if not reports:
            print(f"run {i}: pytest exit {code}, nothing reported")
    print(f"load average {measurements.load_now().text()}")
    if "--no-record" not in sys.argv[1:] and rows:
        record = measurements.measured(
            "tests/fetch_copy_benchmark.py",
            "The copy estimate against a real copy",
            f".venv/bin/python tests/fetch_copy_benchmark.py {runs}",
            before,
            [
                "run",
                "size",
                "rate (rsync --bwlimit)",
                "copy rail 0: estimate",
                "copy rail 0: measured (push's record)",
                "peer-verify: estimate",
                "peer-verify: measured",
                "load (1 min) before -> after",
            ],
            rows,
            [
                f"On loopback: {runs} fresh runs of `{TEST}`, pytest exit codes "
                f"{', '.join(map(str, outcomes))}."
            ],
        )
        print(f"record: {measurements.write(record, 'fetch-copy-loopback')}")


if __name__ == "__main__":
    main()
