"""The watchdog's actions against a real control plane (kube-apiserver, controller-manager,
scheduler, etcd; KWOK plays the kubelets): a deployment rendered by the one serving render, its
rank pods running on two registered Sparks, a real test server standing in for the engine.

On a stall: evidence first, the API Service loses its endpoints (out of the gateway's routing),
every rank pod is replaced by its StatefulSet, and ``sparkrack status`` shows it; on recovery the
endpoints come back. The restart budget stops restarts and marks the deployment failed.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.dynamic import DynamicClient

from sparkrack import contract
from sparkrack.bench.server import spawn
from sparkrack.diagnose import bundle
from sparkrack.fabric.addressplan import NodeInput
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k3s import config as k3s
from sparkrack.k3s.node import registered_node
from sparkrack.k8s.common import validated
from sparkrack.serving.context import context_from_inventory
from sparkrack.serving.deployments.bundle import from_vars, render_serving
from sparkrack.serving.objects.agents import WatchdogSettings, manifests
from sparkrack.serving.objects.agents import name as watchdog_name
from sparkrack.watch.actions import Actions
from sparkrack.watch.cluster import Cluster
from sparkrack.watch.probe import ProbeConfig, run_probe
from sparkrack.watch.supervisor import Budget, State, Supervisor

ROOT = Path(__file__).resolve().parents[2]
SPARKS = ("spark1", "spark2")
NAME = "alpha"


def wait(what: str, check: Any, timeout: float = 60.0) -> float:
    """Seconds until ``check()`` is true (AssertionError after ``timeout``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if check():
            return time.monotonic() - t0
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout} s")


def rendered(tmp: Path) -> list[dict[str, Any]]:
    """The objects of deployment ``alpha`` (TP=2 on spark1+spark2) from the serving render."""
    data = yaml.safe_load((ROOT / "model_profiles" / "gemma-4-31b-it.yml").read_text())
    data["sglang"].update(mem_fraction_static=0.45)
    profile = tmp / "small.yml"
    profile.write_text(yaml.safe_dump(data))
    ctx = context_from_inventory("inventories/lab")
    dep = {"name": NAME, "profile": str(profile), "sparks": list(SPARKS), "topology": {"tp": 2}}
    docs = render_serving(from_vars({"serving_deployments": [dep]}, ctx, "inv.yml"))["manifests"]
    mine = [
        d
        for d in docs
        if (d["metadata"].get("labels") or {}).get(contract.LABEL_DEPLOYMENT) == NAME
        and d["kind"] in ("StatefulSet", "Service", "ConfigMap")
    ]
    assert {d["kind"] for d in mine} == {"StatefulSet", "Service", "ConfigMap"}
    return mine


@pytest.fixture(scope="module")
def served(kube_api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    api = kube_api.client()
    core = client.CoreV1Api(api)
    plan = load_inventory("inventories/lab").plan()
    cp = NodeInput("cp1", "172.28.250.10")
    made = []
    for host in SPARKS:
        node = registered_node(k3s.agent_config(plan, host, cp, k3s.options_from({})), "aarch64")
        with contextlib.suppress(client.ApiException):
            core.create_node(node)
            made.append(node["metadata"]["name"])
    ns = kube_api.namespace("watch", {"pod-security.kubernetes.io/enforce": "privileged"})
    # The agents' namespace beside it, at the level the render gives it.
    agents = {
        "name": contract.agents_namespace(ns),
        "labels": dict(contract.AGENTS_NAMESPACE_LABELS),
    }
    core.create_namespace({"metadata": agents})
    dyn = DynamicClient(api)
    for doc in rendered(tmp_path_factory.mktemp("render")):
        doc["metadata"]["namespace"] = ns
        dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(
            body=doc, namespace=ns
        )
    cluster = Cluster(api, ns)
    wait("two ranks Ready", lambda: cluster.view(NAME).ranks_ready() == (2, 2), 90)
    try:
        yield cluster
    finally:
        core.delete_namespace(ns)
        core.delete_namespace(contract.agents_namespace(ns))
        for name in made:
            with contextlib.suppress(client.ApiException):
                core.delete_node(name)


def api_service(cluster: Cluster) -> str:
    view = cluster.view(NAME)
    assert view.api_service is not None
    return str(view.api_service.metadata.name)


def uids(cluster: Cluster) -> set[str]:
    return {p.metadata.uid for p in cluster.view(NAME).pods}


def status(kube_api: Any, cluster: Cluster, evidence: Path) -> tuple[int, list[dict[str, Any]]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkrack",
            "status",
            "--namespace",
            cluster.namespace,
            "--kubeconfig",
            str(kube_api.kubeconfig),
            "--evidence",
            str(evidence),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_a_stall_captures_evidence_unroutes_restarts_and_recovers(
    kube_api: Any, served: Cluster, tmp_path: Path
) -> None:
    cluster = served
    service = api_service(cluster)
    wait("endpoints of the API Service", lambda: len(cluster.ready_endpoints(service)) == 1)
    code, rows = status(kube_api, cluster, tmp_path)
    assert (code, rows[0]["watchdog"], rows[0]["ranks_ready"]) == (0, "no watchdog", "2/2")
    assert rows[0]["serving"] is True

    actions = Actions(NAME, "", cluster, tmp_path, "model-alpha", Supervisor(Budget(3, 600, 0)))
    with spawn(["--rate", "100", "--stall-after", "2"]) as url:
        stalled = run_probe(ProbeConfig(url=url, stall_s=1.5))
    before = uids(cluster)
    names = tuple(p.metadata.name for p in cluster.view(NAME).pods)
    detected = time.monotonic()
    decision = actions.apply(stalled)
    assert decision.state is State.RESTARTING and decision.restart

    # Evidence first, of the group as it was: its pods, its events, what could not be read.
    [path] = bundle.bundles(tmp_path)
    evidence = bundle.read(path)
    assert evidence.identity is not None
    assert evidence.identity.pods == names
    assert len(evidence.identity.pods) == 2 and evidence.verdict is not None
    assert evidence.verdict["verdict"] == "stalled"
    assert any(e["reason"] == "Scheduled" for e in evidence.events), evidence.events
    # KWOK runs no container: there is no log to read, and the bundle says so.
    *captured, where = evidence.notes
    assert captured and all("log of" in n for n in captured)
    assert "/var/lib/sparkrack/flight-recorder/alpha" in where

    # Out of routing: the API Service keeps no endpoint while the group is sick.
    wait("API Service without endpoints", lambda: cluster.ready_endpoints(service) == [])
    # The whole group restarted: every rank pod replaced, Ready again within 60 s of detection.
    wait(
        "every rank pod replaced", lambda: not (uids(cluster) & before) and len(uids(cluster)) == 2
    )
    wait("new group Ready", lambda: cluster.view(NAME).ranks_ready() == (2, 2))
    took = time.monotonic() - detected
    print(f"stall detected -> evidence, unrouted, group restarted and Ready: {took:.1f} s")
    assert took <= 60

    code, rows = status(kube_api, cluster, tmp_path)
    assert code == 1
    assert rows[0]["watchdog"] == "restarting" and rows[0]["routed"] is False
    assert rows[0]["watchdog_restarts"] == 1 and rows[0]["evidence"] == str(path)
    assert "stalled after 2 tokens" in rows[0]["last_verdict"]

    with spawn(["--rate", "100"]) as url:
        healthy = run_probe(ProbeConfig(url=url, stall_s=1.5))
    assert actions.apply(healthy).state is State.RECOVERED
    wait("endpoints back", lambda: len(cluster.ready_endpoints(service)) == 1)
    code, rows = status(kube_api, cluster, tmp_path)
    assert (code, rows[0]["watchdog"], rows[0]["routed"]) == (0, "recovered", True)
    assert actions.apply(healthy).state is State.HEALTHY
    assert bundle.bundles(tmp_path) == [path], "a healthy verdict writes no evidence"


def test_the_restart_budget_stops_restarting_and_marks_the_deployment_failed(
    kube_api: Any, served: Cluster, tmp_path: Path
) -> None:
    cluster = served
    wait("group Ready", lambda: cluster.view(NAME).ranks_ready() == (2, 2))
    with spawn(["--rate", "100", "--stall-after", "1"]) as url:
        stalled = run_probe(ProbeConfig(url=url, stall_s=1.0))
    actions = Actions(NAME, "", cluster, tmp_path, supervisor=Supervisor(Budget(2, 600, 0)))
    for n in (1, 2):
        before = uids(cluster)
        assert actions.apply(stalled).restart, f"restart {n} is within the budget"
        wait("pods replaced", lambda b=before: not (uids(cluster) & b))  # type: ignore[misc]
        wait("group Ready", lambda: cluster.view(NAME).ranks_ready() == (2, 2))
    # A watchdog that starts again reads the budget from the cluster: still spent.
    again = Actions(NAME, "", cluster, tmp_path, supervisor=Supervisor(Budget(2, 600, 0)))
    again.load_state()
    assert len(again.supervisor.restarts) == 2
    before = uids(cluster)
    decision = again.apply(stalled)
    assert decision.state is State.FAILED and not decision.restart
    assert "restart budget spent" in decision.message
    time.sleep(3)
    assert uids(cluster) == before, "past the budget no pod is deleted"
    code, rows = status(kube_api, cluster, tmp_path)
    assert (code, rows[0]["watchdog"], rows[0]["routed"]) == (1, "failed", False)
    # Negative control: a budget with room left restarts.
    roomy = Actions(NAME, "", cluster, tmp_path, supervisor=Supervisor(Budget(3, 600, 0)))
    roomy.load_state()
    roomy.supervisor.state = State.STALLED
    assert roomy.apply(stalled).restart
    with spawn(["--rate", "100"]) as url:
        roomy.apply(run_probe(ProbeConfig(url=url, stall_s=1.5)))
    wait("group Ready", lambda: cluster.view(NAME).ranks_ready() == (2, 2))


def sa_kubeconfig(
    kube_api: Any,
    cluster: Cluster,
    account: str,
    path: Path,
    pod: Any | None = None,
    namespace: str | None = None,
) -> Path:
    """A kubeconfig that authenticates as ``account`` of ``namespace`` (default: the cluster's;
    a token from the TokenRequest API; with ``pod``, bound to that pod as the kubelet binds a
    pod's own token, its node named in it)."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if pod is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.metadata.name,
            "uid": pod.metadata.uid,
        }
    token = cluster.core.create_namespaced_service_account_token(
        account, namespace or cluster.namespace, {"spec": spec}
    ).status.token
    admin = yaml.safe_load(kube_api.kubeconfig.read_text())
    admin["users"] = [{"name": account, "user": {"token": token}}]
    for ctx in admin["contexts"]:
        ctx["context"]["user"] = account
    path.write_text(yaml.safe_dump(admin))
    return path


def test_the_deployed_watchdog_can_do_its_job_with_its_role_and_no_more(
    kube_api: Any, served: Cluster, tmp_path: Path
) -> None:
    cluster = served
    agents = contract.agents_namespace(cluster.namespace)
    settings = WatchdogSettings(image="registry.invalid/sparkrack@sha256:" + "0" * 64)
    docs = validated(
        manifests(
            NAME, cluster.namespace, "http://x:30000", "model-alpha", settings, ranks=2,
            agents=agents,
        ),
        "test",
    )  # fmt: skip
    dyn = DynamicClient(cluster.core.api_client)
    for doc in docs:
        if doc["kind"] == "ConfigMap":  # the state object: the serving render made it already
            continue
        dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(
            body=doc, namespace=doc["metadata"]["namespace"]
        )
    account = watchdog_name(NAME)
    config = sa_kubeconfig(kube_api, cluster, account, tmp_path / "sa.kubeconfig", None, agents)
    wait("group Ready", lambda: cluster.view(NAME).ranks_ready() == (2, 2))
    before = uids(cluster)
    # The watchdog's own pod carries the deployment's label too: never part of the group.
    watchdog_pods = f"{contract.LABEL_COMPONENT}={contract.COMPONENT_WATCHDOG}"

    def own_pods() -> set[str]:
        found = cluster.core.list_namespaced_pod(agents, label_selector=watchdog_pods)
        return {p.metadata.uid for p in found.items}

    wait("the watchdog's pod exists", lambda: len(own_pods()) == 1)
    mine = own_pods()
    assert len(before) == 2
    with spawn(["--rate", "100", "--stall-after", "2"]) as url:
        proc = subprocess.run(
            [sys.executable, "-m", "sparkrack", "watch", "--once", "--url", url]
            + ["--stall-after", "1.5", "--deployment", NAME, "--namespace", cluster.namespace]
            + ["--ranks", "2"]
            + ["--kubeconfig", str(config), "--evidence", str(tmp_path / "ev")]
            + ["--max-restarts", "100", "--restart-grace", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "restarted the group" in proc.stdout, proc.stdout
    wait("pods replaced", lambda: not (uids(cluster) & before))
    assert own_pods() == mine, "the group restart deleted the watchdog's own pod"
    assert len(bundle.bundles(tmp_path / "ev")) == 1
    assert cluster.view(NAME).annotations()[contract.WATCHDOG_STATE_ANNOTATION] == "restarting"

    # Its state is in its own ConfigMap; no StatefulSet carries it.
    head = cluster.view(NAME).head
    assert contract.WATCHDOG_STATE_ANNOTATION not in (head.metadata.annotations or {})
    # No more than it needs: its token patches no StatefulSet (not even its deployment's: one
    # patch of a pod template is a privileged pod on a chosen node), touches no object of
    # another deployment, reads no log but its ranks'.
    watchdog_api = kube_config.new_client_from_config(config_file=str(config))
    as_apps, as_core = client.AppsV1Api(watchdog_api), client.CoreV1Api(watchdog_api)
    beta = client.AppsV1Api(cluster.core.api_client).create_namespaced_stateful_set(
        cluster.namespace,
        {
            "metadata": {
                "name": "sparkrack-beta-r0",
                "labels": {contract.LABEL_DEPLOYMENT: "beta"},
            },
            "spec": {
                "replicas": 0,
                "serviceName": "sparkrack-beta",
                "selector": {"matchLabels": {"app": "beta"}},
                "template": {
                    "metadata": {"labels": {"app": "beta"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]},
                },
            },
        },
    )
    patch = {"spec": {"template": {"spec": {"hostPID": True}}}}
    for target in (beta.metadata.name, head.metadata.name):
        with pytest.raises(client.ApiException) as refused:
            as_apps.patch_namespaced_stateful_set(target, cluster.namespace, patch)
        assert refused.value.status == 403, target
    client.AppsV1Api(cluster.core.api_client).delete_namespaced_stateful_set(
        beta.metadata.name, cluster.namespace
    )
    with pytest.raises(client.ApiException) as refused:
        as_core.patch_namespaced_config_map(
            watchdog_name("beta"), cluster.namespace, {"metadata": {"annotations": {"a": "b"}}}
        )
    assert refused.value.status == 403
    # Negative control of the refusals: its own state object is its to write.
    as_core.patch_namespaced_config_map(
        account, cluster.namespace, {"metadata": {"annotations": {"probe": "ok"}}}
    )
    as_core.patch_namespaced_config_map(
        account, cluster.namespace, {"metadata": {"annotations": {"probe": None}}}
    )
    # And its token reads no Secret and deletes no StatefulSet.
    as_watchdog = client.AuthorizationV1Api(
        kube_config.new_client_from_config(config_file=str(config))
    )
    for verb, resource, group in (("get", "secrets", ""), ("delete", "statefulsets", "apps")):
        review = as_watchdog.create_self_subject_access_review(
            {
                "spec": {
                    "resourceAttributes": {
                        "namespace": cluster.namespace,
                        "verb": verb,
                        "resource": resource,
                        "group": group,
                    }
                }
            }
        )
        assert review.status.allowed is False, (verb, resource)
    # Negative control of the review: what the Role grants is allowed, for its own pods only.
    own_pod = cluster.view(NAME).pods[0].metadata.name
    for pod, allowed in ((own_pod, True), ("sparkrack-beta-r0-0", False)):
        review = as_watchdog.create_self_subject_access_review(
            {
                "spec": {
                    "resourceAttributes": {
                        "namespace": cluster.namespace,
                        "verb": "delete",
                        "resource": "pods",
                        "name": pod,
                    }
                }
            }
        )
        assert review.status.allowed is allowed, pod
    with spawn(["--rate", "100"]) as url:
        Actions(NAME, "", cluster, supervisor=Supervisor(Budget(100, 600, 0))).apply(
            run_probe(ProbeConfig(url=url, stall_s=1.5))
        )
    # status reads whether the deployed watchdog watches from its Deployment: its pod (an
    # image no node can pull) is not Ready, so the state it holds is history, and status fails.
    wait("group Ready after the restart", lambda: cluster.view(NAME).ranks_ready() == (2, 2))
    code, rows = status(kube_api, cluster, tmp_path)
    shown = (code, rows[0]["watchdog"], rows[0]["serving"])
    assert shown == (1, "watchdog not running (last state: healthy)", True), rows
    # Negative control: without the Deployment the same state is shown as the one written.
    cluster.apps.delete_namespaced_deployment(account, agents)
    wait("the watchdog's Deployment gone", lambda: cluster.view(NAME).watchdog is None)
    code, rows = status(kube_api, cluster, tmp_path)
    assert (code, rows[0]["watchdog"]) == (0, "healthy"), rows


def test_status_watch_redraws_a_state_change_and_ends_on_its_bound_or_ctrl_c(
    kube_api: Any, served: Cluster, tmp_path: Path
) -> None:
    """Two frames of one ``status --watch`` run show the state the watchdog wrote in between;
    ``--count`` ends it with the last frame's code, ^C ends it without a traceback."""
    cluster = served
    # The watchdog runs here as this test's own Actions: no deployed watchdog Deployment (an
    # earlier test's may be left when that test failed) tells status that none runs.
    if cluster.view(NAME).watchdog is not None:
        cluster.apps.delete_namespaced_deployment(
            watchdog_name(NAME), contract.agents_namespace(cluster.namespace)
        )
        wait("no watchdog Deployment", lambda: cluster.view(NAME).watchdog is None)
    wait("group Ready", lambda: cluster.view(NAME).ranks_ready() == (2, 2))
    with spawn(["--rate", "100"]) as url:
        healthy = run_probe(ProbeConfig(url=url, stall_s=1.5))
    with spawn(["--rate", "100", "--stall-after", "1"]) as url:
        stalled = run_probe(ProbeConfig(url=url, stall_s=1.0))
    actions = Actions(NAME, "", cluster, supervisor=Supervisor(Budget(100, 600, 0)))
    actions.apply(healthy)
    assert actions.apply(healthy).state is State.HEALTHY
    argv = [sys.executable, "-m", "sparkrack", "status", "--namespace", cluster.namespace]
    argv += ["--kubeconfig", str(kube_api.kubeconfig), "--watch", "1"]

    def frames(text: str) -> list[str]:
        return [f for f in text.split("--- ")[1:] if NAME in f]

    proc = subprocess.Popen([*argv, "--count", "6"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline() + proc.stdout.readline()
    assert f"{NAME}: healthy" in first, first
    actions.supervisor.state = State.STALLED  # a stall seen: this verdict restarts the group
    assert actions.apply(stalled).restart
    out, _ = proc.communicate(timeout=60)
    shown = frames(first + out)
    assert len(shown) == 6, shown
    assert f"{NAME}: healthy" in shown[0] and f"{NAME}: restarting" in shown[-1], shown
    assert "NOT ROUTED" in shown[-1]
    assert proc.returncode == 1, "the last frame is not healthy"

    wait("group Ready", lambda: cluster.view(NAME).ranks_ready() == (2, 2))
    actions.apply(healthy)
    done = subprocess.run([*argv, "--count", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and f"{NAME}: recovered" in done.stdout, done.stdout

    # A terminal's ^C: a shell that started the tests in the background ignores SIGINT, and a
    # Python started with SIGINT ignored keeps ignoring it.
    interrupted = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert interrupted.stdout is not None
    assert NAME in interrupted.stdout.readline() + interrupted.stdout.readline()
    interrupted.send_signal(signal.SIGINT)
    out, err = interrupted.communicate(timeout=30)
    assert interrupted.returncode in (0, 1) and "Traceback" not in err, err
    actions.apply(healthy)


def test_the_rendered_watchdog_passes_the_api_server_before_its_account_exists(
    kube_api: Any,
) -> None:
    """The serve play's check: every watchdog object of the lab's render and its pod, dry-run
    against the real API in a namespace where the watchdog's account does not exist yet."""
    from sparkrack.k8s.reconcile import dry_run_objects, template_pod
    from sparkrack.serving.deployments.bundle import from_inventory

    api = kube_api.client()
    ns = kube_api.namespace("wdry", {"pod-security.kubernetes.io/enforce": "privileged"})
    # The agents' namespace at the level the render gives it: the API refuses there any pod
    # that needs more than ``restricted``.
    agents = kube_api.namespace("wdry-agents", dict(contract.AGENTS_NAMESPACE_LABELS))
    rendered = render_serving(from_inventory("inventories/lab"))
    moved = {rendered["namespace"]: ns, rendered["agents_namespace"]: agents}
    mine = [
        {**d, "metadata": {**d["metadata"], "namespace": moved[d["metadata"]["namespace"]]}}
        for d in rendered["manifests"]
        if d["metadata"].get("labels", {}).get(contract.LABEL_COMPONENT) == "watchdog"
        and d["metadata"]["labels"].get(contract.LABEL_DEPLOYMENT) == "gemma"
    ]
    for doc in mine:
        for subject in doc.get("subjects", []):
            subject["namespace"] = moved[subject["namespace"]]
    # The account, the pod and its policy in the agents' namespace; the rights in the serving one.
    where = {d["kind"]: d["metadata"]["namespace"] for d in mine}
    assert where["Role"] == where["RoleBinding"] == where["ConfigMap"] == ns
    assert where["ServiceAccount"] == where["Deployment"] == where["NetworkPolicy"] == agents
    assert sorted(d["kind"] for d in mine) == [
        "ConfigMap", "Deployment", "NetworkPolicy", "Role", "RoleBinding", "ServiceAccount",
    ]  # fmt: skip
    dyn = DynamicClient(api)
    for doc in dry_run_objects(mine):
        dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(
            body=doc, namespace=doc["metadata"]["namespace"], dry_run="All"
        )
    # Negative control: the pod as its Deployment names it is refused while its account is
    # missing (what the dry-run's substitution avoids).
    [deployment] = [d for d in mine if d["kind"] == "Deployment"]
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(api).create_namespaced_pod(agents, template_pod(deployment), dry_run="All")
    assert "service account" in str(refused.value.body)
    # Negative control: the same pod with its evidence on a hostPath is refused there.
    pod = template_pod(deployment)
    pod["spec"]["serviceAccountName"] = "default"
    pod["spec"]["volumes"][0] = {"name": "evidence", "hostPath": {"path": "/var/lib/x"}}
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(api).create_namespaced_pod(agents, pod, dry_run="All")
    assert "restricted" in str(refused.value.body) and "hostPath" in str(refused.value.body)
