"""The cluster after site.yml, read from the lab's real Kubernetes API (lab/controlplane.py): the
kubeconfig K3s' roles wrote reaches it, the Sparks are Ready nodes, every deployment is Ready,
its Jobs Complete, the gateway Available, the serving namespace enforces its Pod Security level
and no Secret value sits in an annotation."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
import yaml
from conftest import KUBECONFIG, ROOT, host_of, kube, plan
from kubernetes import client

from sparkrack import contract
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.serving.names import ObjectNames

NS = yaml.safe_load((ROOT / "inventories/lab/group_vars/all.yml").read_text())["serving_namespace"]
AGENTS = contract.agents_namespace(NS)
LAB_VARS = yaml.safe_load((ROOT / "inventories/lab/group_vars/all.yml").read_text())


def conditions(obj: Any) -> dict[str, str]:
    return {c.type: c.status for c in (obj.status.conditions or [])}


def test_the_kubeconfig_reaches_a_real_api_server_of_the_k3s_release() -> None:
    assert KUBECONFIG.is_file() and KUBECONFIG.stat().st_mode & 0o777 == 0o600
    server = yaml.safe_load(KUBECONFIG.read_text())["clusters"][0]["cluster"]["server"]
    assert server == "https://172.28.250.10:6443", server
    version = client.VersionApi(kube()).get_code()
    k3s = yaml.safe_load((ROOT / "roles/k3s_install/defaults/main.yml").read_text())
    pinned = k3s["k3s_install_version"].split("+")[0]
    assert version.git_version == pinned, f"API {version.git_version}, K3s pin {pinned}"
    node_copy = host_of("cp1").file("/etc/rancher/k3s/k3s.yaml")
    assert node_copy.is_file and node_copy.mode == 0o600 and node_copy.user == "root"


def test_the_four_sparks_and_the_control_plane_are_ready_nodes() -> None:
    nodes = {n.metadata.name: n for n in client.CoreV1Api(kube()).list_node().items}
    sparks = {name: node for name, node in nodes.items() if name.startswith("spark")}
    assert sorted(sparks) == sorted(plan()["order"])
    for name, node in sparks.items():
        assert conditions(node)["Ready"] == "True", name
        labels = node.metadata.labels
        assert labels[contract.LABEL_ROLE] == contract.ROLE_SPARK
        assert labels[contract.LABEL_SPARK_INDEX] == name.removeprefix("spark")
        assert node.status.allocatable["nvidia.com/gpu"] == "1"
        assert labels["kubernetes.io/arch"] == "arm64"
    assert conditions(nodes["cp1"])["Ready"] == "True"
    assert nodes["cp1"].metadata.labels[contract.LABEL_ROLE] == contract.ROLE_CONTROL_PLANE


def test_every_deployment_is_ready_its_jobs_complete_and_the_gateway_available() -> None:
    apps, batch = client.AppsV1Api(kube()), client.BatchV1Api(kube())
    selector = f"{contract.LABEL_COMPONENT}={contract.COMPONENT_SERVING}"
    sets = apps.list_namespaced_stateful_set(NS, label_selector=selector).items
    deployments = {s.metadata.labels[contract.LABEL_DEPLOYMENT] for s in sets}
    assert deployments == {d["name"] for d in LAB_VARS["serving_deployments"]}
    assert len(sets) == sum(len(d["sparks"]) for d in LAB_VARS["serving_deployments"])
    for sts in sets:
        assert sts.status.ready_replicas == sts.spec.replicas == 1, sts.metadata.name
    jobs = batch.list_namespaced_job(
        NS, label_selector=f"{contract.LABEL_COMPONENT}={contract.COMPONENT_FETCH}"
    ).items
    assert jobs, "no fetch Job"
    for job in jobs:
        assert conditions(job).get("Complete") == "True", job.metadata.name
        assert contract.SPEC_HASH_ANNOTATION in job.metadata.annotations
    gateway = apps.read_namespaced_deployment("sparkrack-gateway", AGENTS)
    assert conditions(gateway)["Available"] == "True"


def privileged_pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/x:1",
                    "securityContext": {"privileged": True},
                }
            ]
        },
    }


def test_the_serving_namespace_enforces_its_pod_security_level() -> None:
    core = client.CoreV1Api(kube())
    labels = core.read_namespace(NS).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == contract.POD_SECURITY_LEVEL
    # The lab's API defaults to restricted (K3s' hardening guide): a namespace without the label
    # refuses the privileged pod the serving namespace admits (dry runs: nothing is stored).
    other = f"psa-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": other}})
    try:
        with pytest.raises(client.ApiException) as refused:
            core.create_namespaced_pod(other, privileged_pod("p"), dry_run="All")
        assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body
        core.create_namespaced_pod(NS, privileged_pod("p"), dry_run="All")
    finally:
        core.delete_namespace(other)


def test_the_agents_namespace_is_restricted_and_refuses_a_host_path() -> None:
    """The gateway, the watchdogs and the memory guard run in a namespace the API holds to
    ``restricted``: a pod there that mounts a host path, or runs privileged, is refused."""
    core = client.CoreV1Api(kube())
    labels = core.read_namespace(AGENTS).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == contract.AGENTS_POD_SECURITY_LEVEL
    apps = client.AppsV1Api(kube())
    running = {
        d.metadata.labels.get(contract.LABEL_COMPONENT)
        for d in [*apps.list_namespaced_deployment(AGENTS).items]
        + [*apps.list_namespaced_daemon_set(AGENTS).items]
    }
    assert {contract.COMPONENT_GATEWAY, contract.COMPONENT_WATCHDOG} <= running
    host_path = privileged_pod("h")
    host_path["spec"]["containers"][0]["securityContext"] = {}
    host_path["spec"]["volumes"] = [{"name": "v", "hostPath": {"path": "/sys/fs/cgroup"}}]
    for pod in (privileged_pod("p"), host_path):
        with pytest.raises(client.ApiException) as refused:
            core.create_namespaced_pod(AGENTS, pod, dry_run="All")
        assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body
    # Each deployment's engine key is there for the gateway and its watchdog; its admin key
    # is not.
    for dep in LAB_VARS["serving_deployments"]:
        name = ObjectNames.of(dep["name"]).keys
        copy, own = (core.read_namespaced_secret(name, ns).data for ns in (AGENTS, NS))
        assert set(copy) == {contract.ENGINE_KEY_KEY} and contract.ADMIN_KEY_KEY in own
        assert copy[contract.ENGINE_KEY_KEY] == own[contract.ENGINE_KEY_KEY]


def test_no_secret_value_sits_in_an_annotation() -> None:
    core = client.CoreV1Api(kube())
    secret = core.read_namespaced_secret(SERVING_DEFAULTS["serving_gateway_key_secret"], AGENTS)
    value = LAB_VARS["vault_gateway_key"]
    assert base64.b64decode(secret.data[contract.GATEWAY_KEY_KEY]).decode() == value
    encoded = base64.b64encode(value.encode()).decode()
    secrets = [*core.list_namespaced_secret(NS).items, *core.list_namespaced_secret(AGENTS).items]
    for other in secrets:
        annotations = json.dumps(other.metadata.annotations or {})
        assert value not in annotations and encoded not in annotations, other.metadata.name
        assert "kubectl.kubernetes.io/last-applied-configuration" not in (
            other.metadata.annotations or {}
        ), other.metadata.name
    managers = {f.manager for f in secret.metadata.managed_fields}
    assert contract.FIELD_MANAGER in managers, f"applied server-side by sparkrack, got {managers}"
