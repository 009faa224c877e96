"""sparkrack_k8s_labelled, the module that lists or removes several kinds in one run, run as Ansible
runs a module (arguments in a JSON file) against the real control plane (``kube_api``).

* listed: what it returns is what a k8s_info loop over the same kinds registers, matched by the
  label and the namespace;
* absent: the labelled objects go kind after kind, in the foreground, and the module returns
  once they are gone; what it returns names them and carries no object's body."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from module_run import run_module

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "sparkrack" / "adapters" / "modules" / "sparkrack_k8s_labelled.py"
LABEL = "sparkrack.io/component=serving"

pytestmark = pytest.mark.api


def run(tmp_path: Path, check: bool = True, **args: Any) -> dict[str, Any]:
    return run_module(MODULE, tmp_path, check, **args)[0]


def names(result: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [
        (r["item"], sorted(f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
                           for o in r["resources"]))
        for r in result["results"]
    ]  # fmt: skip


def test_it_lists_each_kind_by_label_in_one_namespace_or_all(kube_api: Any, tmp_path: Path) -> None:
    api = kube_api.client()
    core = client.CoreV1Api(api)
    here, there = kube_api.namespace("list"), kube_api.namespace("list")
    labelled = {"sparkrack.io/component": "serving"}
    for ns in (here, there):
        core.create_namespaced_config_map(ns, {"metadata": {"name": "ours", "labels": labelled}})
        core.create_namespaced_config_map(ns, {"metadata": {"name": "theirs"}})
        core.create_namespaced_service_account(
            ns, {"metadata": {"name": "agent", "labels": labelled}}
        )
    config = str(kube_api.kubeconfig)

    one = run(tmp_path, kubeconfig=config, kinds=["ServiceAccount", "ConfigMap"],
              namespace=here, label_selector=LABEL)  # fmt: skip
    assert one["changed"] is False
    assert names(one) == [("ServiceAccount", [f"{here}/agent"]), ("ConfigMap", [f"{here}/ours"])]

    every = run(tmp_path, kubeconfig=config, kinds=["ConfigMap"], label_selector=LABEL)
    [(kind, found)] = names(every)
    assert kind == "ConfigMap"
    assert {f"{here}/ours", f"{there}/ours"} <= set(found)
    assert not [n for n in found if n.endswith("/theirs")]  # the label decides

    # What the filter reads of it: the objects themselves, as the API lists them.
    [listed] = one["results"][1]["resources"]
    assert listed["metadata"]["labels"] == labelled and listed["metadata"]["uid"]


def test_a_kind_the_api_does_not_serve_fails_naming_it(kube_api: Any, tmp_path: Path) -> None:
    failed = run(tmp_path, kubeconfig=str(kube_api.kubeconfig), kinds=["ConfigMap", "Nonsense"],
                 label_selector=LABEL)  # fmt: skip
    assert failed["failed"] is True
    assert "the API server serves no kind named 'Nonsense'" in failed["msg"]


def _objects(kube_api: Any, tag: str) -> tuple[str, str, str]:
    """Two namespaces, each with a labelled and an unlabelled ConfigMap and a labelled Secret,
    and a labelled Deployment (foreground: its ReplicaSet goes first) in the first."""
    api = kube_api.client()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    here, there = kube_api.namespace(tag), kube_api.namespace(tag)
    labelled = {"sparkrack.io/test": here}  # this test's objects only, in every namespace
    for ns in (here, there):
        core.create_namespaced_config_map(ns, {"metadata": {"name": "ours", "labels": labelled}})
        core.create_namespaced_config_map(ns, {"metadata": {"name": "theirs"}})
        core.create_namespaced_secret(
            ns, {"metadata": {"name": "key", "labels": labelled}, "stringData": {"k": "SECRET-1"}}
        )
    pod = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/none:1"}]},
    }
    apps.create_namespaced_deployment(here, {
        "metadata": {"name": "engine", "labels": labelled},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "x"}}, "template": pod},
    })  # fmt: skip
    return here, there, f"sparkrack.io/test={here}"


def _left(kube_api: Any, namespaces: tuple[str, ...]) -> list[str]:
    api = kube_api.client()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    out = []
    for ns in namespaces:
        out += [
            f"ConfigMap/{ns}/{c.metadata.name}"
            for c in core.list_namespaced_config_map(ns).items
            if c.metadata.name != "kube-root-ca.crt"
        ]
        out += [f"Secret/{ns}/{c.metadata.name}" for c in core.list_namespaced_secret(ns).items]
        out += [
            f"Deployment/{ns}/{d.metadata.name}" for d in apps.list_namespaced_deployment(ns).items
        ]
    return sorted(out)  # fmt: skip


def test_absent_removes_the_labelled_objects_kind_by_kind(kube_api: Any, tmp_path: Path) -> None:
    here, there, label = _objects(kube_api, "remove")
    config = str(kube_api.kubeconfig)
    kinds = ["Deployment", "Secret", "PrometheusRule", "ConfigMap"]  # no PrometheusRule CRD here

    # Check mode names them and removes nothing.
    dry = run(tmp_path, kubeconfig=config, kinds=kinds, label_selector=label, state="absent")
    assert dry["removed"][0] == f"Deployment/{here}/engine" and "results" not in dry
    assert len(_left(kube_api, (here, there))) == 7

    done = run(tmp_path, check=False, kubeconfig=config, kinds=kinds, label_selector=label,
               state="absent", wait_timeout=60)  # fmt: skip
    assert done.get("failed") is not True, done
    assert done["changed"] is True
    assert _left(kube_api, (here, there)) == sorted(
        [f"ConfigMap/{ns}/theirs" for ns in (here, there)]
    )
    assert done["removed"] == [f"Deployment/{here}/engine",
                    *sorted([f"Secret/{here}/key", f"Secret/{there}/key"]),
                    *sorted([f"ConfigMap/{here}/ours", f"ConfigMap/{there}/ours"])]  # fmt: skip
    assert done["counts"] == ["Deployment: 1", "Secret: 2", "ConfigMap: 2"]
    # Names only: a Secret's value is in neither the result nor the module's output.
    assert "SECRET-1" not in json.dumps(done) and "U0VDUkVULTE" not in json.dumps(done)

    again = run(tmp_path, check=False, kubeconfig=config, kinds=kinds, label_selector=label,
                state="absent")  # fmt: skip
    assert (again["changed"], again["removed"], again["counts"]) == (False, [], [])


def test_absent_fails_naming_an_object_that_does_not_go(kube_api: Any, tmp_path: Path) -> None:
    """The negative control of the wait: a finalizer nobody removes keeps the object."""
    core = client.CoreV1Api(kube_api.client())
    ns = kube_api.namespace("stuck")
    core.create_namespaced_config_map(ns, {"metadata": {
        "name": "held", "labels": {"sparkrack.io/component": "serving"},
        "finalizers": ["example.com/never"]}})  # fmt: skip
    try:
        failed = run(tmp_path, check=False, kubeconfig=str(kube_api.kubeconfig),
                     kinds=["ConfigMap"], label_selector=LABEL, namespace=ns, state="absent",
                     wait_timeout=3)  # fmt: skip
        assert failed["failed"] is True
        assert failed["msg"] == f"still there after 3 s: ConfigMap/{ns}/held"
    finally:
        core.patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}})
