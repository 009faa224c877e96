"""The serve play's wait (``roles/serving/tasks/wait.yml``) run by the real ``ansible-playbook``
against a real API server (``kube_api``): a rank whose image cannot be pulled and a Job whose pod
cannot pull end the wait at once, naming the object and the reason, long before its time limit;
a Ready rank passes (the negative control).

The pods are bound to a node that no kubelet or KWOK serves (play_support.UNSERVED_NODE); their
status is written through the status subresource as a kubelet would write it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client
from play_support import (  # noqa: F401
    container_status,
    pod,
    run_tasks,
    suspended_job,
    unserved_node,
)

if TYPE_CHECKING:
    from conftest import Playbook


def status(waiting: str | None, ready: bool = False) -> dict[str, Any]:
    state = (
        {"waiting": {"reason": waiting, "message": "Back-off pulling image"}}
        if waiting
        else {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    )
    return {
        "status": {
            "phase": "Running" if ready else "Pending",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [container_status("c", state, ready)],
        }
    }


def run_wait(
    ansible_playbook: Playbook,
    kube_api: Any,
    tmp_path: Path,
    namespace: str,
    kind: str,
    names: list[str],
) -> tuple[int, str]:
    wait = {
        "serving_wait_what": f"the test's {kind}s",
        "serving_wait_kind": kind,
        "serving_wait_names": names,
        "serving_wait_timeout": 600,
        "serving_wait_sleep": 1,
    }
    return run_tasks(ansible_playbook, kube_api, tmp_path, namespace, "wait.yml", wait)


@pytest.mark.usefixtures("unserved_node")
def test_a_rank_that_cannot_pull_ends_the_wait_naming_it(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path
) -> None:
    namespace = kube_api.namespace("wait")
    core = client.CoreV1Api(kube_api.client())
    core.create_namespaced_pod(namespace, pod("rank-0"))
    core.patch_namespaced_pod_status("rank-0", namespace, status("ImagePullBackOff"))
    code, out = run_wait(ansible_playbook, kube_api, tmp_path, namespace, "Pod", ["rank-0"])
    assert code != 0, out
    assert (
        "Pod/rank-0: pod rank-0 on unserved-node: container c: ImagePullBackOff for image " in out
    )
    assert "still waiting" not in out


@pytest.mark.usefixtures("unserved_node")
def test_a_job_whose_pod_cannot_pull_ends_the_wait_naming_the_job(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path
) -> None:
    namespace = kube_api.namespace("wait")
    api = kube_api.client()
    client.BatchV1Api(api).create_namespaced_job(namespace, suspended_job("fetch"))
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod("fetch-abcde", {"job-name": "fetch"}))
    core.patch_namespaced_pod_status("fetch-abcde", namespace, status("ErrImagePull"))
    code, out = run_wait(ansible_playbook, kube_api, tmp_path, namespace, "Job", ["fetch"])
    assert code != 0, out
    assert "Job/fetch: pod fetch-abcde on unserved-node: container c: ErrImagePull" in out


@pytest.mark.usefixtures("unserved_node")
def test_a_ready_rank_passes_the_wait(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path
) -> None:
    """Negative control: the same wait on a Ready rank succeeds."""
    namespace = kube_api.namespace("wait")
    core = client.CoreV1Api(kube_api.client())
    core.create_namespaced_pod(namespace, pod("rank-0"))
    core.patch_namespaced_pod_status("rank-0", namespace, status(None, ready=True))
    code, out = run_wait(ansible_playbook, kube_api, tmp_path, namespace, "Pod", ["rank-0"])
    assert code == 0, out


@pytest.mark.usefixtures("unserved_node")
def test_status_lists_a_deployments_fetch_jobs_with_their_state(kube_api: Any) -> None:
    """``sparkrack status``'s Job lines come from the same verdicts: a copy Job whose pod cannot
    pull shows FAILED with the reason; a running one shows its pods and how long it runs."""
    from sparkrack.contract import COMPONENT_FETCH, LABEL_COMPONENT, LABEL_DEPLOYMENT
    from sparkrack.watch.cluster import Cluster

    namespace = kube_api.namespace("status")
    api = kube_api.client()
    labels = {LABEL_DEPLOYMENT: "super", LABEL_COMPONENT: COMPONENT_FETCH}
    for name in ("sparkrack-super-fetch", "sparkrack-super-recv-2"):
        client.BatchV1Api(api).create_namespaced_job(namespace, suspended_job(name, labels))
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod("recv-abcde", {"job-name": "sparkrack-super-recv-2"}))
    core.patch_namespaced_pod_status("recv-abcde", namespace, status("ImagePullBackOff"))
    jobs = Cluster(api, namespace).fetch_jobs("super")
    assert [j["job"] for j in jobs] == ["sparkrack-super-fetch", "sparkrack-super-recv-2"]
    fetch, recv = jobs
    assert fetch["state"] == "running" and fetch["progress"].startswith("0 active, 0 succeeded")
    assert recv["state"] == "FAILED"
    assert "ImagePullBackOff for image registry.example.com/sparkrack/fetch:1.0" in recv["progress"]
    assert Cluster(api, namespace).fetch_jobs("other") == []
