"""Run one command in a forked child under resource limits, and measure it.

The hostile corpora run every entry this way: a hang or a memory blow-up fails the entry, not
the test session, and each entry is measured on its own. The child inherits the warm parent
(every module imported once), so its cost is the entry's alone: its CPU time, and its memory
as the growth of its peak resident set over its resident set right after the fork. ``RLIMIT_AS`` stops the
child at that growth (the limit on new address space), ``RLIMIT_CPU`` at the CPU limit, and
the parent kills it at the wall-clock limit.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Outcome:
    code: int | None
    """The command's exit code; None when it raised (``err`` holds the traceback)."""
    out: str
    err: str
    seconds: float
    cpu_seconds: float
    growth_mb: float
    """The child's peak resident set (``VmHWM``) beyond its resident set right after the fork."""
    killed: str = ""
    """Why the parent or the kernel stopped the child ("" when it finished)."""
    extra: str = ""


def _status_kb(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1])
    return 0


def run_forked(
    command: Callable[[], int],
    workdir: Path,
    *,
    growth_mb: int,
    cpu_seconds: float,
    hang_seconds: float,
    env: Mapping[str, str | None] | None = None,
    collect: Callable[[], str] | None = None,
) -> Outcome:
    """``command()`` in a forked child with stdout/stderr captured; ``env`` is set (None:
    removed) in the child only; ``collect()`` runs in the child afterwards (``extra``)."""
    result = workdir / f"forked-{time.monotonic_ns()}.json"
    address_space = (_status_kb("VmSize") + growth_mb * 1024) * 1024
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the result file
        try:
            start_rss = _status_kb("VmRSS")
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
            limit = int(cpu_seconds) + 2
            resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
            for key, value in (env or {}).items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            out, err = io.StringIO(), io.StringIO()
            start, cpu_start = time.perf_counter(), time.process_time()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code: int | None = int(command())
            except SystemExit as exc:
                code = int(exc.code or 0)
            except BaseException:
                code = None
                err.write(traceback.format_exc())
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            extra = collect() if collect is not None else ""
            growth = (_status_kb("VmHWM") - start_rss) / 1024
            result.write_text(
                json.dumps(
                    {
                        "code": code,
                        "out": out.getvalue(),
                        "err": err.getvalue(),
                        "seconds": seconds,
                        "cpu": cpu,
                        "extra": extra,
                        "growth": growth,
                    }
                )
            )
        finally:
            os._exit(0)
    deadline = time.monotonic() + hang_seconds
    killed = ""
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            killed = f"still running after {hang_seconds:g} s"
            break
        time.sleep(0.005)
    if not killed and os.WIFSIGNALED(status):
        killed = f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    if killed or not result.exists():
        peak = usage.ru_maxrss / 1024
        return Outcome(None, "", "", hang_seconds, usage.ru_utime, peak, killed or "no result")
    data = json.loads(result.read_text())
    return Outcome(
        data["code"],
        data["out"],
        data["err"],
        data["seconds"],
        data["cpu"],
        data["growth"],
        extra=data["extra"],
    )
