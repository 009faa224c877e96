"""What ``sparkrack status`` says about a deployment that is not serving, and about a watchdog that
is not watching.

A deployment with no rank Ready is "NOT SERVING", never "routed" (its API Service is routable, but
the gateway reaches no engine). Whether its watchdog watches is read from the watchdog's
Deployment (a Ready pod), not assumed from its state ConfigMap: a watchdog that was deployed and is
not running, or that runs and has given no verdict yet, says so. The views are built in the shape
the API answers with (``Cluster.view``); tests/watch/test_watch_cluster.py runs status against a
real control plane.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sparkrack import contract
from sparkrack.cli.status import code, row, show
from sparkrack.watch.cluster import DeploymentView

RANKS = 4


def pod(ready: bool) -> SimpleNamespace:
    status = "True" if ready else "False"
    return SimpleNamespace(
        metadata=SimpleNamespace(deletion_timestamp=None),
        status=SimpleNamespace(
            conditions=[SimpleNamespace(type="Ready", status=status)], container_statuses=[]
        ),
    )


def view(
    ready: int,
    watchdog_pods: int | None,
    state: str | None = None,
    quarantined: bool = False,
) -> DeploymentView:
    """A 4-rank deployment with ``ready`` ranks Ready; its watchdog Deployment with
    ``watchdog_pods`` Ready pods (None: no watchdog Deployment); ``state`` in its ConfigMap."""
    sets = [SimpleNamespace(metadata=SimpleNamespace(annotations={})) for _ in range(RANKS)]
    pods = [pod(r < ready) for r in range(RANKS)]
    selector = {"app": "x", **({contract.LABEL_QUARANTINE: "true"} if quarantined else {})}
    service = SimpleNamespace(spec=SimpleNamespace(selector=selector))
    notes = {contract.WATCHDOG_STATE_ANNOTATION: state} if state else {}
    config_map = SimpleNamespace(metadata=SimpleNamespace(annotations=notes))
    watchdog = (
        None
        if watchdog_pods is None
        else SimpleNamespace(status=SimpleNamespace(ready_replicas=watchdog_pods or None))
    )
    return DeploymentView("ultra", sets, pods, service, config_map, watchdog)


def text(r: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    show([r], as_json=False)
    return capsys.readouterr().out


def test_no_rank_ready_is_not_serving_and_a_stopped_watchdog_is_not_watching(
    capsys: pytest.CaptureFixture[str],
) -> None:
    r = row(view(ready=0, watchdog_pods=0), None)
    out = text(r, capsys)
    assert out.splitlines()[0] == (
        "ultra: watchdog not running, ranks 0/4 ready, 0 watchdog restarts, 0 container "
        "restarts, NOT SERVING (0/4 ranks ready)"
    )
    assert "routed" not in out and "unwatched" not in out
    assert (r["serving"], r["routed"], r["ok"], code([r])) == (False, True, False, 1)


def test_negative_control_every_rank_ready_and_a_running_healthy_watchdog_serves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    r = row(view(ready=RANKS, watchdog_pods=1, state="healthy"), None)
    assert text(r, capsys).splitlines()[0].endswith("restarts, serving")
    assert (r["watchdog"], r["serving"], r["ok"], code([r])) == ("healthy", True, True, 0)


@pytest.mark.parametrize("ready", [0, 3])
def test_a_group_short_of_a_rank_does_not_serve(ready: int) -> None:
    r = row(view(ready=ready, watchdog_pods=1, state="healthy"), None)
    assert (r["ranks_ready"], r["serving"], r["ok"]) == (f"{ready}/4", False, False)


@pytest.mark.parametrize(
    ("watchdog_pods", "state", "shown", "ok"),
    [
        # Deployed, its pod not Ready: its last state is history, not a watch.
        (0, "healthy", "watchdog not running (last state: healthy)", False),
        (0, None, "watchdog not running", False),
        # Running, no probe answered yet.
        (1, None, "watchdog running, no verdict yet", True),
        (1, "stalled", "stalled", False),
        # No watchdog Deployment: none, or one run by hand that wrote its state.
        (None, None, "no watchdog", True),
        (None, "recovered", "recovered", True),
    ],
)
def test_the_watchdog_is_read_from_its_deployment(
    watchdog_pods: int | None, state: str | None, shown: str, ok: bool
) -> None:
    r = row(view(ready=RANKS, watchdog_pods=watchdog_pods, state=state), None)
    assert (r["watchdog"], r["ok"]) == (shown, ok)


def test_a_quarantined_deployment_is_not_routed(capsys: pytest.CaptureFixture[str]) -> None:
    r = row(view(ready=RANKS, watchdog_pods=1, state="restarting", quarantined=True), None)
    assert "NOT ROUTED (the watchdog took it out of the gateway)" in text(r, capsys)
    assert (r["routed"], r["serving"], r["ok"]) == (False, False, False)
