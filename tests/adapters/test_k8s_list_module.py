"""sparkrack_k8s_list, the module that lists several kinds in one run, run as Ansible runs a module
(arguments in a JSON file) against the real control plane (``kube_api``): what it returns is what
a k8s_info loop over the same kinds registers, matched by the label and the namespace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "sparkrack" / "adapters" / "modules" / "sparkrack_k8s_list.py"
LABEL = "sparkrack.io/component=serving"

pytestmark = pytest.mark.api


def run(tmp_path: Path, **args: Any) -> dict[str, Any]:
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": True}}))
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True, timeout=120
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    assert (proc.returncode != 0) == bool(result.get("failed")), proc.stderr
    return result


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
