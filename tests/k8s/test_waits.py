"""The serve play's waits end early on a failure waiting will not cure, naming object and reason.

The objects are status objects as the API server returns them (``k8s_info`` resources): a Job
whose pod cannot pull its image, one whose pod crashes in a loop, a failed Job, a rank stuck on
a config error; and, as negative controls, the same objects while they are only slow.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack.k8s.waits import verdict


def job(name: str = "fetch-super", **status: Any) -> dict[str, Any]:
    return {"kind": "Job", "metadata": {"name": name}, "status": status}


def pod(
    name: str = "fetch-super-abcde",
    *,
    waiting: str | None = None,
    message: str = "",
    ready: bool = False,
    phase: str = "Pending",
    owned: bool = True,
    last_exit: int | None = None,
) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {}}
    if waiting:
        state = {"waiting": {"reason": waiting, "message": message}}
    container: dict[str, Any] = {
        "name": "fetch",
        "image": "registry.example.com/sparkrack/fetch:1.0",
        "state": state,
        "restartCount": 7,
    }
    if last_exit is not None:
        container["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error"}}
    meta: dict[str, Any] = {"name": name}
    if owned:
        meta["ownerReferences"] = [{"kind": "Job", "name": "fetch-super"}]
    return {
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": "spark1"},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [container],
        },
    }


FAILED_JOB = job(
    conditions=[
        {
            "type": "Failed",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        }
    ],
    failed=3,
)


def test_a_job_whose_pod_cannot_pull_fails_at_once_naming_the_image() -> None:
    found = verdict(
        [job(active=1)], [pod(waiting="ImagePullBackOff", message="Back-off pulling image")]
    )
    assert found == {
        "state": "failed",
        "object": "Job/fetch-super",
        "reason": "pod fetch-super-abcde on spark1: container fetch: ImagePullBackOff for image "
        "registry.example.com/sparkrack/fetch:1.0: Back-off pulling image",
    }


@pytest.mark.parametrize(
    "reason", ["ErrImagePull", "InvalidImageName", "CreateContainerConfigError"]
)
def test_every_start_failure_fails_the_wait(reason: str) -> None:
    found = verdict([job(active=1)], [pod(waiting=reason)])
    assert found["state"] == "failed" and reason in found["reason"]


def test_a_crash_loop_fails_the_wait_with_its_exit_code() -> None:
    found = verdict([job(active=1)], [pod(waiting="CrashLoopBackOff", last_exit=23)])
    assert found["state"] == "failed"
    assert "CrashLoopBackOff after 7 restarts, last exit code 23 (Error)" in found["reason"]


def test_a_failed_job_fails_the_wait_with_its_condition() -> None:
    found = verdict([FAILED_JOB], [])
    assert found == {
        "state": "failed",
        "object": "Job/fetch-super",
        "reason": "Failed: BackoffLimitExceeded Job has reached the specified backoff limit",
    }


def test_a_complete_job_is_done() -> None:
    complete = job(conditions=[{"type": "Complete", "status": "True"}], succeeded=1)
    assert verdict([complete], [pod(waiting="CrashLoopBackOff")])["state"] == "done"


def test_a_slow_job_is_still_waited_for() -> None:
    """Negative control: pulling, running, a container creating: waiting goes on."""
    slow = [pod(waiting="ContainerCreating"), pod(waiting="PodInitializing"), pod()]
    found = verdict([job(active=1, failed=1)], slow)
    assert found == {
        "state": "waiting",
        "object": "Job/fetch-super",
        "reason": "1 active, 0 succeeded, 1 failed pod(s)",
    }
    assert verdict([], [], "Job/fetch-super")["state"] == "waiting"


def test_a_rank_is_done_when_ready_and_fails_on_a_pull_error() -> None:
    assert verdict([pod("super-0", ready=True, phase="Running")])["state"] == "done"
    assert verdict([pod("super-0", phase="Running")])["state"] == "waiting"
    failed = verdict([pod("super-0", waiting="ErrImagePull")])
    assert failed["object"] == "Pod/super-0" and "ErrImagePull" in failed["reason"]


def test_a_bare_failed_pod_fails_an_owned_one_is_waited_for() -> None:
    assert verdict([pod("p", phase="Failed", owned=False)])["state"] == "failed"
    assert verdict([pod("p", phase="Failed", owned=True)])["state"] == "waiting"


def test_a_gateway_whose_pod_crashes_fails_the_wait() -> None:
    gateway = {"kind": "Deployment", "metadata": {"name": "gateway"}, "status": {}}
    found = verdict([gateway], [pod("gateway-1", waiting="CrashLoopBackOff", last_exit=1)])
    assert found["object"] == "Deployment/gateway" and found["state"] == "failed"
    available = {**gateway, "status": {"conditions": [{"type": "Available", "status": "True"}]}}
    assert verdict([available], [])["state"] == "done"


def test_the_serve_play_waits_through_the_filter_and_fails_early() -> None:
    """``sparkrack_wait_verdict`` is the adapter's door to :func:`verdict`, and every wait of the
    serve play on a Job, a rank or the gateway goes through the one wait task file."""
    from pathlib import Path

    from sparkrack.adapters.ansible import FILTERS

    failed = FILTERS["sparkrack_wait_verdict"]([FAILED_JOB], [], "Job/fetch-super")
    assert failed["state"] == "failed" and "BackoffLimitExceeded" in failed["reason"]
    roles = Path(__file__).resolve().parents[2] / "roles" / "serving" / "tasks"
    wait = (roles / "wait.yml").read_text()
    assert "sparkrack_wait_verdict" in wait and "until:" in wait
    text = "".join(p.read_text() for p in roles.rglob("*.yml") if p.name != "wait.yml")
    assert "wait_condition" not in text  # no wait left that only knows success
    assert text.count("include_tasks: wait.yml") == 4
