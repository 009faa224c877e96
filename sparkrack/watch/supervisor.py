"""What the watchdog does about a verdict: the state machine and the restart budget.

States (kept in the annotations of the watchdog's state ConfigMap, see :mod:`.cluster`):

* ``healthy`` — the last probe was healthy and no restart is pending;
* ``stalled`` — a bad verdict (stalled or erroring): evidence first, then out of the gateway's
  routing, then a group restart if the budget allows;
* ``restarting`` — the group was restarted; bad verdicts during ``restart_grace_s`` are the
  group loading, not a new failure;
* ``recovered`` — healthy again after a restart: back into routing;
* ``failed`` — the budget is spent (``max_restarts`` in ``window_s``): no more restarts, the
  deployment stays out of routing until it answers healthy, the alert fires.

``config-error`` (the engine refused the probe's key) changes nothing: the deployment may be
healthy, and only the watchdog's configuration is wrong; its alert says so.

``down`` (nothing listens) takes the deployment out of routing but restarts nothing: pods that
are not running are the kubelet's and the StatefulSet controller's business.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sparkrack.watch.probe import Verdict


class State(enum.StrEnum):
    HEALTHY = "healthy"
    STALLED = "stalled"
    RESTARTING = "restarting"
    RECOVERED = "recovered"
    FAILED = "failed"


RESTART_ON = frozenset({Verdict.STALLED, Verdict.ERRORING})


@dataclass(frozen=True)
class Budget:
    max_restarts: int = 3
    window_s: float = 1800.0
    restart_grace_s: float = 600.0
    """After a restart, bad verdicts are ignored this long (the group loads its weights)."""

    def spent(self, restarts: list[float], now: float) -> bool:
        return sum(1 for t in restarts if now - t < self.window_s) >= self.max_restarts


@dataclass
class Decision:
    state: State
    capture: bool = False
    restart: bool = False
    routable: bool | None = None
    """True/False: put into / take out of routing; None: leave it."""
    message: str = ""


@dataclass
class Supervisor:
    budget: Budget = field(default_factory=Budget)
    state: State = State.HEALTHY
    restarts: list[float] = field(default_factory=list)
    """Unix times of the group restarts (persisted by the caller)."""

    def decide(self, verdict: Verdict, now: float) -> Decision:
        self.restarts = [t for t in self.restarts if now - t < self.budget.window_s]
        if verdict is Verdict.CONFIG:
            return Decision(
                self.state,
                message="the engine refused the watchdog's key: not restarting, routing unchanged",
            )
        if verdict in (Verdict.HEALTHY, Verdict.SLOW):
            if self.state in (State.RESTARTING, State.FAILED, State.STALLED):
                self.state = State.RECOVERED
                return Decision(self.state, routable=True, message="answers again: routed")
            if self.state is State.RECOVERED:
                self.state = State.HEALTHY
            return Decision(self.state, routable=True)
        if (
            self.state is State.RESTARTING
            and self.restarts
            and now - self.restarts[-1] < self.budget.restart_grace_s
        ):
            return Decision(self.state, message="restart in progress")
        if self.state is State.FAILED:
            return Decision(self.state, routable=False)
        if verdict not in RESTART_ON:
            first = self.state is not State.STALLED  # one bundle per episode, not per probe
            self.state = State.STALLED
            return Decision(
                self.state, capture=first, routable=False, message=str(verdict) if first else ""
            )
        if self.budget.spent(self.restarts, now):
            self.state = State.FAILED
            return Decision(
                self.state,
                capture=True,
                routable=False,
                message=(
                    f"restart budget spent ({self.budget.max_restarts} in "
                    f"{self.budget.window_s:g} s): not restarting; deployment failed"
                ),
            )
        self.state = State.RESTARTING
        self.restarts.append(now)
        return Decision(
            self.state,
            capture=True,
            restart=True,
            routable=False,
            message=f"restarting the group ({len(self.restarts)}/{self.budget.max_restarts})",
        )
