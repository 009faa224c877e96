"""MTP / speculative-decoding acceptance length and generated tokens, scraped from the engine.

Which metric or log line carries them is each engine's knowledge (``Engine.recorded``,
``Engine.log_accept_length``); this module reads them:

* the Prometheus endpoint ``/metrics``: the gauge an engine reports its acceptance length in
  (one series per TP/DP rank; the acceptance length of the last logging window), so the bench
  samples it while a level runs and reports the median of the samples;
* the server's log, given with ``--logs-from FILE`` (or ``-`` for stdin, e.g. ``kubectl logs -f
  POD | sparkrack bench --logs-from - ...``). Lines are timestamped on arrival and assigned to
  the level that was running when they arrived.
"""

from __future__ import annotations

import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from sparkrack.serving.engines import ENGINES
from sparkrack.serving.engines.facts import Quantity

# The engines' generated-token counters, as Prometheus stores them.
GENERATED_SERIES: tuple[str, ...] = tuple(
    series
    for eng in ENGINES.values()
    if (metric := eng.metric(Quantity.GENERATED)) is not None
    for series in metric.series()
)
ACCEPT_GAUGES: tuple[str, ...] = tuple(
    metric.name
    for eng in ENGINES.values()
    if (metric := eng.metric(Quantity.ACCEPT_LENGTH)) is not None and metric.kind == "gauge"
)
"""The gauges engines report their acceptance length in."""
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)", re.MULTILINE)


def parse_metrics(text: str) -> float | None:
    """Mean of an engine's acceptance-length gauge over all its series; None when absent or all
    0 (the first engine whose gauge has a positive value wins)."""
    for gauge in ACCEPT_GAUGES:
        values: list[float] = []
        for match in _SAMPLE.finditer(text):
            if match.group(1) != gauge:
                continue
            try:
                value = float(match.group(2))
            except ValueError:
                continue
            if value > 0:
                values.append(value)
        if values:
            return statistics.fmean(values)
    return None


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
    """The acceptance length one server log line reports (None for idle or other lines)."""
    for eng in ENGINES.values():
        value = eng.log_accept_length(line)
        if value is not None:
            return value
    return None


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
