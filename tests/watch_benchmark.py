"""Benchmark: CPU the watchdog's loop uses at a 10 s interval (not collected by pytest).

    .venv/bin/python tests/watch_benchmark.py [SECONDS] [--no-record]

Starts the test server and ``sparkrack watch`` (no --once) as child processes, reads the watch
process's user+system CPU time from /proc over SECONDS (default 120) and prints it as a share of
one core, with the machine's load average; writes it with the load before and after as the
record ``docs/dev/measurements/watch-cpu.json`` and rewrites ``docs/dev/measurements.md``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparkrack.bench import measurements  # noqa: E402
from sparkrack.bench.server import spawn  # noqa: E402


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--no-record"]
    seconds = float(args[0]) if args else 120.0
    before = measurements.load_now()
    with spawn(["--rate", "100"]) as url:
        cmd = [sys.executable, "-m", "sparkrack", "watch", "--url", url, "--interval", "10"]
        proc = subprocess.Popen([*cmd, "--metrics-port", "0"], stdout=subprocess.DEVNULL)
        try:
            time.sleep(5)  # imports and the first probe
            start = cpu_seconds(proc.pid)
            time.sleep(seconds)
            used = cpu_seconds(proc.pid) - start
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print(
        f"watch at a 10 s interval: {used:.2f} s CPU in {seconds:g} s = "
        f"{100 * used / seconds:.2f} % of a core (load average {measurements.load_now().text()})"
    )
    if "--no-record" not in sys.argv[1:]:
        record = measurements.measured(
            "tests/watch_benchmark.py",
            "The watchdog",
            f".venv/bin/python tests/watch_benchmark.py {seconds:g}",
            before,
            ["what", "over", "CPU", "share of a core"],
            [
                [
                    "`sparkrack watch` at a 10 s interval against the test server (after its "
                    "imports and first probe)",
                    f"{seconds:g} s",
                    f"{used:.2f} s",
                    f"{100 * used / seconds:.2f} %",
                ]
            ],
        )
        print(f"record: {measurements.write(record, 'watch-cpu')}")


if __name__ == "__main__":
    main()
