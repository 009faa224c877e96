"""The serve play's switch timeline (sparkrack.serving.switch.timeline, through the adapter's
``sparkrack_switch_timeline`` filter): the API's times for what the play waited on, the fetch
step's phase records from the containers' termination messages, and "not measured" - never a
number - where a pod left no record (a KWOK pod runs no container)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sparkrack import contract
from sparkrack.adapters.ansible import FILTERS
from sparkrack.serving.scripts import fetch_base
from sparkrack.serving.switch import plan as fetchplan
from sparkrack.serving.switch.timeline import NOT_MEASURED, rows

ROOT = Path(__file__).resolve().parents[3]
STARTED = "2026-11-24T02:00:00Z"
DEPLOYMENT = {
    "name": "gemma",
    "fetch_job": "sparkrack-gemma-fetch",
    "receiver_jobs": ["sparkrack-gemma-recv-spark2"],
    "copy_to": ["10.10.0.2"],
    "pods": ["sparkrack-gemma-r0-0", "sparkrack-gemma-r1-0"],
    "predicted": [
        {"phase": "pre-pull", "seconds": None, "how": "-"},
        {"phase": "download", "seconds": 500.0, "how": "-"},
        {"phase": "verify", "seconds": 20.0, "how": "-"},
        {"phase": "copy rail 0", "seconds": 45.0, "how": "-"},
        {"phase": "peer-verify", "seconds": 22.0, "how": "-"},
        {"phase": "wait-memory", "seconds": 0.0, "how": "-"},
        {"phase": "engine load", "seconds": 10.0, "how": "-"},
    ],
}


def record(phase: str, seconds: float, **extra: object) -> str:
    body = {"phase": phase, "seconds": seconds, **extra}
    return f"{fetch_base.PHASE_TAG} {json.dumps(body)}\n"


def job(name: str, start: str, end: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"startTime": start, "completionTime": end}}


def terminated(name: str, message: str | None) -> dict[str, Any]:
    state: dict[str, Any] = {"exitCode": 0, "reason": "Completed"}
    if message is not None:
        state["message"] = message
    return {"name": name, "state": {"terminated": state}}


def fetch_pod(download: str | None, push: str | None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "sparkrack-gemma-fetch-x1",
            "labels": {"batch.kubernetes.io/job-name": "sparkrack-gemma-fetch"},
            "creationTimestamp": "2026-11-24T02:00:05Z",
        },
        "status": {
            "initContainerStatuses": [terminated("download", download)],
            "containerStatuses": [terminated("push", push)],
        },
    }


def rank_pod(name: str, memwait: str | None, running: str, ready: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "initContainerStatuses": [
                terminated("wait-weights", record("wait-weights", 0.4) if memwait else None),
                terminated("wait-memory", memwait),
            ],
            "containerStatuses": [{"name": "engine", "state": {"running": {"startedAt": running}}}],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready}],
        },
    }


JOBS = [
    job("sparkrack-prepull-spark1", "2026-11-24T02:00:01Z", "2026-11-24T02:01:01Z"),
    job("sparkrack-gemma-fetch", "2026-11-24T02:01:05Z", "2026-11-24T02:10:05Z"),
]


def measured_pods(memwait: str | None = None) -> list[dict[str, Any]]:
    download = record("download", 480.5, bytes=62_000_000_000) + record(
        "verify", 21.25, bytes=62_000_000_000
    )
    push = record("copy", 40.0, bytes=62_100_000_000, peer="10.10.0.2", rail=0) + record(
        "peer-verify", 23.5, peer="10.10.0.2"
    )
    return [
        fetch_pod(download, push),
        rank_pod(
            "sparkrack-gemma-r0-0",
            memwait or record("wait-memory", 3.5),
            "2026-11-24T02:10:10Z",
            "2026-11-24T02:12:10Z",
        ),
        rank_pod(
            "sparkrack-gemma-r1-0",
            record("wait-memory", 1.0),
            "2026-11-24T02:10:10Z",
            "2026-11-24T02:11:40Z",
        ),
    ]


def test_the_timeline_reads_the_api_and_the_pods_records() -> None:
    got = {
        r.phase: r
        for r in rows(DEPLOYMENT, JOBS, measured_pods(), ["sparkrack-prepull-spark1"], STARTED)
    }
    assert list(got) == [
        "pre-pull", "fetch Job", "download", "verify", "copy rail 0", "peer-verify",
        "wait-weights", "wait-memory", "engine load", "ready",
    ]  # fmt: skip
    assert (got["pre-pull"].seconds, got["pre-pull"].source) == (60.0, "API")
    assert got["fetch Job"].seconds == 540.0
    assert (got["download"].seconds, got["download"].nbytes) == (480.5, 62_000_000_000)
    assert (got["download"].source, got["download"].predicted) == ("pod", 500.0)
    assert got["verify"].seconds == 21.25
    copy = got["copy rail 0"]
    assert (copy.where, copy.seconds, copy.predicted) == ("10.10.0.2", 40.0, 45.0)
    checked = got["peer-verify"]
    assert (checked.where, checked.seconds, checked.predicted) == ("10.10.0.2", 23.5, 22.0)
    assert got["wait-memory"].seconds == 3.5 and "r0-0" in got["wait-memory"].where
    assert got["engine load"].seconds == 120.0  # the slower rank: 02:10:10 -> 02:12:10
    assert got["ready"].seconds == 730.0  # the play's start -> the last rank Ready
    assert got["ready"].predicted == 597.0  # the sum of the predicted phases
    lines = FILTERS["sparkrack_switch_timeline"](
        [DEPLOYMENT], JOBS, measured_pods(), ["sparkrack-prepull-spark1"], STARTED
    )
    assert lines[0] == "switch timeline of gemma:"
    assert re.search(
        r"copy rail 0 +40\.0 s +45\.0 s  pod +10\.10\.0\.2; 62\.10 GB; 1552 MB/s", "\n".join(lines)
    )


def test_kwok_pods_leave_no_record_and_the_timeline_says_not_measured() -> None:
    # What the lab's API returns: Jobs completed and pods Succeeded/Ready, no container ran.
    pods = [
        fetch_pod(None, None),
        rank_pod("sparkrack-gemma-r0-0", None, "2026-11-24T02:10:10Z", "2026-11-24T02:10:10Z"),
        rank_pod("sparkrack-gemma-r1-0", None, "2026-11-24T02:10:10Z", "2026-11-24T02:10:11Z"),
    ]
    got = {r.phase: r for r in rows(DEPLOYMENT, JOBS, pods, [], STARTED)}
    for phase in ("download", "verify", "copy", "peer-verify", "wait-weights", "wait-memory"):
        assert got[phase].seconds is None and got[phase].note.startswith(NOT_MEASURED), phase
        assert got[phase].nbytes is None
    assert got["pre-pull"].note == "off (serving_prepull: false)"
    assert got["fetch Job"].seconds == 540.0 and got["fetch Job"].source == "API"
    text = "\n".join(FILTERS["sparkrack_switch_timeline"]([DEPLOYMENT], JOBS, pods, [], STARTED))
    for line in text.splitlines()[2:]:
        phase = line.split()[0]
        if phase in ("download", "verify", "copy", "peer-verify", "wait-weights", "wait-memory"):
            assert f" {NOT_MEASURED} " in line and " GB" not in line, line


def test_a_malformed_record_is_not_measured_and_an_earlier_job_is_said() -> None:
    # Negative control of the record reading: a message with the tag but a wrong shape.
    forged = measured_pods(memwait=f"{fetch_base.PHASE_TAG} " + '{"phase": "wait-memory"}\n')
    forged[2] = rank_pod(
        "sparkrack-gemma-r1-0", "garbage", "2026-11-24T02:10:10Z", "2026-11-24T02:11:40Z"
    )
    got = {r.phase: r for r in rows(DEPLOYMENT, JOBS, forged, [], STARTED)}
    assert got["wait-memory"].seconds is None
    later = "2026-11-24T02:05:00Z"  # the fetch Job ran before this play's switch began
    again = {r.phase: r for r in rows(DEPLOYMENT, JOBS, measured_pods(), [], later)}
    assert again["fetch Job"].note == "unchanged: ran in an earlier switch"
    no_ready = measured_pods()
    no_ready[1]["status"]["conditions"] = []
    last = {r.phase: r for r in rows(DEPLOYMENT, JOBS, no_ready, [], STARTED)}["ready"]
    assert last.seconds is None and last.note.startswith(NOT_MEASURED)


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or spec
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


def test_every_measuring_container_writes_its_records_where_the_api_reads_them() -> None:
    from sparkrack.serving.deployments.bundle import from_inventory, render_serving

    rendered = render_serving(from_inventory(str(ROOT / "inventories" / "lab")), source="test")
    steps: dict[str, int] = {}
    for obj in rendered["fetch"] + rendered["manifests"]:
        for c in _containers(obj):
            argv = [*(c.get("command") or []), *(c.get("args") or [])]
            if not any(str(a).endswith(fetchplan.SCRIPT_NAME) for a in argv):
                continue
            step = argv[argv.index(str(fetchplan.SCRIPT_PATH)) + 1]
            steps[step] = steps.get(step, 0) + 1
            # The default termination message path and policy: the file is the message.
            assert "terminationMessagePath" not in c and "terminationMessagePolicy" not in c
            if step != "receive":
                assert argv[argv.index("--phases") + 1] == contract.PHASE_FILE
    assert {"download", "push", "receive", "wait", "memwait"} <= set(steps)


def receiver_pod(job_name: str, receive: str | None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job_name}-x1",
            "labels": {"batch.kubernetes.io/job-name": job_name},
            "creationTimestamp": "2026-11-24T02:00:05Z",
        },
        "status": {"containerStatuses": [terminated("receive", receive)]},
    }


def test_a_chain_shows_each_hop_and_the_relay_from_the_api() -> None:
    """Head -> 10.10.0.2 -> 10.10.0.3: the head's push records, the relaying receiver's hop
    (``via``), and the relay: the fetch Job's end (the first peer's verdict) to the last
    receiver Job's end."""
    chain = {
        **DEPLOYMENT,
        "copy_shape": "chain",
        "copy_to": ["10.10.0.2", "10.10.0.3"],
        "receiver_jobs": ["sparkrack-gemma-recv-spark2", "sparkrack-gemma-recv-spark3"],
        "predicted": [*DEPLOYMENT["predicted"], {"phase": "relay", "seconds": 30.0, "how": "-"}],
    }
    jobs = [
        *JOBS,
        job("sparkrack-gemma-recv-spark2", "2026-11-24T02:01:05Z", "2026-11-24T02:10:40Z"),
        job("sparkrack-gemma-recv-spark3", "2026-11-24T02:01:05Z", "2026-11-24T02:10:35Z"),
    ]
    hop = record("copy", 41.0, bytes=62_100_000_000, peer="10.10.0.3", rail=0, via="10.10.0.2")
    hop += record("peer-verify", 24.0, peer="10.10.0.3", via="10.10.0.2")
    pods = [
        *measured_pods(),
        receiver_pod("sparkrack-gemma-recv-spark2", hop),
        receiver_pod("sparkrack-gemma-recv-spark3", None),
    ]
    got = rows(chain, jobs, pods, [], STARTED)
    copies = [(r.where, r.seconds, r.predicted) for r in got if r.phase == "copy rail 0"]
    assert copies == [("10.10.0.2", 40.0, 45.0), ("10.10.0.2 -> 10.10.0.3", 41.0, 45.0)]
    checks = [(r.where, r.seconds) for r in got if r.phase == "peer-verify"]
    assert checks == [("10.10.0.2", 23.5), ("10.10.0.2 -> 10.10.0.3", 24.0)]
    [relay] = [r for r in got if r.phase == "relay"]
    assert (relay.seconds, relay.predicted, relay.source) == (35.0, 30.0, "API")
    assert relay.where == "10.10.0.2 -> 10.10.0.3"
    # ready's prediction: every phase once, the copies counted once.
    assert [r for r in got if r.phase == "ready"][0].predicted == 627.0
    # A receiver Job not completed (or with no status yet): the relay is not measured, never a
    # number.
    fresh = {"metadata": {"name": "sparkrack-gemma-recv-spark3"}, "status": None}
    running = [*JOBS, job("sparkrack-gemma-recv-spark2", "2026-11-24T02:01:05Z", ""), fresh]
    [late] = [r for r in rows(chain, running, pods, [], STARTED) if r.phase == "relay"]
    assert late.seconds is None and late.note.startswith(NOT_MEASURED)
    # Negative control: a fan-out ignores the receivers' records and has no relay.
    fan = rows({**chain, "copy_shape": "fan-out"}, jobs, pods, [], STARTED)
    assert [r.where for r in fan if r.phase == "copy rail 0"] == ["10.10.0.2"]
    assert not [r for r in fan if r.phase == "relay"]
