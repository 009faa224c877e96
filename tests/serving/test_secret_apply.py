"""Every Secret the serve role writes keeps its value out of annotations and managedFields.

The role's own tasks are found in ``roles/serving/tasks/*.yml`` (every ``kubernetes.core.k8s``
task whose definition is a ``Secret``: the HF token, the gateway master key, the rsync password
and any later one; and every task of a sparkrack module that writes Secrets: the deployments' key
Secrets and their engine-key copies), copied verbatim into a play (only ``when`` and ``failed_when`` dropped, so
each runs and a failure shows) and run by the real ``ansible-playbook`` against a real API
server (``kube_api``). Each Secret is read back; none of its values, plain or base64, may stand
in any annotation or in ``managedFields``.

Negative control: the same tasks as a client-side apply (``apply: true`` without
``server_side_apply``) leave the value in ``kubectl.kubernetes.io/last-applied-configuration``,
and the check finds it.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes import client

from sparkrack.contract import (
    COMPONENT_SERVING,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    PART_OF,
)
from sparkrack.inputs.variable_table import contract_fact

if TYPE_CHECKING:
    from conftest import Playbook

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles" / "serving" / "tasks"
HF_TOKEN = "hf_SENTINEL_secret_apply_31d9e2"
GATEWAY_KEY = "sk-SENTINEL-gateway-8c41f7"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


DEPLOYMENT_KEYS = "sparkrack-d1-keys"
DEPLOYMENT_RSYNC = "sparkrack-fetch-rsync-d1"


def walk(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for task in tasks:
        out += walk(task.get("block", [])) + [task]
    return out


SECRET_MODULES = ("sparkrack_key_secrets",)
"""sparkrack's Ansible modules that write Secrets."""


def secret_tasks() -> list[dict[str, Any]]:
    """The role's tasks that write a Secret, as written in the role."""
    found = []
    for path in sorted(TASKS.glob("*.yml")):
        for task in walk(yaml.safe_load(path.read_text()) or []):
            module = task.get("kubernetes.core.k8s")
            definition = (module or {}).get("definition")
            ours = any(name in task for name in SECRET_MODULES)
            if ours or isinstance(definition, dict) and definition.get("kind") == "Secret":
                task = {k: v for k, v in task.items() if k not in ("when", "failed_when")}
                found.append(task)
    return found


SECRET_LABELS = {
    **PART_OF,
    LABEL_COMPONENT: COMPONENT_SERVING,
    LABEL_DEPLOYMENT: "d1",
}
"""A deployment's Secret labels as the render gives them (its name, no profile)."""


def play(tasks: list[dict[str, Any]], namespace: str, agents: str, kube_api: Any) -> dict[str, Any]:
    return {
        "name": "The serve role's Secret tasks",
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {
            "sparkrack_contract": contract_fact(),
            "serving_kubeconfig": str(kube_api.kubeconfig),
            "serving_namespace": namespace,
            "serving_hf_token_secret": "sparkrack-hf-token",
            "serving_hf_token": HF_TOKEN,
            "serving_gateway_key_secret": "sparkrack-gateway-key",
            "serving_gateway_key": GATEWAY_KEY,
            "serving_fetch_secret": "sparkrack-fetch-rsync",
            # What the looped Secret tasks read: one deployment with receivers and no key
            # Secret yet (their `when`s are dropped, so every Secret task writes).
            "serving_rendered": {
                "contract": contract_fact(),
                "agents_namespace": agents,
                "deployments": [
                    {
                        "name": "d1",
                        "secret_labels": SECRET_LABELS,
                        "key_secret": DEPLOYMENT_KEYS,
                        "fetch_secret": DEPLOYMENT_RSYNC,
                        "fetch_job": "sparkrack-d1-fetch",
                        "receiver_jobs": ["sparkrack-d1-recv-2"],
                    }
                ],
            },
        },
        "tasks": tasks,
    }


def leaks(secret: Any) -> list[str]:
    """Where a value of ``secret`` stands outside its data: ``annotation:<key>`` or
    ``managedFields``."""
    values = [base64.b64decode(v).decode() for v in (secret.data or {}).values()]
    forms = [f for v in values for f in (v, base64.b64encode(v.encode()).decode())]
    forms += [line.split(":", 1)[-1] for v in values for line in v.splitlines() if ":" in line]
    found = []
    for key, text in (secret.metadata.annotations or {}).items():
        if any(f and f in text for f in forms):
            found.append(f"annotation:{key}")
    fields = secret.metadata.managed_fields or []
    managed = json.dumps(client.ApiClient().sanitize_for_serialization(fields))
    if any(f and f in managed for f in forms):
        found.append("managedFields")
    return found


def run(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path, tasks: list[dict[str, Any]]
) -> tuple[str, list[Any]]:
    namespace = kube_api.namespace("secrets")
    agents = kube_api.namespace("secrets-agents")
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([play(tasks, namespace, agents, kube_api)], sort_keys=False))
    proc = ansible_playbook(str(path), env={"HOME": str(tmp_path)})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    api = client.CoreV1Api(kube_api.client())
    return namespace, [
        s for ns in (namespace, agents) for s in api.list_namespaced_secret(ns).items
    ]


def test_the_role_writes_three_secrets_or_more() -> None:
    tasks = secret_tasks()
    names = {
        t["kubernetes.core.k8s"]["definition"]["metadata"]["name"]
        for t in tasks
        if "kubernetes.core.k8s" in t
    }
    assert {
        "{{ serving_hf_token_secret }}",
        "{{ serving_gateway_key_secret }}",
        "{{ item.fetch_secret }}",
    } <= names
    assert [
        t["sparkrack_key_secrets"]["deployments"] for t in tasks if "sparkrack_key_secrets" in t
    ] == ["{{ serving_rendered.deployments }}"]


def test_no_secret_value_in_annotations_or_managed_fields(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path
) -> None:
    _ns, secrets = run(ansible_playbook, kube_api, tmp_path, secret_tasks())
    written = {
        f"{s.metadata.namespace}/{s.metadata.name}": s for s in secrets if s.type == "Opaque"
    }
    assert {name.split("/")[1] for name in written} >= {
        "sparkrack-hf-token",
        "sparkrack-gateway-key",
        DEPLOYMENT_RSYNC,
        DEPLOYMENT_KEYS,
    }
    assert sum(name.endswith(f"/{DEPLOYMENT_KEYS}") for name in written) == 2  # and its copy
    hf = next(s for name, s in written.items() if name.endswith("/sparkrack-hf-token"))
    assert base64.b64decode(hf.data["token"]).decode() == HF_TOKEN
    for name, secret in written.items():
        assert leaks(secret) == [], name
        assert LAST_APPLIED not in (secret.metadata.annotations or {}), name


def test_negative_control_a_client_side_apply_leaks(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path
) -> None:
    tasks = copy.deepcopy(secret_tasks())
    for task in tasks:
        module = task.get("kubernetes.core.k8s")
        if module is None:
            continue
        module.pop("server_side_apply", None)
        module["apply"] = True
    _ns, secrets = run(ansible_playbook, kube_api, tmp_path, tasks)
    written = {s.metadata.name: s for s in secrets if s.type == "Opaque"}
    assert leaks(written["sparkrack-hf-token"]) == [f"annotation:{LAST_APPLIED}"]
    assert leaks(written["sparkrack-gateway-key"]) == [f"annotation:{LAST_APPLIED}"]
