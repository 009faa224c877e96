"""The watchdog's state machine and restart budget, verdict by verdict (no cluster needed)."""

from __future__ import annotations

from sparkrack import contract
from sparkrack.watch.actions import Actions
from sparkrack.watch.probe import ProbeResult, Verdict
from sparkrack.watch.supervisor import Budget, Supervisor

H, S, E, D = Verdict.HEALTHY, Verdict.STALLED, Verdict.ERRORING, Verdict.DOWN


def run(sup: Supervisor, steps: list[tuple[float, Verdict]]) -> list[tuple[str, bool, bool]]:
    out = []
    for t, verdict in steps:
        d = sup.decide(verdict, t)
        out.append((str(d.state), d.capture, d.restart))
    return out


def test_stall_restarts_once_per_grace_and_recovers() -> None:
    sup = Supervisor(Budget(max_restarts=3, window_s=1000, restart_grace_s=60))
    assert run(sup, [(0, H), (10, S), (20, S), (80, S), (90, H), (100, H)]) == [
        ("healthy", False, False),
        ("restarting", True, True),
        ("restarting", False, False),  # inside the grace: the group is loading
        ("restarting", True, True),  # past the grace and still stalled: again
        ("recovered", False, False),
        ("healthy", False, False),
    ]


def test_budget_spent_means_failed_and_no_restart_until_the_window_passes() -> None:
    sup = Supervisor(Budget(max_restarts=2, window_s=100, restart_grace_s=0))
    steps = [(0, E), (1, S), (2, S), (3, S), (4, H), (150, S)]
    assert run(sup, steps) == [
        ("restarting", True, True),
        ("restarting", True, True),
        ("failed", True, False),
        ("failed", False, False),
        ("recovered", False, False),
        ("restarting", True, True),  # the old restarts left the window
    ]


def test_down_unroutes_and_keeps_one_bundle_per_episode() -> None:
    sup = Supervisor()
    decisions = [sup.decide(v, t) for t, v in [(0, D), (10, D), (20, D), (30, H), (40, D)]]
    assert [d.capture for d in decisions] == [True, False, False, False, True]
    assert [d.restart for d in decisions] == [False] * 5
    assert [d.routable for d in decisions] == [False, False, False, True, False]


class _Recorder:
    """Stands in for the cluster: records the order of the acts and what was annotated."""

    namespace = "n"

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def set_routable(self, name: str, routable: bool) -> bool:
        self.calls.append(("route", str(routable)))
        return True

    def annotate(self, name: str, values: dict[str, str | None]) -> None:
        restarts = values[contract.WATCHDOG_RESTARTS_ANNOTATION] or ""
        self.calls.append(("annotate", str(values[contract.WATCHDOG_STATE_ANNOTATION]), restarts))

    def restart_group(self, name: str) -> list[str]:
        self.calls.append(("restart",))
        return ["alpha-r0-0"]


def test_a_restart_is_annotated_before_the_group_is_deleted() -> None:
    """The state and the restart count reach the API before the pods go: whoever sees the new
    pods sees ``restarting``, and a watchdog that dies mid-restart keeps its budget."""
    cluster = _Recorder()
    actions = Actions("alpha", "", cluster, supervisor=Supervisor(Budget(2, 600, 0)))  # type: ignore[arg-type]
    stalled = ProbeResult(Verdict.STALLED, "stalled after 3 tokens", "")
    actions.apply(stalled, now=1_800_000_000)
    assert cluster.calls == [
        ("route", "False"),
        ("annotate", "restarting", "1800000000"),
        ("restart",),
    ]
    # Negative control: a healthy verdict annotates and restarts nothing.
    cluster.calls.clear()
    actions.apply(ProbeResult(Verdict.HEALTHY, "ok", ""), now=1_800_000_100)
    assert ("restart",) not in cluster.calls
