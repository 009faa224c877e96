"""MTP / speculative-decoding acceptance length, scraped from SGLang.

Two sources (facts from the SGLang source, not copied):

* the Prometheus endpoint ``/metrics`` (server started with ``--enable-metrics``): gauge
  ``sglang:spec_accept_length`` (one series per TP/DP rank, labels ``model_name``, ``tp_rank``,
  ...).  It is the acceptance length of the scheduler's last logging window, so the bench samples
  it while a level runs and reports the median of the samples;
* the scheduler's decode log line, e.g.
  ``Decode batch. #running-req: 8, #token: 9120, token usage: 0.01, accept len: 2.71,
  accept rate: 0.57, cuda graph: True, gen throughput (token/s): 199.7, #queue-req: 0``
  given with ``--logs-from FILE`` (or ``-`` for stdin, e.g. ``kubectl logs -f POD | sparkrack
  bench --logs-from - ...``).  Lines are timestamped on arrival and assigned to the level that
  was running when they arrived.
"""

from __future__ import annotations

import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from sparkrack.observe.metrics import by_name

# The engines' generated-token counters (sparkrack.observe.metrics holds their source and type).
GENERATED_SERIES: tuple[str, ...] = tuple(
    series
    for name in ("sglang:generation_tokens_total", "vllm:generation_tokens")
    for series in by_name(name).series()
)
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)", re.MULTILINE)
_METRIC_LINE = re.compile(r"^sglang:spec_accept_length(?:\{[^}]*\})?\s+(\S+)", re.MULTILINE)
_LOG_LINE = re.compile(r"accept len:\s*([0-9]+(?:\.[0-9]+)?)")
_RUNNING = re.compile(r"#running-req:\s*(\d+)")


def parse_metrics(text: str) -> float | None:
    """Mean of ``sglang:spec_accept_length`` over all its series; None when absent or all 0."""
    values: list[float] = []
    for match in _METRIC_LINE.finditer(text):
        try:
            value = float(match.group(1))
        except ValueError:
            continue
        if value > 0:
            values.append(value)
    return statistics.fmean(values) if values else None


def generated_tokens(text: str) -> float | None:
    """Sum of the engine's generated-token counter over all its series; None when absent."""
    total, seen = 0.0, False
    for match in _SAMPLE.finditer(text):
        if match.group(1) in GENERATED_SERIES:
            try:
                value = float(match.group(2))
            except ValueError:
                continue
            if value == value and value >= 0:  # NaN and negative counters are not counts
                total += value
                seen = True
    return total if seen else None


def parse_log_line(line: str) -> float | None:
    """The ``accept len`` of one SGLang decode-batch log line (None for idle/other lines)."""
    match = _LOG_LINE.search(line)
    if not match:
        return None
    running = _RUNNING.search(line)
    if running and int(running.group(1)) == 0:
        return None
    return float(match.group(1))


def parse_log_text(text: str) -> list[float]:
    values = (parse_log_line(line) for line in text.splitlines())
    return [v for v in values if v is not None]


class LogFollower:
    """Reads a growing log (file, followed like ``tail -f``, or stdin) in a daemon thread.

    Every ``accept len`` value is stored with the monotonic time it was read, so that values can
    be attributed to the level that was running.  For a file that does not grow during the run
    (a finished log), :meth:`whole_file` gives the mean over the whole file instead.
    """

    def __init__(self, source: str, poll_s: float = 0.2) -> None:
        self.source = source
        self.poll_s = poll_s
        self.samples: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._initial_text = ""
        if source != "-":
            path = Path(source)
            if not path.is_file():
                raise FileNotFoundError(source)
            self._initial_text = path.read_text(encoding="utf-8", errors="replace")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="logs-from", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _record(self, line: str) -> None:
        value = parse_log_line(line)
        if value is not None:
            with self._lock:
                self.samples.append((time.monotonic(), value))

    def _run(self) -> None:
        if self.source == "-":
            self._follow(sys.stdin, stdin=True)
            return
        with open(self.source, encoding="utf-8", errors="replace") as handle:
            handle.seek(0, 2)  # follow from the end, like tail -f
            self._follow(handle, stdin=False)

    def _follow(self, handle: TextIO, stdin: bool) -> None:
        pending = ""
        while not self._stop.is_set():
            chunk = handle.readline()
            if not chunk:
                if stdin:
                    return  # EOF on a pipe
                time.sleep(self.poll_s)
                continue
            pending += chunk
            if pending.endswith("\n"):
                self._record(pending)
                pending = ""

    def between(self, start: float, end: float) -> list[float]:
        with self._lock:
            return [v for t, v in self.samples if start <= t <= end]

    def whole_file(self) -> list[float]:
        return parse_log_text(self._initial_text)
