"""The serve play's carriage of the head's manifest sha256 (``roles/serving/tasks/manifest.yml``)
run by the real ``ansible-playbook`` against a real API server (``kube_api``): the fetch Job's pod
reports through the status a kubelet writes; the play writes the receivers' ConfigMap from the
download container's termination message only (the push container's is ignored), and stops,
naming the Job, when the download reported none.

The pod is bound to a node that no kubelet or KWOK serves (play_support.UNSERVED_NODE); its
status is written through the status subresource as a kubelet would write it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client
from play_support import container_status, pod, run_tasks, unserved_node  # noqa: F401

from sparkrack.contract import FETCH_MANIFEST_KEY

if TYPE_CHECKING:
    from conftest import Playbook

HEAD = "ab" * 32
PUSHER = "cd" * 32
DEPLOYMENT = {
    "name": "super",
    "fetch_job": "sparkrack-super-fetch",
    "manifest_configmap": "sparkrack-super-fetch-manifest",
    "manifest_labels": {"sparkrack.io/deployment": "super"},
}


def head_pod(core: client.CoreV1Api, namespace: str, download_message: str) -> None:
    body = pod(
        "fetch-abcde",
        {"job-name": DEPLOYMENT["fetch_job"]},
        containers=("push",),
        init=("download",),
        restart_policy="Never",
    )
    core.create_namespaced_pod(namespace, body)

    def ended(name: str, message: str) -> dict[str, Any]:
        state = {"terminated": {"exitCode": 0, "reason": "Completed", "message": message}}
        return container_status(name, state)

    core.patch_namespaced_pod_status(
        "fetch-abcde",
        namespace,
        {
            "status": {
                "phase": "Running",
                "initContainerStatuses": [ended("download", download_message)],
                "containerStatuses": [ended("push", f"sparkrack-manifest {PUSHER}\n")],
            }
        },
    )


def run(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path, namespace: str
) -> tuple[int, str]:
    carry = {
        "serving_manifest_deployments": [DEPLOYMENT],
        "serving_manifest_retries": 3,
        "serving_manifest_delay": 1,
    }
    return run_tasks(ansible_playbook, kube_api, tmp_path, namespace, "manifest.yml", carry)


@pytest.mark.usefixtures("unserved_node")
def test_the_downloads_digest_reaches_the_receivers_configmap(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path
) -> None:
    namespace = kube_api.namespace("manifest")
    core = client.CoreV1Api(kube_api.client())
    head_pod(core, namespace, f"sparkrack-manifest {HEAD}\nsparkrack-phase {{}}\n")
    code, out = run(ansible_playbook, kube_api, tmp_path, namespace)
    assert code == 0, out
    cm = core.read_namespaced_config_map(DEPLOYMENT["manifest_configmap"], namespace)
    assert cm.data == {FETCH_MANIFEST_KEY: HEAD}  # the download's, never the pusher's
    assert cm.metadata.labels == DEPLOYMENT["manifest_labels"]


@pytest.mark.usefixtures("unserved_node")
def test_a_download_that_reported_nothing_stops_the_play_naming_the_job(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path
) -> None:
    """Negative control: the same pod without the download's line; the pusher's is ignored."""
    namespace = kube_api.namespace("manifest")
    core = client.CoreV1Api(kube_api.client())
    head_pod(core, namespace, "sparkrack-phase {}\n")
    code, out = run(ansible_playbook, kube_api, tmp_path, namespace)
    assert code != 0, out
    assert "the download container of sparkrack-super-fetch ended without reporting" in out
    names = [c.metadata.name for c in core.list_namespaced_config_map(namespace).items]
    assert DEPLOYMENT["manifest_configmap"] not in names


KWOK_DIGEST = "6b776f6b" * 8
"""What the lab's KWOK stage reports for a ``download`` init container (lab/kwok/stages.yaml):
no container runs on a KWOK node, so a fixed stand-in."""


def test_the_lab_kwok_download_reports_a_digest_the_filter_reads(kube_api: Any) -> None:
    """The lab's stand-in kubelet (KWOK, lab/kwok/stages.yaml) gives a fetch Job's ``download``
    init container a termination message with a digest, so the serve play's carriage runs in the
    lab; another init container ends without one (negative control)."""
    from kube_api import controlplane_module

    from sparkrack.serving.switch.digest import head_manifest

    cp = controlplane_module()

    api = kube_api.client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    node = {
        "metadata": {
            "name": "manifest-test-node",
            "labels": {cp.MANAGED_NODES: "spark", "kubernetes.io/hostname": "manifest-test-node"},
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "10"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"},
        },
    }
    core.create_node(node)
    ns = kube_api.namespace("manifest", {"pod-security.kubernetes.io/enforce": "baseline"})
    try:
        for name, init in (("sparkrack-super-fetch", "download"), ("other", "prepare")):
            spec = {
                "restartPolicy": "Never",
                "initContainers": [{"name": init, "image": "x.invalid/y:1"}],
                "containers": [{"name": "push", "image": "x.invalid/y:1"}],
                "nodeSelector": {"kubernetes.io/hostname": "manifest-test-node"},
            }
            batch.create_namespaced_job(
                ns, {"metadata": {"name": name}, "spec": {"template": {"spec": spec}}}
            )
        deadline = time.monotonic() + 60
        pods: list[Any] = []
        while time.monotonic() < deadline:
            pods = [
                api.sanitize_for_serialization(p)
                for p in core.list_namespaced_pod(ns).items
                if p.status.init_container_statuses
            ]
            if len(pods) == 2:
                break
            time.sleep(0.5)
        assert len(pods) == 2, "the KWOK stage did not start the pods"
        got = head_manifest(DEPLOYMENT, pods, ns)
        assert got["state"] == "done", got
        assert got["configmap"]["data"] == {FETCH_MANIFEST_KEY: KWOK_DIGEST}
        other = next(p for p in pods if p["metadata"]["labels"]["job-name"] == "other")
        ended = other["status"]["initContainerStatuses"][0]["state"]["terminated"]
        assert ended["exitCode"] == 0 and not ended.get("message")
    finally:
        core.delete_node("manifest-test-node")
