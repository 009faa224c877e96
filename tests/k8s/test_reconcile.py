"""What the cluster plays decide against a live API (sparkrack.k8s.reconcile), offline and through
the serve play's own check (roles/serving/tasks/check.yml) against a real API server: an
over-long name, a missing CRD and a refused Pod Security level each fail it, naming the object
and the API server's reason, before anything is stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from sparkrack import contract
from sparkrack.k8s.reconcile import (
    api_reason,
    dry_run_objects,
    job_plan,
    refusals,
    stale_serving,
    template_pod,
)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def serving_labels(deployment: str, profile: str) -> dict[str, str]:
    return {
        **contract.PART_OF,
        contract.LABEL_COMPONENT: contract.COMPONENT_SERVING,
        contract.LABEL_DEPLOYMENT: deployment,
        contract.LABEL_PROFILE: profile,
    }


def statefulset(name: str, labels: dict[str, str], privileged: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "engine", "image": "registry.invalid/engine:1"}
    if privileged:
        container["securityContext"] = {"privileged": True}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def job(name: str, image: str = "registry.invalid/fetch:1") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": image}]},
            }
        },
    }


# --- offline -------------------------------------------------------------------------------------


def test_dry_run_checks_objects_and_every_workload_template_as_a_pod() -> None:
    sts = statefulset("sparkrack-a-r0", serving_labels("a", "p"))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ns"}}
    objects = dry_run_objects([namespace, service, sts, job("j")])
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Service", "s"),
        ("StatefulSet", "sparkrack-a-r0"),
        ("Pod", "sparkrack-a-r0-dry-run"),
        ("Pod", "j-dry-run"),
    ]
    pod = template_pod(sts)
    assert pod["metadata"]["namespace"] == "ns" and pod["spec"] == sts["spec"]["template"]["spec"]
    # An object about to be replaced is checked through its template only.
    replaced = dry_run_objects([sts], [{"kind": "StatefulSet", "name": "sparkrack-a-r0"}])
    assert [o["kind"] for o in replaced] == ["Pod"]


def test_refusals_name_each_refused_object_with_the_api_servers_words() -> None:
    definitions = [
        {"kind": "Service", "metadata": {"name": "ok", "namespace": "ns"}},
        {"kind": "Service", "metadata": {"name": "bad", "namespace": "ns"}},
    ]
    body = json.dumps({"kind": "Status", "message": 'Service "bad" is invalid: spec: "x"'})
    result = {
        "result": {
            "results": [
                {"changed": False, "result": {}},
                {"error": {"msg": f"Failed to apply object: b'{body}'"}},
            ]
        }
    }
    assert refusals(definitions, result) == ['Service/ns/bad: Service "bad" is invalid: spec: "x"']
    single = {"error": {"msg": "Failed to find exact match for k8s.cni.cncf.io/v1.Foo"}}
    assert refusals(definitions[:1], single) == [
        "Service/ns/ok: Failed to find exact match for k8s.cni.cncf.io/v1.Foo"
    ]
    assert refusals(definitions[:1], {"changed": False, "result": {}}) == []
    assert api_reason("no json here") == "no json here"


def test_job_plan_keeps_unchanged_jobs_and_replaces_changed_failed_and_departed_ones() -> None:
    rendered = [job("keep"), job("changed", "registry.invalid/fetch:2"), job("failed")]
    plan = job_plan(rendered, [])
    assert plan["delete"] == []
    stamped = {j["metadata"]["name"]: j for j in plan["apply"]}
    live = [
        stamped["keep"],
        {**job("changed"), "metadata": {"name": "changed", "annotations": {
            contract.SPEC_HASH_ANNOTATION: "old"}}},
        {**stamped["failed"], "status": {"conditions": [{"type": "Failed", "status": "True"}]}},
        {"metadata": {"name": "gone"}},
    ]  # fmt: skip
    assert job_plan(rendered, live)["delete"] == ["changed", "failed", "gone"]
    # The hash follows the rendered form: the same Job twice, the same stamp.
    assert job_plan(rendered, [])["apply"] == plan["apply"]


def test_stale_serving_removes_departed_deployments_and_changed_profiles_only() -> None:
    rendered = [
        statefulset("sparkrack-a-r0", serving_labels("a", "new-profile")),
        statefulset("sparkrack-b-r0", serving_labels("b", "p")),
    ]
    live = {
        "StatefulSet": [
            statefulset("sparkrack-a-r0", serving_labels("a", "old-profile")),
            statefulset("sparkrack-b-r0", serving_labels("b", "p")),
            statefulset("sparkrack-c-r0", serving_labels("c", "p")),
        ],
        "Pod": [{"metadata": {"name": "sparkrack-c-r0-0", "namespace": "ns",
                              "labels": serving_labels("c", "p")}}],
    }  # fmt: skip
    assert stale_serving(rendered, live) == [
        {"kind": "StatefulSet", "namespace": "ns", "name": "sparkrack-a-r0"},
        {"kind": "StatefulSet", "namespace": "ns", "name": "sparkrack-c-r0"},
        {"kind": "Pod", "namespace": "ns", "name": "sparkrack-c-r0-0"},
    ]
    assert stale_serving(rendered, {"StatefulSet": live["StatefulSet"][1:2]}) == []
    # The switch's ConfigMap is applied (updated in place) before the removal: never removed.
    switch_map = {
        "kind": "ConfigMap",
        "metadata": {
            "name": "sparkrack-a-switch",
            "namespace": "ns",
            "labels": serving_labels("a", "old-profile"),
        },
    }
    applied = [
        {
            **switch_map,
            "metadata": {**switch_map["metadata"], "labels": serving_labels("a", "new-profile")},
        }
    ]
    assert stale_serving(rendered, {"ConfigMap": [switch_map]}, applied) == []
    assert stale_serving(rendered, {"ConfigMap": [switch_map]}) != []


def test_a_deployments_policy_goes_with_its_profile_and_its_secrets_only_with_it() -> None:
    rendered = [statefulset("sparkrack-a-r0", serving_labels("a", "new-profile"))]

    def obj(kind: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {"kind": kind, "metadata": {"name": name, "namespace": "ns", "labels": labels}}

    def secret_labels(deployment: str) -> dict[str, str]:
        return {
            contract.LABEL_COMPONENT: contract.COMPONENT_SERVING,
            contract.LABEL_DEPLOYMENT: deployment,
        }

    live = {
        "NetworkPolicy": [
            obj("NetworkPolicy", "sparkrack-a", serving_labels("a", "old-profile")),
            obj("NetworkPolicy", "sparkrack-c", serving_labels("c", "p")),
        ],
        "Secret": [
            obj("Secret", "sparkrack-a-keys", secret_labels("a")),
            obj("Secret", "sparkrack-c-keys", secret_labels("c")),
            obj("Secret", "sparkrack-fetch-rsync-c", secret_labels("c")),
            # Without a deployment label (the gateway's, the HF token's): never a switch's.
            obj("Secret", "hf-token", {contract.LABEL_COMPONENT: contract.COMPONENT_SERVING}),
        ],
        "Pod": [obj("Pod", "sparkrack-c-r0-0", serving_labels("c", "p"))],
    }
    assert stale_serving(rendered, live) == [
        {"kind": "NetworkPolicy", "namespace": "ns", "name": "sparkrack-a"},
        {"kind": "NetworkPolicy", "namespace": "ns", "name": "sparkrack-c"},
        {"kind": "Secret", "namespace": "ns", "name": "sparkrack-c-keys"},
        {"kind": "Secret", "namespace": "ns", "name": "sparkrack-fetch-rsync-c"},
        {"kind": "Pod", "namespace": "ns", "name": "sparkrack-c-r0-0"},
    ]
    # Control: with c still rendered, only a's old-profile policy goes; a's keys stay.
    both = [*rendered, statefulset("sparkrack-c-r0", serving_labels("c", "p"))]
    assert stale_serving(both, live) == [
        {"kind": "NetworkPolicy", "namespace": "ns", "name": "sparkrack-a"}
    ]


# --- the serve play's check against a real API server ---------------------------------------


def run_check(kubeconfig: Path, objects: list[dict[str, Any]], tmp_path: Path) -> str:
    """roles/serving/tasks/check.yml, as the serve play includes it, on ``objects``."""
    play = [
        {
            "name": "check",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Check with the API server",
                    "ansible.builtin.include_role": {"name": "serving", "tasks_from": "check.yml"},
                    "vars": {"serving_checked": objects, "serving_kubeconfig": str(kubeconfig)},
                }
            ],
        }
    ]
    path = tmp_path / "check.yml"
    path.write_text(yaml.safe_dump(play))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
    }
    proc = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(path),
            "-e",
            f"ansible_python_interpreter={sys.executable}",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    return f"rc={proc.returncode}\n{proc.stdout}{proc.stderr}"


def _in(namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["namespace"] = namespace
    return obj


def test_the_check_passes_valid_objects_and_stores_nothing(kube_api: Any, tmp_path: Path) -> None:
    ns = kube_api.namespace("ok", {"pod-security.kubernetes.io/enforce": "privileged"})
    sts = _in(ns, statefulset("sparkrack-a-r0", serving_labels("a", "p"), privileged=True))
    out = run_check(kube_api.kubeconfig, dry_run_objects([sts]), tmp_path)
    assert out.startswith("rc=0"), out
    apps = client.AppsV1Api(kube_api.client())
    assert apps.list_namespaced_stateful_set(ns).items == [], "a dry run must store nothing"


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("over-long name", "must be no more than 63 characters"),
        (
            "missing CRD",
            "Failed to find exact match for k8s.cni.cncf.io/v1.NetworkAttachmentDefinition",
        ),
        ("refused Pod Security level", 'violates PodSecurity "baseline:latest": privileged'),
    ],
)
def test_the_check_fails_naming_the_object_and_the_api_servers_reason(
    kube_api: Any, tmp_path: Path, case: str, reason: str
) -> None:
    ns = kube_api.namespace("bad", {"pod-security.kubernetes.io/enforce": "baseline"})
    good = _in(ns, statefulset("sparkrack-a-r0", serving_labels("a", "p")))
    if case == "over-long name":
        bad: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "sparkrack-" + "x" * 60, "namespace": ns},
            "spec": {"ports": [{"port": 30000}]},
        }
        name = f"Service/{ns}/sparkrack-{'x' * 60}"
    elif case == "missing CRD":
        bad = {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "sparkrack-vf0", "namespace": ns},
            "spec": {"config": "{}"},
        }
        name = f"NetworkAttachmentDefinition/{ns}/sparkrack-vf0"
    else:
        bad = _in(ns, statefulset("sparkrack-b-r0", serving_labels("b", "p"), privileged=True))
        name = f"Pod/{ns}/sparkrack-b-r0-dry-run"
    out = run_check(kube_api.kubeconfig, dry_run_objects([good, bad]), tmp_path)
    assert out.startswith("rc=2"), out
    assert "The API server refuses 1 object(s); nothing was removed or changed" in out
    assert f"{name}: " in out and reason in out, out
    assert "sparkrack-a-r0" not in out.split("nothing was removed or changed", 1)[1].split("\n")[0]
