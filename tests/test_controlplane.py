"""The lab's control plane (lab/controlplane.py): pinned to the K3s release, rebuilt only when its
inputs change, secured like K3s' server (checked on the running API), and stopping exactly what
it started."""

from __future__ import annotations

import re
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_api import controlplane_module
from kubernetes import client, config

ROOT = Path(__file__).resolve().parent.parent
cp = controlplane_module()


def test_the_control_plane_is_the_release_of_the_pinned_k3s() -> None:
    k3s = yaml.safe_load((ROOT / "roles/k3s_install/defaults/main.yml").read_text())
    assert k3s["k3s_install_version"].split("+")[0] == cp.KUBERNETES_VERSION
    gomod = (ROOT / "lab/controlplane/go.mod").read_text()
    assert f"k8s.io/kubernetes {cp.KUBERNETES_VERSION}" in gomod
    staging = re.findall(r"(k8s\.io/[\w-]+) => k8s\.io/[\w-]+ (v\S+)", gomod)
    assert len(staging) >= 30
    expected = "v0." + cp.KUBERNETES_VERSION.split(".", 1)[1]
    assert {version for _, version in staging} == {expected}, staging
    sums = (ROOT / "lab/controlplane/go.sum").read_text()
    assert f"k8s.io/kubernetes {cp.KUBERNETES_VERSION} h1:" in sums
    assert "sigs.k8s.io/kwok v0.8.0 h1:" in (ROOT / "lab/kwok/go.sum").read_text()


def test_a_binary_is_rebuilt_only_when_an_input_changes(tmp_path: Path) -> None:
    module = tmp_path / "m"
    module.mkdir()
    for name in ("go.mod", "go.sum", "main.go"):
        (module / name).write_text(f"{name} v1\n")
    binary = cp.GoBinary("x", module, ".", "-s -w")
    first = binary.key("go1.26.8")
    assert first == binary.key("go1.26.8")
    assert binary.key("go1.26.9") != first, "a new toolchain must rebuild"
    (module / "go.sum").write_text("go.sum v2\n")
    assert binary.key("go1.26.8") != first, "a new pin must rebuild"
    assert cp.GoBinary("x", module, ".", "-s").key("go1.26.8") != binary.key("go1.26.8")


def test_pod_security_defaults_to_restricted_with_kube_system_exempt() -> None:
    plugin = cp.admission_config()["plugins"][0]
    assert plugin["name"] == "PodSecurity"
    defaults = plugin["configuration"]["defaults"]
    assert {defaults[m] for m in ("enforce", "audit", "warn")} == {"restricted"}
    assert plugin["configuration"]["exemptions"]["namespaces"] == ["kube-system"]


def test_stop_ends_exactly_the_processes_it_recorded(tmp_path: Path) -> None:
    ours = subprocess.Popen(["sleep", "60"])
    other = subprocess.Popen(["sleep", "60"])
    try:
        ticks = cp.start_ticks(ours.pid)
        plane = cp.ControlPlane(tmp_path, started=[cp.Started("sleep", ours.pid, ticks)])
        assert plane.stop() == ["sleep"]
        assert ours.wait(timeout=10) is not None
        assert other.poll() is None, "a process the launcher did not start was stopped"
        # A recorded id now used by another process (another start time) is not ours.
        stale = cp.ControlPlane(tmp_path, started=[cp.Started("sleep", other.pid, 1)])
        assert stale.stop() == [] and other.poll() is None
    finally:
        other.kill()
        other.wait()


def _get(url: str, context: ssl.SSLContext) -> int:
    try:
        with urllib.request.urlopen(url, context=context, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_api_refuses_anonymous_and_unauthorized_clients(kube_api: Any) -> None:
    pki = kube_api.plane.pki
    anonymous = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    assert _get(f"{kube_api.server}/readyz", anonymous) == 401
    admin = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    admin.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    assert _get(f"{kube_api.server}/readyz", admin) == 200
    # KWOK's identity has exactly its RBAC: nodes and pods, not Secrets.
    kwok = config.new_client_from_config(str(kube_api.plane.state_dir / "kwok.kubeconfig"))
    kwok.configuration.host = kube_api.server
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(kwok).list_secret_for_all_namespaces()
    assert refused.value.status == 403
    client.CoreV1Api(kwok).list_node()
    argv = kube_api.plane._apiserver_argv()
    for flag in ("--authorization-mode=Node,RBAC", "--anonymous-auth=false",
                 "--enable-admission-plugins=NodeRestriction"):  # fmt: skip
        assert flag in argv
    assert not [a for a in argv if "insecure" in a]


def test_the_controllers_run_a_job_on_a_kwok_node_to_completion(kube_api: Any) -> None:
    api = kube_api.client()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    node = {
        "metadata": {
            "name": "cp-test-node",
            "labels": {cp.MANAGED_NODES: "spark", "kubernetes.io/hostname": "cp-test-node"},
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "10"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"},
        },
    }
    core.create_node(node)
    ns = kube_api.namespace("job", {"pod-security.kubernetes.io/enforce": "baseline"})
    try:
        pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x.invalid/y:1"}],
               "nodeSelector": {"kubernetes.io/hostname": "cp-test-node"}}  # fmt: skip
        batch.create_namespaced_job(ns, {"metadata": {"name": "j"},
                                         "spec": {"template": {"spec": pod}}})  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = batch.read_namespaced_job("j", ns)
            if any(
                c.type == "Complete" and c.status == "True" for c in job.status.conditions or []
            ):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the Job did not complete on the KWOK node")
    finally:
        core.delete_node("cp-test-node")
