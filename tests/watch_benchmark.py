"""Benchmark: CPU the watchdog's loop uses at a 10 s interval (not collected by pytest).

    PYTHONPATH=. python tests/watch_benchmark.py [SECONDS]

Starts the test server and ``sparkrack watch`` (no --once) as child processes, reads the watch
process's user+system CPU time from /proc over SECONDS (default 120) and prints it as a share of
one core, with the machine's load average.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from sparkrack.bench.server import spawn


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
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
        f"{100 * used / seconds:.2f} % of a core (load average {os.getloadavg()[0]:.2f})"
    )


if __name__ == "__main__":
    main()
