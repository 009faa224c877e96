"""The watchdog's verdicts as Prometheus metrics (text exposition format 0.0.4).

``sparkrack_watch_verdict{target,verdict}`` is 1 for the last probe's verdict and 0 for the
others (every verdict is always present, so an alert can ask for ``== 1`` without absent()).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sparkrack.watch.probe import ProbeResult, Verdict

PREFIX = "sparkrack_watch"
STATES = ("watching", "healthy", "stalled", "restarting", "recovered", "failed")
"""``watching``: no actions configured (probe only); the others are the supervisor's states."""


@dataclass
class Series:
    """What the watchdog has seen of one target since it started."""

    last: ProbeResult | None = None
    probes: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    """Probes per bad verdict."""
    restarts: int = 0
    state: str = "watching"

    def record(self, result: ProbeResult) -> None:
        self.last = result
        self.probes += 1
        if result.verdict is not Verdict.HEALTHY:
            self.bad[str(result.verdict)] = self.bad.get(str(result.verdict), 0) + 1


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(series: dict[str, Series]) -> str:
    """All targets' series, with HELP and TYPE once per metric."""
    out = [
        f"# HELP {PREFIX}_verdict 1 for the last probe's verdict of the target, 0 for the others.",
        f"# TYPE {PREFIX}_verdict gauge",
    ]
    for target, s in series.items():
        now = str(s.last.verdict) if s.last else ""
        for v in Verdict:
            out.append(
                f'{PREFIX}_verdict{{target="{_label(target)}",verdict="{v}"}} {int(now == v)}'
            )
    out += [
        f"# HELP {PREFIX}_state 1 for the watchdog's state of the target (see watch.supervisor).",
        f"# TYPE {PREFIX}_state gauge",
    ]
    for target, s in series.items():
        for state in STATES:
            out.append(
                f'{PREFIX}_state{{target="{_label(target)}",state="{state}"}} {int(s.state == state)}'
            )
    scalars: list[tuple[str, str, str, Callable[[Series], float]]] = [
        ("probes_total", "counter", "Probes made.", lambda s: s.probes),
        ("restarts_total", "counter", "Group restarts the watchdog made.", lambda s: s.restarts),
        (
            "last_probe_timestamp_seconds",
            "gauge",
            "Unix time the last probe started.",
            lambda s: s.last.started if s.last else 0,
        ),
        (
            "probe_duration_seconds",
            "gauge",
            "How long the last probe took.",
            lambda s: s.last.elapsed_s if s.last else 0,
        ),
        (
            "probe_tokens",
            "gauge",
            "Tokens the last probe received.",
            lambda s: s.last.tokens if s.last else 0,
        ),
    ]
    for name, kind, text, value in scalars:
        out += [f"# HELP {PREFIX}_{name} {text}", f"# TYPE {PREFIX}_{name} {kind}"]
        for target, s in series.items():
            out.append(f'{PREFIX}_{name}{{target="{_label(target)}"}} {value(s):g}')
    out += [
        f"# HELP {PREFIX}_bad_probes_total Probes per bad verdict.",
        f"# TYPE {PREFIX}_bad_probes_total counter",
    ]
    for target, s in series.items():
        for v in Verdict:
            if v is not Verdict.HEALTHY:
                out.append(
                    f'{PREFIX}_bad_probes_total{{target="{_label(target)}",verdict="{v}"}} '
                    f"{s.bad.get(str(v), 0)}"
                )
    return "\n".join(out) + "\n"
