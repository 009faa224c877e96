"""sparkrack_key_secrets, the module that makes each deployment's key Secret once and copies its
engine key beside the gateway, run as Ansible runs a module (arguments in a JSON file) against
the real control plane (``kube_api``).

* a missing key Secret is created with two random keys; one that is there is never replaced;
* the copy holds the engine key alone, under the same name and labels, and a changed copy is
  put back;
* check mode writes nothing; a second run changes nothing;
* no key, plain or base64, stands in what the module returns, in an annotation or in
  ``managedFields``; a Secret without the keys is refused, named, its value unsaid."""

from __future__ import annotations

import base64
import json
import string
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from module_run import run_module

from sparkrack.contract import ADMIN_KEY_KEY, ENGINE_KEY_KEY, FIELD_MANAGER

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "sparkrack" / "adapters" / "modules" / "sparkrack_key_secrets.py"
SENTINEL = "SENTINEL-engine-key-5d0e1c"

pytestmark = pytest.mark.api


def run(tmp_path: Path, check: bool = False, **args: Any) -> tuple[dict[str, Any], str]:
    """The module's result, and everything it wrote to stdout and stderr."""
    return run_module(MODULE, tmp_path, check, **args)


def labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": "sparkrack", "sparkrack.io/deployment": name}


def args(kube_api: Any, here: str, agents: str, *names: str) -> dict[str, Any]:
    deployments = [
        {"name": n, "key_secret": f"sparkrack-{n}-keys", "secret_labels": labels(n), "alias": n}
        for n in names
    ]
    return {
        "kubeconfig": str(kube_api.kubeconfig),
        "namespace": here,
        "copy_namespace": agents,
        "deployments": deployments,
        "engine_key": ENGINE_KEY_KEY,
        "admin_key": ADMIN_KEY_KEY,
        "field_manager": FIELD_MANAGER,
    }


def secret(core: Any, name: str, namespace: str) -> Any | None:
    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as err:
        assert err.status == 404
        return None


def values(found: Any) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (found.data or {}).items()}


def said(text: str, keys: list[str]) -> list[str]:
    """The keys (plain or base64) that stand in ``text``."""
    forms = [f for k in keys for f in (k, base64.b64encode(k.encode()).decode())]
    return [f for f in forms if f in text]


def test_missing_key_secrets_are_made_once_and_the_engine_key_alone_is_copied(
    kube_api: Any, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kube_api.client())
    here, agents = kube_api.namespace("keys"), kube_api.namespace("keys-agents")
    given = args(kube_api, here, agents, "d1", "d2")
    names = [d["key_secret"] for d in given["deployments"]]

    planned, _ = run(tmp_path, check=True, **given)
    assert planned["changed"] is True
    assert planned["created"] == [f"{here}/{n}" for n in names]
    assert planned["copied"] == [f"{agents}/{n}" for n in names]
    assert [secret(core, n, ns) for n in names for ns in (here, agents)] == [None] * 4

    made, output = run(tmp_path, **given)
    assert (made["changed"], made["created"], made["copied"]) == (
        True, planned["created"], planned["copied"]
    )  # fmt: skip
    keys = []
    for d, name in zip(given["deployments"], names, strict=True):
        source, copy = secret(core, name, here), secret(core, name, agents)
        assert source is not None and copy is not None
        held = values(source)
        assert sorted(held) == sorted([ENGINE_KEY_KEY, ADMIN_KEY_KEY])
        for key in held.values():
            assert len(key) == 48 and set(key) <= set(string.ascii_letters + string.digits)
        assert held[ENGINE_KEY_KEY] != held[ADMIN_KEY_KEY]
        assert values(copy) == {ENGINE_KEY_KEY: held[ENGINE_KEY_KEY]}  # no admin key there
        for found in (source, copy):
            assert d["secret_labels"].items() <= (found.metadata.labels or {}).items()
            annotations = json.dumps(found.metadata.annotations or {})
            fields = json.dumps(client.ApiClient().sanitize_for_serialization(
                found.metadata.managed_fields or []))  # fmt: skip
            assert said(annotations + fields, list(held.values())) == [], found.metadata.name
        keys += held.values()
    assert len(set(keys)) == 4
    assert said(output, keys) == []  # names only in what the module returns

    again, output = run(tmp_path, **given)
    assert (again["changed"], again["created"], again["copied"]) == (False, [], [])
    assert sorted(v for n in names for v in values(secret(core, n, here)).values()) == sorted(keys)
    checked, _ = run(tmp_path, check=True, **given)
    assert checked["changed"] is False
    assert said(output, keys) == []


def test_a_key_secret_there_is_kept_and_a_changed_copy_is_put_back(
    kube_api: Any, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kube_api.client())
    here, agents = kube_api.namespace("keys"), kube_api.namespace("keys-agents")
    given = args(kube_api, here, agents, "d1")
    name = given["deployments"][0]["key_secret"]
    held = {ENGINE_KEY_KEY: SENTINEL, ADMIN_KEY_KEY: "SENTINEL-admin-key-77a1"}
    core.create_namespaced_secret(here, {"metadata": {"name": name}, "stringData": held})
    core.create_namespaced_secret(
        agents, {"metadata": {"name": name}, "stringData": {ENGINE_KEY_KEY: "stale"}}
    )

    planned, _ = run(tmp_path, check=True, **given)
    assert (planned["created"], planned["copied"]) == ([], [f"{agents}/{name}"])
    assert values(secret(core, name, agents)) == {ENGINE_KEY_KEY: "stale"}  # check wrote nothing

    done, output = run(tmp_path, **given)
    assert (done["changed"], done["created"], done["copied"]) == (True, [], [f"{agents}/{name}"])
    assert values(secret(core, name, here)) == held  # never replaced
    assert values(secret(core, name, agents)) == {ENGINE_KEY_KEY: SENTINEL}
    assert said(output, list(held.values())) == []


def test_a_secret_without_the_keys_is_refused_naming_it(kube_api: Any, tmp_path: Path) -> None:
    """Negative control of the copy: a Secret of that name that sparkrack did not make."""
    core = client.CoreV1Api(kube_api.client())
    here, agents = kube_api.namespace("keys"), kube_api.namespace("keys-agents")
    given = args(kube_api, here, agents, "d1")
    name = given["deployments"][0]["key_secret"]
    core.create_namespaced_secret(
        here, {"metadata": {"name": name}, "stringData": {"token": SENTINEL}}
    )
    failed, output = run(tmp_path, **given)
    assert failed["failed"] is True
    assert f"Secret {here}/{name} holds no {ENGINE_KEY_KEY} or {ADMIN_KEY_KEY} key" in failed["msg"]
    assert said(output, [SENTINEL]) == []
    assert secret(core, name, agents) is None
