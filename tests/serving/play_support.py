"""What the tests of the serve role's task files (test_manifest_tasks.py, test_wait_tasks.py)
share: one task file included by a play that the real ``ansible-playbook`` runs against a real
API server (``kube_api``), and the pods (on :data:`UNSERVED_NODE`, which no kubelet or KWOK serves),
container statuses and Jobs they stage there."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from kubernetes import client

from sparkrack.inputs.variable_table import contract_fact

if TYPE_CHECKING:
    from conftest import Playbook

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles" / "serving" / "tasks"
IMAGE = "registry.example.com/sparkrack/fetch:1.0"
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The namespace's Pod Security level (restricted) asks for this of every container."""
UNSERVED_NODE = "unserved-node"
"""A Node that exists, so the control plane's pod garbage collector keeps the pods bound to it
(it deletes pods bound to a node that does not exist), and that carries no KWOK label, so no
stand-in kubelet rewrites their status. Its taints (never heartbeating, it turns unreachable) are
tolerated by every staged pod."""


@pytest.fixture
def unserved_node(kube_api: Any) -> Iterator[str]:
    """:data:`UNSERVED_NODE` for the length of one test."""
    core = client.CoreV1Api(kube_api.client())
    with contextlib.suppress(client.ApiException):
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": UNSERVED_NODE}})
    try:
        yield UNSERVED_NODE
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_node(UNSERVED_NODE)


def container(name: str) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "securityContext": RESTRICTED}


def pod(
    name: str,
    labels: dict[str, str] | None = None,
    containers: tuple[str, ...] = ("c",),
    init: tuple[str, ...] = (),
    restart_policy: str | None = None,
) -> dict[str, Any]:
    """A pod bound to :data:`UNSERVED_NODE` with restricted containers named ``containers`` and
    init containers ``init``."""
    spec: dict[str, Any] = {"nodeName": UNSERVED_NODE, "tolerations": [{"operator": "Exists"}]}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    if init:
        spec["initContainers"] = [container(c) for c in init]
    spec["containers"] = [container(c) for c in containers]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def container_status(name: str, state: dict[str, Any], ready: bool = False) -> dict[str, Any]:
    """One container's status, as the kubelet writes it."""
    return {
        "name": name,
        "image": IMAGE,
        "imageID": "",
        "ready": ready,
        "restartCount": 0,
        "state": state,
    }


def suspended_job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Job that makes no pod of its own (suspended): the test stages its pods."""
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "suspend": True,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container("c")]}},
        },
    }


def run_tasks(
    ansible_playbook: Playbook,
    kube_api: Any,
    tmp_path: Path,
    namespace: str,
    tasks: str,
    task_vars: dict[str, Any],
) -> tuple[int, str]:
    """``roles/serving/tasks/<tasks>`` included with ``task_vars`` by a play on localhost that
    holds what the serve play gives it (the contract fact, the kubeconfig, the namespace): its
    return code and output."""
    play = {
        "name": f"The serve play's {tasks}",
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {
            "sparkrack_contract": contract_fact(),
            "serving_kubeconfig": str(kube_api.kubeconfig),
            "serving_namespace": namespace,
        },
        "tasks": [
            {
                "name": "Include",
                "ansible.builtin.include_tasks": str(TASKS / tasks),
                "vars": task_vars,
            }
        ],
    }
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    done = ansible_playbook(str(path), env={"HOME": str(tmp_path)}, timeout=120)
    return done.returncode, done.stdout + done.stderr
