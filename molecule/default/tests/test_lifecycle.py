"""The cluster plays against the lab's real API, in order, as an owner runs them: a refused
manifest, a one-line model switch, a dropped deployment, the way back, upgrade.yml (real drain and
uncordon of the KWOK nodes), monitoring.yml, the fabric gate, reset.yml; and, last, that every
wait in the roles that talks to the API ran against it at least once in these runs.

The tests depend on their order (one lab, one cluster): pytest runs them top to bottom."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any

import yaml
from conftest import PLAY_LOGS, ROOT, admin, inventory_copy, recap_changed, run_play
from kubernetes import client, dynamic

from sparkrack import contract
from sparkrack.serving.names import ObjectNames
from sparkrack.serving.objects.agents import name as watchdog_name

SERVE = "playbooks/serve.yml"
NS = yaml.safe_load((ROOT / "inventories/lab/group_vars/all.yml").read_text())["serving_namespace"]
# The one-line switch crosses engines: gemma's two Sparks go from SGLang to vLLM across Sparks
# (head and headless rank), and the way back returns them to SGLang.
VLLM_ACROSS = "nemotron-3-super-120b-a12b-nvfp4-vllm4"
SWITCH = ("    profile: gemma-4-31b-it\n", f"    profile: {VLLM_ACROSS}\n")
DROP = (
    "  - name: super-trtllm\n    profile: nemotron-3-super-120b-a12b-nvfp4-trtllm\n"
    "    sparks: [spark4]\n    alias: nemotron-3-super-trtllm\n",
    "",
)
KINDS = (
    "StatefulSet",
    "Service",
    "ConfigMap",
    "Pod",
    "Job",
    "Deployment",
    "NetworkPolicy",
    "Secret",
)
VERSIONS = {"StatefulSet": "apps/v1", "Deployment": "apps/v1", "Job": "batch/v1",
            "NetworkPolicy": "networking.k8s.io/v1"}  # fmt: skip


def out(proc: Any) -> str:
    return str(proc.stdout + proc.stderr)


def words(proc: Any) -> str:
    """The output with every run of white space made one blank (YAML output wraps lines)."""
    return " ".join(out(proc).split())


def snapshot() -> dict[tuple[str, str], tuple[str, str]]:
    """(kind, namespace/name) -> (resourceVersion, deployment label) of every sparkrack object in
    the serving namespace and the agents' namespace."""
    api = dynamic.DynamicClient(admin())
    found = {}
    for kind, namespace in itertools.product(KINDS, (NS, contract.agents_namespace(NS))):
        version = VERSIONS.get(kind, "v1")
        items = api.resources.get(api_version=version, kind=kind).get(
            namespace=namespace, label_selector=contract.contract_fact()["part_of_selector"]
        )
        for item in items.items:
            labels = dict(item.metadata.labels or {})
            found[(kind, f"{namespace}/{item.metadata.name}")] = (
                item.metadata.resourceVersion,
                labels.get(contract.LABEL_DEPLOYMENT, "-"),
            )
    return found


def of(snap: dict[tuple[str, str], tuple[str, str]], deployment: str) -> dict[Any, str]:
    return {key: rv for key, (rv, dep) in snap.items() if dep == deployment}


REFUSE = "sparkrack-test-refuses-the-gemma-head"
REFUSAL = "the lab admission policy refuses the gemma head"


def refusing_the_gemma_head() -> None:
    """An admission policy that refuses the gemma head's StatefulSet: an object sparkrack's own
    checks pass (they hold every value to what the API accepts) and the API server refuses."""
    api = dynamic.DynamicClient(admin())
    group = "admissionregistration.k8s.io/v1"
    api.resources.get(api_version=group, kind="ValidatingAdmissionPolicy").create(
        body={
            "apiVersion": group,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": REFUSE},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["apps"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["statefulsets"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "object.metadata.name != 'sparkrack-gemma-r0'",
                        "message": REFUSAL,
                    }
                ],
            },
        }
    )
    api.resources.get(api_version=group, kind="ValidatingAdmissionPolicyBinding").create(
        body={
            "apiVersion": group,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": REFUSE},
            "spec": {
                "policyName": REFUSE,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}
                },
            },
        }
    )
    apps = client.AppsV1Api(admin())
    deadline = time.monotonic() + 60
    while True:  # the policy takes effect once the API server has loaded it
        try:
            apps.patch_namespaced_stateful_set(
                "sparkrack-gemma-r0", NS, {"metadata": {"labels": {"probe": "x"}}}, dry_run="All"
            )
        except client.ApiException as exc:
            if REFUSAL in str(exc.body):
                return
            raise
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(1)


def without_the_refusal() -> None:
    api = dynamic.DynamicClient(admin())
    group = "admissionregistration.k8s.io/v1"
    for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
        api.resources.get(api_version=group, kind=kind).delete(name=REFUSE)


def test_a_manifest_the_api_refuses_fails_before_any_deployment_is_removed(tmp_path: Path) -> None:
    # Dropping super-trtllm would remove it, but the API server refuses the gemma head's
    # StatefulSet: the play must stop before the removal.
    inventory = inventory_copy(tmp_path, DROP)
    before = snapshot()
    assert of(before, "super-trtllm"), "the lab's super-trtllm deployment is missing"
    refusing_the_gemma_head()
    try:
        proc = run_play(SERVE, inventory=inventory)
    finally:
        without_the_refusal()
    assert proc.returncode != 0, out(proc)
    assert "The API server refuses" in words(proc), out(proc)[-3000:]
    assert "StatefulSet/sparkrack/sparkrack-gemma-r0: " in words(proc)
    assert REFUSAL in words(proc)
    assert snapshot() == before, "nothing may change before the API accepted every object"


def test_a_one_line_model_switch_replaces_only_that_deployment(tmp_path: Path) -> None:
    inventory = inventory_copy(tmp_path, SWITCH)
    before = snapshot()
    # serving_prepull: the switch's pre-pull Jobs run (and their wait) as an owner can ask.
    proc = run_play(SERVE, "-e", "serving_prepull=true", inventory=inventory)
    assert proc.returncode == 0, out(proc)[-4000:]
    assert "field is immutable" not in out(proc)
    after = snapshot()
    for untouched in ("super-vllm", "super-trtllm"):
        assert of(after, untouched) == of(before, untouched), f"{untouched} was touched"
    apps = client.AppsV1Api(admin())
    head = apps.read_namespaced_stateful_set("sparkrack-gemma-r0", NS)
    assert head.metadata.labels[contract.LABEL_PROFILE] == VLLM_ACROSS
    worker = apps.read_namespaced_stateful_set("sparkrack-gemma-r1", NS)
    argv = {
        rank: " ".join([*(c.command or []), *(c.args or [])])
        for rank, sts in ((0, head), (1, worker))
        for c in sts.spec.template.spec.containers
        if "--model" in (c.args or [])
    }
    assert "--node-rank 0" in argv[0] and "--nnodes 2" in argv[0], argv
    assert "--headless" not in argv[0], argv
    assert "--headless" in argv[1] and "--node-rank 1" in argv[1], argv
    pods = client.CoreV1Api(admin()).list_namespaced_pod(
        # The rank pods (the deployment's watchdog carries its label too, and no profile).
        NS,
        label_selector=f"{contract.LABEL_DEPLOYMENT}=gemma,"
        f"{contract.LABEL_COMPONENT}={contract.COMPONENT_SERVING}",
    )
    assert {p.metadata.labels[contract.LABEL_PROFILE] for p in pods.items} == {VLLM_ACROSS}, (
        "a pod of the old profile is left"
    )


def test_dropping_a_deployment_removes_its_objects_and_nothing_else(tmp_path: Path) -> None:
    inventory = inventory_copy(tmp_path, SWITCH, DROP)
    before = snapshot()
    proc = run_play(SERVE, inventory=inventory)
    assert proc.returncode == 0, out(proc)[-4000:]
    after = snapshot()
    # Its watchdog and engine-key copy in the agents' namespace were there, and are gone too.
    agents = contract.agents_namespace(NS)
    dropped = {name for (_kind, name) in of(before, "super-trtllm")}
    assert f"{agents}/{ObjectNames.of('super-trtllm').keys}" in dropped
    assert f"{agents}/{watchdog_name('super-trtllm')}" in dropped
    assert of(after, "super-trtllm") == {}, "the dropped deployment's objects remain"
    for untouched in ("gemma", "super-vllm"):
        assert of(after, untouched) == of(before, untouched), f"{untouched} was touched"


def test_the_lab_inventory_comes_back_and_a_rerun_changes_nothing() -> None:
    proc = run_play(SERVE)
    assert proc.returncode == 0, out(proc)[-4000:]
    rerun = run_play(SERVE)
    assert rerun.returncode == 0 and recap_changed(out(rerun))["localhost"] == 0, out(rerun)[-3000:]


def wait_ready_pods(timeout: float = 120) -> dict[str, str]:
    core = client.CoreV1Api(admin())
    selector = f"{contract.LABEL_COMPONENT}={contract.COMPONENT_SERVING}"
    deadline = time.monotonic() + timeout
    while True:
        pods = core.list_namespaced_pod(NS, label_selector=selector).items
        ready = {
            p.metadata.name: p.metadata.uid
            for p in pods
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        }
        if pods and len(ready) == len(pods) or time.monotonic() > deadline:
            return ready
        time.sleep(1)


def test_upgrade_drains_and_uncordons_each_spark_for_real() -> None:
    before = wait_ready_pods()
    proc = run_play("playbooks/upgrade.yml")
    assert proc.returncode == 0, out(proc)[-4000:]
    for spark in ("spark1", "spark2", "spark3", "spark4"):
        assert re.search(rf"TASK \[Drain this Spark.*?\n(?:.*\n)*?changed: \[{spark}", out(proc))
        assert re.search(rf"TASK \[Uncordon this Spark.*?\n(?:.*\n)*?changed: \[{spark}", out(proc))
    nodes = client.CoreV1Api(admin()).list_node().items
    assert not [n.metadata.name for n in nodes if n.spec.unschedulable]
    after = wait_ready_pods()
    assert sorted(after) == sorted(before), "every serving pod must be Ready again"
    assert not set(after.values()) & set(before.values()), "every serving pod was evicted"


def test_monitoring_applies_the_crds_then_the_rule_and_dashboards() -> None:
    proc = run_play("playbooks/monitoring.yml", "-e", '{"monitoring": {"enabled": true}}')
    assert proc.returncode == 0, out(proc)[-4000:]
    assert "kube-prometheus-stack 65.1.1 NOT APPLIED" in words(proc), out(proc)[-3000:]
    api = dynamic.DynamicClient(admin())
    rules = api.resources.get(api_version="monitoring.coreos.com/v1", kind="PrometheusRule")
    assert [r.metadata.name for r in rules.get(namespace="monitoring").items]
    maps = client.CoreV1Api(admin()).list_namespaced_config_map(
        "monitoring", label_selector=contract.contract_fact()["part_of_selector"]
    )
    assert len(maps.items) == len(list((ROOT / "sparkrack/data/observe/dashboards").glob("*.json")))


def test_the_fabric_gate_stops_at_once_while_the_gpus_serve() -> None:
    proc = run_play("playbooks/fabric_check.yml", "-e", "fabric_gate_transport=socket")
    assert proc.returncode != 0
    assert "the scheduler cannot place the test pods" in words(proc), out(proc)[-3000:]
    assert "nvidia.com/gpu" in out(proc)


def test_reset_leaves_no_object_with_the_part_of_label() -> None:
    proc = run_play("playbooks/reset.yml", "-e", "reset_confirm=true")
    assert proc.returncode == 0, out(proc)[-4000:]
    api = dynamic.DynamicClient(admin())
    selector = contract.contract_fact()["part_of_selector"]
    left = []
    for resource in api.resources.search():
        if "list" not in (resource.verbs or []) or "/" in resource.name or not resource.kind:
            continue
        if resource.kind.endswith("List"):
            continue
        try:
            items = resource.get(label_selector=selector).items
        except client.ApiException as exc:  # a resource the API lists but cannot serve here
            assert exc.status in (404, 405), f"{resource.kind}: {exc}"
            continue
        left += [f"{resource.kind}/{i.metadata.namespace}/{i.metadata.name}" for i in items]
    assert left == [], left


def test_the_fabric_gate_judges_the_captured_log_once_the_gpus_are_free() -> None:
    # reset.yml removed the kubeconfig and the add-ons: K3s' play writes it again, the add-ons
    # come back, and the test pods fit.
    for playbook in ("playbooks/k3s.yml", "playbooks/addons.yml"):
        proc = run_play(playbook)
        assert proc.returncode == 0, out(proc)[-4000:]
    socket = run_play("playbooks/fabric_check.yml", "-e", "fabric_gate_transport=socket")
    assert socket.returncode == 0, out(socket)[-4000:]
    assert "PASS" in out(socket) and "socket.log" in out(socket), out(socket)[-3000:]
    roce = run_play("playbooks/fabric_check.yml")
    assert roce.returncode != 0
    assert "RoCE was requested but NCCL fell back to TCP sockets" in words(roce), out(roce)[-3000:]


API_MODULES = ("kubernetes.core.", "ansible.builtin.uri", "sparkrack_k8s_labelled")


def api_waits() -> set[str]:
    """Every task in the roles and playbooks that waits on the API, by its static name, except
    those of a ``tasks/hardware/real.yml`` (they run on real hardware only) and Helm's (the lab
    installs no chart: its repository is out of reach, see the monitoring role)."""
    found: set[str] = set()

    def walk(tasks: Any, path: Path) -> None:
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            for key in ("block", "rescue", "always"):
                walk(task.get(key), path)
            module = next((k for k in task if k.startswith(API_MODULES)), None)
            if module is None or module == "kubernetes.core.helm":
                continue
            args = task[module] if isinstance(task[module], dict) else {}
            waits = args.get("wait") is True or "until" in task or module.endswith("k8s_drain")
            # sparkrack_k8s_labelled waits for what it removes
            waits = waits or (module == "sparkrack_k8s_labelled" and args.get("state") == "absent")
            if waits and not (path.parent.name == "hardware" and path.name == "real.yml"):
                found.add(str(task["name"]).split("{{")[0].split(" — ")[0].strip())

    for path in [*ROOT.glob("roles/*/tasks/**/*.yml"), *ROOT.glob("playbooks/*.yml")]:
        data = yaml.safe_load(path.read_text())
        if path.parent.name == "playbooks":
            for play in data or []:
                for key in ("pre_tasks", "tasks", "post_tasks"):
                    walk(play.get(key), path)
        else:
            walk(data, path)
    return found


def test_every_api_wait_in_the_roles_ran_against_the_lab_api() -> None:
    ran: set[str] = set()
    for log in PLAY_LOGS:
        for name, body in re.findall(
            r"^TASK \[(?:[\w]+ : )?(.+?)\] \*+\n(.*?)(?=^TASK |\Z)", log, re.M | re.S
        ):
            if re.search(r"^(ok|changed): ", body, re.M):
                ran.add(name.split(" — ")[0].strip())
    waits = api_waits()
    assert len(waits) >= 15, waits
    missing = sorted(w for w in waits if not any(r.startswith(w) for r in ran))
    assert missing == [], f"API waits never run against the lab's API: {missing}"
