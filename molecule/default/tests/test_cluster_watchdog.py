"""The stall watchdog against the lab's real API after site.yml: the serve play applied one per
deployment (least-privilege account, policy, hardened Deployment, evidence directory); then
``sparkrack watch`` runs as that watchdog, with its ServiceAccount's own token, against a real
``sparkrack bench-server`` standing in for rank 0 (KWOK pods run no container), and
``sparkrack status -i`` shows each state.

Order on the lab: healthy -> down (stalled, out of routing) -> stalling (evidence, group
restarted, again, then the budget spent: failed, no more restarts) -> healthy (recovered, routed
again). The test leaves the deployment as it found it (annotations cleared, routed, ranks Ready):
the lifecycle tests after it and their rerun (changed=0) start from converge's state.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import LAB_INVENTORY, ROOT, admin, host_of, kube, recap_changed, run_play
from kubernetes import client

from sparkrack import contract
from sparkrack.bench.server import spawn
from sparkrack.diagnose import bundle
from sparkrack.serving.deployments.bundle import from_inventory, render_serving
from sparkrack.serving.objects.agents import name as watchdog_name
from sparkrack.watch import metrics
from sparkrack.watch.cluster import Cluster

LAB_VARS = yaml.safe_load((ROOT / "inventories/lab/group_vars/all.yml").read_text())
NS = LAB_VARS["serving_namespace"]
AGENTS = contract.agents_namespace(NS)
"""The watchdogs' accounts, pods and policies live there; their Roles and state in NS."""
TARGET = "gemma"
STATE = contract.WATCHDOG_STATE_ANNOTATION


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    return render_serving(from_inventory(LAB_INVENTORY))


def test_every_deployment_has_its_watchdog(rendered: dict[str, Any]) -> None:
    core, rbac = client.CoreV1Api(kube()), client.RbacAuthorizationV1Api(kube())
    apps, net = client.AppsV1Api(kube()), client.NetworkingV1Api(kube())
    assert rendered["names"], "the lab serves no deployment"
    for dep in rendered["names"]:
        obj = watchdog_name(dep)
        wd = apps.read_namespaced_deployment(obj, AGENTS)
        assert wd.metadata.labels[contract.LABEL_DEPLOYMENT] == dep
        pod = wd.spec.template.spec
        assert pod.service_account_name == obj and pod.automount_service_account_token
        assert pod.security_context.run_as_non_root and pod.security_context.run_as_user == 65532
        [c] = pod.containers
        assert c.image == LAB_VARS["serving_watchdog_image"]
        assert c.security_context.read_only_root_filesystem
        assert c.security_context.privileged is False
        assert not c.security_context.allow_privilege_escalation
        assert core.read_namespaced_service_account(obj, AGENTS)
        role = rbac.read_namespaced_role(obj, NS)
        assert not any("secrets" in (r.resources or []) for r in role.rules)
        # Every right it has but reading events names its objects; its state has an object of
        # its own.
        assert all(r.resource_names for r in role.rules if r.resources != ["events"])
        assert core.read_namespaced_config_map(obj, NS).metadata.labels == wd.metadata.labels
        binding = rbac.read_namespaced_role_binding(obj, NS)
        assert binding.role_ref.name == obj
        assert [(s.name, s.namespace) for s in binding.subjects] == [(obj, AGENTS)]
        policy = net.read_namespaced_network_policy(obj, AGENTS)
        assert policy.spec.policy_types == ["Ingress", "Egress"]
    evidence = host_of("cp1").file(
        LAB_VARS.get("serving_watchdog_evidence_dir", "/var/lib/sparkrack/evidence")
    )
    assert evidence.is_directory and evidence.uid == contract.SERVING_UID
    assert evidence.mode == 0o750


FIGURES = ROOT / "lab" / ".state" / "watchdog-lab.json"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def token_kubeconfig(tmp: Path, account: str) -> Path:
    """A kubeconfig carrying only the watchdog ServiceAccount's own token (TokenRequest): the
    rights the pod would have in the cluster, nothing of the admin's."""
    core = client.CoreV1Api(admin())
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = core.create_namespaced_service_account_token(account, AGENTS, request).status.token
    cfg = kube().configuration
    path = tmp / "watchdog.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "lab",
                        "cluster": {"server": cfg.host, "certificate-authority": cfg.ssl_ca_cert},
                    }
                ],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": "watchdog",
                        "context": {"cluster": "lab", "user": account, "namespace": NS},
                    }
                ],
                "current-context": "watchdog",
            }
        )
    )
    path.chmod(0o600)
    return path


class Lines:
    """A child's stdout, each line with the monotonic time it arrived."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.seen.append((time.monotonic(), line.rstrip()))

    def first(self, text: str, after: float = 0.0) -> float | None:
        return next((t for t, line in self.seen if t >= after and text in line), None)

    def text(self) -> str:
        return "\n".join(line for _, line in self.seen)


@contextlib.contextmanager
def server(port: int, *args: str) -> Iterator[str]:
    with spawn(["--port", str(port), "--rate", "50", *args]) as url:
        yield url


def wait(what: str, check: Callable[[], Any], timeout: float = 90.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if check():
            return time.monotonic()
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout} s")


def status_rows(kubeconfig: Path) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "sparkrack", "status", "-i", str(LAB_INVENTORY),
         "--kubeconfig", str(kubeconfig), "--json"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout, proc.stderr
    rows = {r["deployment"]: r for r in json.loads(proc.stdout)}
    return proc.returncode, rows[TARGET]


def probes_made(metrics_port: int) -> int:
    """The watchdog's own count of its probes, from its metrics endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith(f"{metrics.PREFIX}_probes_total")
    )


def between_probes(metrics_port: int) -> None:
    """Return just after the watchdog finished a probe, so that a server stopped now is gone
    before the next one (``--interval`` later): the probe meets nothing listening. A stream the
    stop cut off would be an erroring verdict instead, which restarts the group."""
    seen = probes_made(metrics_port)
    wait("the next probe", lambda: probes_made(metrics_port) > seen, 30)


def admin_kubeconfig(tmp: Path) -> Path:
    from conftest import lab

    return Path(lab().CONTROL_PLANE_STATE / "admin.kubeconfig")


def test_a_stalled_deployment_is_restarted_within_its_budget_and_routed_back(
    tmp_path: Path,
) -> None:
    cluster = Cluster(admin(), NS)
    service = cluster.view(TARGET).api_service
    assert service is not None
    api_service = str(service.metadata.name)
    ranks = cluster.view(TARGET).ranks_ready()[1]
    wait("ranks Ready", lambda: cluster.view(TARGET).ranks_ready() == (ranks, ranks))
    wait("API Service endpoints", lambda: len(cluster.ready_endpoints(api_service)) == 1)

    def state() -> str:
        return cluster.view(TARGET).annotations().get(STATE, "")

    def uids() -> set[str]:
        return {p.metadata.uid for p in cluster.view(TARGET).pods}

    kubeconfig = token_kubeconfig(tmp_path, watchdog_name(TARGET))
    # Its own rights: it may delete pods, never read Secrets (negative control of the token).
    own = client.CoreV1Api(__import__("kubernetes").config.new_client_from_config(str(kubeconfig)))
    for namespace in (NS, AGENTS):
        with pytest.raises(client.ApiException) as refused:
            own.list_namespaced_secret(namespace)
        assert refused.value.status == 403
    admin_kc = admin_kubeconfig(tmp_path)
    evidence = tmp_path / "evidence"
    port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    watch = [
        sys.executable, "-m", "sparkrack", "watch", "--url", f"http://127.0.0.1:{port}",
        "--name", TARGET, "--deployment", TARGET, "--namespace", NS, "--alias", TARGET,
        "--kubeconfig", str(kubeconfig), "--stall-after", "2", "--interval", "3",
        "--ranks", rendered_ranks(),
        "--max-restarts", "2", "--restart-window", "600", "--restart-grace", "0",
        "--evidence", str(evidence), "--metrics-port", str(metrics_port),
    ]  # fmt: skip
    proc = subprocess.Popen(
        watch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines = Lines(proc)
    try:
        with server(port):
            wait("healthy", lambda: state() == "healthy", 60)
            cpu0, wall0 = cpu_seconds(proc.pid), time.monotonic()
            code, row = status_rows(admin_kc)
            assert row["watchdog"] == "healthy" and row["routed"], row
            between_probes(metrics_port)

        # Nothing listens: out of routing, nothing restarted (the kubelet's business).
        before = uids()
        wait("stalled (down)", lambda: state() == "stalled", 60)
        wait("API Service without endpoints", lambda: cluster.ready_endpoints(api_service) == [])
        code, row = status_rows(admin_kc)
        assert (code, row["watchdog"], row["routed"]) == (1, "stalled", False), row
        assert uids() == before

        # Tokens stop after 3: evidence, the whole group restarted, twice, then failed.
        with server(port, "--stall-after", "3"):
            detected = wait("a stall verdict", lambda: lines.first("stalled after") is not None, 60)
            detected = lines.first("stalled after") or detected
            restarted = wait(
                "every rank pod replaced",
                lambda: not (uids() & before) and len(uids()) == ranks,
                60,
            )
            figures = {"stall_verdict_to_group_replaced_s": round(restarted - detected, 1)}
            assert restarted - detected <= 60
            assert state() in ("restarting", "failed")
            wait("restart budget spent", lambda: state() == "failed", 60)
            notes = cluster.view(TARGET).annotations()
            assert len(notes[contract.WATCHDOG_RESTARTS_ANNOTATION].split(",")) == 2
            code, row = status_rows(admin_kc)
            assert (code, row["watchdog"], row["routed"]) == (1, "failed", False), row
            assert row["watchdog_restarts"] == 2
            wait(
                "group Ready after the last restart",
                lambda: cluster.view(TARGET).ranks_ready() == (ranks, ranks),
            )
            spent = uids()
            time.sleep(10)  # three more stalled probes
            assert uids() == spent, "restarted past its budget"
            assert state() == "failed" and "budget spent" in lines.text()
        found = bundle.bundles(evidence)
        assert len(found) >= 3, found  # down, each restart, the failure
        stalled = [bundle.read(p) for p in found]
        assert any(e.verdict and e.verdict["verdict"] == "stalled" for e in stalled)
        assert all(e.identity and e.identity.namespace == NS for e in stalled)
        assert any(e.identity and len(e.identity.pods) == ranks for e in stalled)

        with server(port):
            wait("recovered", lambda: state() == "recovered", 60)
            cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - wall0
            figures.update(watch_cpu_s=round(cpu, 2), over_s=round(wall), interval_s=3)
            # The lab figures beside the step timings lab.py writes (not committed).
            FIGURES.write_text(json.dumps({**figures, "load": os.getloadavg()}) + "\n")
            # Stopped while it says recovered (the next healthy probe would say healthy).
            proc.terminate()
            proc.wait(timeout=20)
        wait("endpoints back", lambda: len(cluster.ready_endpoints(api_service)) == 1)
        wait("ranks Ready", lambda: cluster.view(TARGET).ranks_ready() == (ranks, ranks))
        code, row = status_rows(admin_kc)
        assert (code, row["watchdog"], row["routed"]) == (0, "recovered", True), row
        print(lines.text())
    except BaseException:
        print(f"--- the watchdog's output ---\n{lines.text()}\n--- events in {NS} ---")
        for ev in client.CoreV1Api(admin()).list_namespaced_event(NS).items:
            print(ev.last_timestamp, ev.involved_object.name, ev.reason, ev.message)
        raise
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        cluster.set_routable(TARGET, True)
        cluster.annotate(TARGET, {STATE: None, contract.WATCHDOG_VERDICT_ANNOTATION: None,
                                  contract.WATCHDOG_RESTARTS_ANNOTATION: None})  # fmt: skip
        wait("ranks Ready again", lambda: cluster.view(TARGET).ranks_ready() == (ranks, ranks))


def test_the_watchdog_probes_with_the_deployments_key_and_a_refused_key_restarts_nothing(
    tmp_path: Path,
) -> None:
    """The watchdog as the serve play applied it: its key from the deployment's Secret (the
    ``secretKeyRef`` of its Deployment, resolved here as the kubelet would), against a stand-in
    keyed as the engine is. With the key: healthy. Without it (negative control): the stand-in
    answers 401, the verdict is config-error, and nothing is restarted or taken out of routing."""
    cluster = Cluster(admin(), NS)
    service = cluster.view(TARGET).api_service
    assert service is not None
    api_service = str(service.metadata.name)
    ranks = cluster.view(TARGET).ranks_ready()[1]
    wait("ranks Ready", lambda: cluster.view(TARGET).ranks_ready() == (ranks, ranks))
    wait("API Service endpoints", lambda: len(cluster.ready_endpoints(api_service)) == 1)
    applied = client.AppsV1Api(kube()).read_namespaced_deployment(watchdog_name(TARGET), AGENTS)
    [container] = applied.spec.template.spec.containers
    assert container.args[container.args.index("--api-key-env") + 1] == contract.ENGINE_KEY_ENV
    [ref] = [
        e.value_from.secret_key_ref for e in container.env if e.name == contract.ENGINE_KEY_ENV
    ]
    data = client.CoreV1Api(admin()).read_namespaced_secret(ref.name, AGENTS).data
    key = base64.b64decode(data[ref.key]).decode()
    assert key and key not in json.dumps(applied.to_dict(), default=str)

    def state() -> str:
        return cluster.view(TARGET).annotations().get(STATE, "")

    def verdict() -> str:
        notes = cluster.view(TARGET).annotations()
        return notes.get(contract.WATCHDOG_VERDICT_ANNOTATION) or ""

    def uids() -> set[str]:
        return {p.metadata.uid for p in cluster.view(TARGET).pods}

    kubeconfig = token_kubeconfig(tmp_path, watchdog_name(TARGET))
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    base.pop(contract.ENGINE_KEY_ENV, None)
    watch = [
        sys.executable, "-m", "sparkrack", "watch", "--url", f"http://127.0.0.1:{port}",
        "--name", TARGET, "--deployment", TARGET, "--namespace", NS, "--alias", TARGET,
        "--kubeconfig", str(kubeconfig), "--stall-after", "2", "--interval", "2",
        "--ranks", rendered_ranks(),
        "--max-restarts", "2", "--restart-window", "600", "--restart-grace", "0",
        "--evidence", str(tmp_path / "evidence"), "--metrics-port", str(free_port()),
        "--api-key-env", contract.ENGINE_KEY_ENV,
    ]  # fmt: skip
    before = uids()
    procs: list[subprocess.Popen[str]] = []
    try:
        keyed = ["--port", str(port), "--rate", "50", "--api-key-env", "STANDIN_ENGINE_KEY"]
        with spawn(keyed, env={"STANDIN_ENGINE_KEY": key}):
            with_key = subprocess.Popen(
                watch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                env={**base, contract.ENGINE_KEY_ENV: key},
            )  # fmt: skip
            procs.append(with_key)
            wait("healthy with the key", lambda: state() == "healthy", 60)
            assert " healthy: " in verdict(), verdict()
            with_key.terminate()
            with_key.wait(timeout=20)
            cluster.annotate(TARGET, {STATE: None, contract.WATCHDOG_VERDICT_ANNOTATION: None})

            without = subprocess.Popen(
                watch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=base
            )
            procs.append(without)
            lines = Lines(without)
            wait("config-error without the key", lambda: " config-error: " in verdict(), 60)
            assert "HTTP 401" in verdict(), verdict()
            time.sleep(8)  # several more refused probes
            assert " config-error: " in verdict() and state() != "restarting"
            assert uids() == before, "a refused key restarted the group"
            assert len(cluster.ready_endpoints(api_service)) == 1, "a refused key unrouted it"
            without.terminate()
            without.wait(timeout=20)
            assert key not in lines.text()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
        cluster.set_routable(TARGET, True)
        cluster.annotate(TARGET, {STATE: None, contract.WATCHDOG_VERDICT_ANNOTATION: None,
                                  contract.WATCHDOG_RESTARTS_ANNOTATION: None})  # fmt: skip


def _guarding(rendered: dict[str, Any]) -> dict[str, list[str]]:
    """The live watchdog and memory-guard objects by kind, found by the render's own selector."""
    apps, rbac = client.AppsV1Api(kube()), client.RbacAuthorizationV1Api(kube())
    core, net = client.CoreV1Api(kube()), client.NetworkingV1Api(kube())
    admission = client.AdmissionregistrationV1Api(kube())
    selector = rendered["watchdog"]["selector"]
    every = {"label_selector": selector}
    listed = {
        "DaemonSet": apps.list_daemon_set_for_all_namespaces(**every),
        "Deployment": apps.list_deployment_for_all_namespaces(**every),
        "NetworkPolicy": net.list_network_policy_for_all_namespaces(**every),
        "ConfigMap": core.list_config_map_for_all_namespaces(**every),
        "RoleBinding": rbac.list_role_binding_for_all_namespaces(**every),
        "Role": rbac.list_role_for_all_namespaces(**every),
        "ServiceAccount": core.list_service_account_for_all_namespaces(**every),
        "PersistentVolumeClaim": core.list_persistent_volume_claim_for_all_namespaces(**every),
        "PersistentVolume": core.list_persistent_volume(**every),
        "ValidatingAdmissionPolicyBinding": admission.list_validating_admission_policy_binding(
            label_selector=selector
        ),
        "ValidatingAdmissionPolicy": admission.list_validating_admission_policy(
            label_selector=selector
        ),
    }
    assert set(listed) == set(rendered["watchdog"]["kinds"])
    return {
        kind: sorted(f"{o.metadata.namespace or ''}/{o.metadata.name}" for o in found.items)
        for kind, found in listed.items()
    }


def test_emptying_the_watchdog_image_removes_every_watchdog_and_the_guard(
    rendered: dict[str, Any],
) -> None:
    """``serving_watchdog_image: ""`` turns the watchdogs and the memory guard off: the serve
    play removes them all, their evidence volume with them; the next play with the image puts
    them back (the lab's state)."""
    before = _guarding(rendered)
    # Negative control: converge left a guard on the Sparks and a watchdog per deployment.
    assert before["DaemonSet"] and len(before["Deployment"]) == len(rendered["names"])
    off = run_play("playbooks/serve.yml", "-e", '{"serving_watchdog_image": ""}')
    assert off.returncode == 0, off.stdout[-3000:] + off.stderr[-2000:]
    assert _guarding(rendered) == {kind: [] for kind in before}
    on = run_play("playbooks/serve.yml")
    assert on.returncode == 0, on.stdout[-3000:] + on.stderr[-2000:]
    assert _guarding(rendered) == before
    assert recap_changed(on.stdout)["localhost"] > 0


def rendered_ranks() -> str:
    """The ``--ranks`` the render gives TARGET's watchdog: its Role names each rank's objects, so a
    watch run with its token reads them by name, never by listing."""
    applied = client.AppsV1Api(kube()).read_namespaced_deployment(watchdog_name(TARGET), AGENTS)
    [container] = applied.spec.template.spec.containers
    return str(container.args[container.args.index("--ranks") + 1])
