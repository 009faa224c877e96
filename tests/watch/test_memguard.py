"""The memory guard: its decision on real-format /proc files (and this machine's own), the
pods' cgroup charge, its API calls against a stand-in that selects pods as the API server does
(fast; the mutation check's test of the node filter), and the API action against a real control
plane (KWOK nodes).

Negative controls: above the floor nothing is stopped; pods of another node, pods without a
rank label, fabric-check pods (a rank label, another component) and pods already being deleted are
never chosen.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sparkrack import contract
from sparkrack.cli import main
from sparkrack.fabric.addressplan import NodeInput
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k3s import config as k3s
from sparkrack.k3s.node import registered_node
from sparkrack.k8s import ClusterOptions
from sparkrack.k8s.fabric_check import render_fabric_check
from sparkrack.planner.memory import DEFAULT_OS_HEADROOM_GB, GB
from sparkrack.serving import context_from_vars, load_profile, render_manifests
from sparkrack.watch import memguard
from sparkrack.watch.memguard import Floor, PodMemory, decide, read_pressure

# /proc/pressure/memory and /proc/meminfo as a Linux 6.8 kernel writes them (a GB10 under load).
PSI_CALM = """some avg10=0.00 avg60=0.00 avg300=0.00 total=13995460
full avg10=0.00 avg60=0.00 avg300=0.00 total=3743701
"""
PSI_STALLING = """some avg10=61.27 avg60=33.90 avg300=9.12 total=912334551
full avg10=24.51 avg60=12.07 avg300=3.30 total=402118733
"""
MEMINFO = """MemTotal:       128443756 kB
MemFree:          {free} kB
MemAvailable:     {available} kB
Buffers:            10240 kB
Cached:           2201632 kB
SwapCached:             0 kB
"""


def proc(tmp: Path, psi: str, free_kb: int, cache_kb: int = 0) -> Path:
    """``cache_kb`` of page cache: counted in MemAvailable, not in MemFree."""
    (tmp / "pressure").mkdir(parents=True, exist_ok=True)
    (tmp / "pressure" / "memory").write_text(psi)
    (tmp / "meminfo").write_text(MEMINFO.format(free=free_kb, available=free_kb + cache_kb))
    return tmp


PODS = [
    PodMemory("sparkrack-alpha-r0-0", "sparkrack", "u1", 61 * GB, "cgroup"),
    PodMemory("sparkrack-beta-r0-0", "sparkrack", "u2", 38 * GB, "cgroup"),
]


def test_above_the_floor_nothing_is_stopped(tmp_path: Path) -> None:
    pressure = read_pressure(proc(tmp_path, PSI_CALM, 40 * 1024 * 1024))
    decision = decide(pressure, Floor(), PODS)
    assert decision.stop is None and decision.reasons == []
    assert decision.message(pressure).startswith("above the floor: MemFree 42.9 GB")


def test_this_machines_own_proc_files_are_read() -> None:
    pressure = read_pressure(Path("/proc"))
    assert 0 < pressure.free_bytes <= pressure.available_bytes <= pressure.total_bytes
    assert 0.0 <= pressure.full_avg10 <= pressure.some_avg10 <= 100.0


def test_low_memfree_stops_the_largest_engine_pod_whatever_the_page_cache(tmp_path: Path) -> None:
    # 60 GiB of page cache: MemAvailable is 63.6 GB, MemFree 3.2 GB. The GPU cannot use the cache.
    pressure = read_pressure(proc(tmp_path, PSI_CALM, 3 * 1024 * 1024, 60 * 1024 * 1024))
    decision = decide(pressure, Floor(), PODS)
    assert decision.stop == PODS[0]
    assert decision.reasons == [
        f"MemFree 3.2 GB < floor {DEFAULT_OS_HEADROOM_GB:.1f} GB"
    ]  # fmt: skip
    message = decision.message(pressure)
    assert "stopped sparkrack/sparkrack-alpha-r0-0" in message
    assert "(MemAvailable 67.6 GB)" in message


def test_psi_full_stops_before_memfree_runs_out(tmp_path: Path) -> None:
    pressure = read_pressure(proc(tmp_path, PSI_STALLING, 20 * 1024 * 1024))
    assert (pressure.some_avg10, pressure.full_avg10) == (61.27, 24.51)
    decision = decide(pressure, Floor(), list(reversed(PODS)))
    assert decision.stop == PODS[0] and decision.reasons == ["PSI full avg10 24.51% >= 10%"]
    # a higher PSI floor: the same pressure is tolerated
    assert decide(pressure, Floor(full_avg10=30), PODS).stop is None


def test_below_the_floor_without_engine_pods_stops_nothing(tmp_path: Path) -> None:
    pressure = read_pressure(proc(tmp_path, PSI_STALLING, 1024 * 1024))
    decision = decide(pressure, Floor(), [])
    assert decision.stop is None and len(decision.reasons) == 2
    assert "no engine pod on this node" in decision.message(pressure)


@pytest.mark.parametrize(
    ("name", "text"),
    [("pressure/memory", "garbage\n"), ("meminfo", "MemTotal: 1 kB\n")],
)
def test_files_that_are_not_proc_are_refused(tmp_path: Path, name: str, text: str) -> None:
    root = proc(tmp_path, PSI_CALM, 1024)
    (root / name).write_text(text)
    with pytest.raises(ValueError, match="not /proc"):
        read_pressure(root)


def test_pod_usage_reads_memory_current_of_systemd_and_cgroupfs_pods(tmp_path: Path) -> None:
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    slice_a = tmp_path / "kubepods.slice" / "kubepods-burstable.slice"
    slice_a = slice_a / f"kubepods-burstable-pod{a.replace('-', '_')}.slice"
    slice_a.mkdir(parents=True)
    (slice_a / "memory.current").write_text(f"{61 * 2**30}\n")
    (slice_a / "cri-containerd-x.scope").mkdir()
    (slice_a / "cri-containerd-x.scope" / "memory.current").write_text("5\n")  # a container
    slice_b = tmp_path / "kubepods" / "besteffort" / f"pod{b}"
    slice_b.mkdir(parents=True)
    (slice_b / "memory.current").write_text("1048576\n")
    assert memguard.pod_usage(tmp_path, [a, b, c]) == {a: 61 * 2**30, b: 1048576}


# --- the API calls, against a stand-in that selects as the API server does -------------------------


class StandInCore:
    """The CoreV1Api calls the guard makes, answered as the API server answers them: label and
    field selectors applied (equality, inequality, existence), a field the server does not
    select pods by refused with 400; deletions and events recorded, not performed."""

    FIELDS = {
        "metadata.name": lambda p: p.metadata.name,
        "metadata.namespace": lambda p: p.metadata.namespace,
        "spec.nodeName": lambda p: p.spec.node_name,
    }

    def __init__(self, pods: list[client.V1Pod]) -> None:
        self.pods = pods
        self.deleted: list[tuple[str, str]] = []
        self.events: list[dict[str, Any]] = []

    @staticmethod
    def _match(value: str | None, requirement: str) -> bool:
        if "!=" in requirement:
            return value != requirement.split("!=", 1)[1]
        if "=" in requirement:
            return value == requirement.split("=", 1)[1].lstrip("=")
        return value is not None  # a bare key: it exists

    def _key(self, requirement: str) -> str:
        return requirement.split("!=", 1)[0].split("=", 1)[0].lstrip("!")

    def list_namespaced_pod(
        self, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> client.V1PodList:
        for req in filter(None, field_selector.split(",")):
            if self._key(req) not in self.FIELDS:
                raise client.ApiException(400, f'field label not supported: "{self._key(req)}"')
        items = []
        for p in self.pods:
            if p.metadata.namespace != namespace:
                continue
            labels = p.metadata.labels or {}
            ok = all(
                (self._key(r) not in labels)
                if r.startswith("!")
                else self._match(labels.get(self._key(r)), r)
                for r in filter(None, label_selector.split(","))
            ) and all(
                self._match(self.FIELDS[self._key(r)](p), r)
                for r in filter(None, field_selector.split(","))
            )
            if ok:
                items.append(p)
        return client.V1PodList(items=items)

    def delete_namespaced_pod(self, name: str, namespace: str, **_: Any) -> None:
        self.deleted.append((namespace, name))

    def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.events.append(body)


def pod(name: str, node: str, memory: str | None, rank: bool = True) -> dict[str, Any]:
    """A pod body; ``rank``: an engine pod (the serving component and a rank label)."""
    labels = {**contract.PART_OF, contract.LABEL_DEPLOYMENT: name.split("-")[0]}
    if rank:
        labels[contract.LABEL_COMPONENT] = contract.COMPONENT_SERVING
        labels[contract.LABEL_RANK] = "0"
    container: dict[str, Any] = {"name": "engine", "image": "registry.invalid/engine:1"}
    if memory:
        container["resources"] = {"requests": {"memory": memory}}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [container]},
    }


def as_listed(body: dict[str, Any], ns: str) -> Any:
    """A pod body as the API server returns it in a list and the client hands it over: created
    in ``ns`` with a uid, scheduled (``spec.nodeName``: its own, else the node its hostname
    selector pins it to), its resource
    quantities as strings, deserialized from JSON into a V1Pod by the client's deserializer."""
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, body["metadata"]["name"]))
    meta = {**body["metadata"], "namespace": ns, "uid": uid}
    pinned = body["spec"].get("nodeSelector", {}).get(contract.HOSTNAME_LABEL)
    spec = {**body["spec"], "nodeName": body["spec"].get("nodeName", pinned)}
    spec["containers"] = [
        {
            **c,
            "resources": {
                kind: {k: str(v) for k, v in amounts.items()}
                for kind, amounts in c.get("resources", {}).items()
            },
        }
        for c in spec["containers"]
    ]
    listed = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    with client.ApiClient() as api:
        return api.deserialize(json.dumps(listed), "V1Pod", "application/json")


def v1pod(name: str, node: str, memory: str, rank: bool = True, ns: str = "serving") -> Any:
    return as_listed(pod(name, node, memory, rank), ns)


def test_the_guard_asks_for_the_engine_pods_of_its_own_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node filter and the rank filter are the API's (selectors): the guard on spark3 never
    sees, let alone stops, the larger pod on spark4 or the larger pod without a rank."""
    core = StandInCore(
        [
            v1pod("alpha-r0", "spark3", "40Gi"),
            v1pod("beta-r0", "spark3", "20Gi"),
            v1pod("gamma-r0", "spark4", "90Gi"),  # bigger, but on another Spark
            v1pod("fetch", "spark3", "100Gi", rank=False),  # bigger, but not an engine pod
            v1pod("delta-r0", "spark3", "200Gi", ns="elsewhere"),  # bigger, another namespace
        ]
    )
    # The stand-in selects as the API does (its negative control): the other node's pods exist.
    there = core.list_namespaced_pod("serving", field_selector="spec.nodeName=spark4").items
    assert [p.metadata.name for p in there] == ["gamma-r0"]
    with pytest.raises(client.ApiException, match="field label not supported"):
        core.list_namespaced_pod("serving", field_selector="spec.nodename=spark3")
    monkeypatch.setattr(client, "CoreV1Api", lambda api: core)
    guard = memguard.Guard(object(), "spark3", "serving", grace_s=0)
    assert {p.name for p in guard.pods()} == {"alpha-r0", "beta-r0"}
    tight = read_pressure(proc(tmp_path, PSI_STALLING, 2 * 1024 * 1024))
    decision = guard.check(tight, Floor())
    alpha = str(uuid.uuid5(uuid.NAMESPACE_URL, "alpha-r0"))
    assert decision.stop == PodMemory("alpha-r0", "serving", alpha, 40 * 2**30, "requests")
    assert core.deleted == [("serving", "alpha-r0")]
    assert [e["involvedObject"]["name"] for e in core.events] == ["alpha-r0"]


def test_the_guard_ranks_engine_pods_by_their_planned_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the cluster the guard reads no cgroup: a rank pod's planned memory (the annotation the
    render writes) ranks it, before what its containers request. An annotation that is no whole
    number of bytes counts as absent (negative control: then the requests rank)."""
    planned = {"alpha-r0": "20000000000", "beta-r0": "90000000000", "gamma-r0": "1e12"}
    pods = []
    for name, size in planned.items():
        body = pod(name, "spark3", "40Gi" if name != "beta-r0" else "1Gi")
        body["metadata"]["annotations"] = {contract.PLANNED_MEMORY_ANNOTATION: size}
        pods.append(as_listed(body, "serving"))
    monkeypatch.setattr(client, "CoreV1Api", lambda api: StandInCore(pods))
    guard = memguard.Guard(object(), "spark3", "serving", grace_s=0)
    ranked = {p.name: (p.bytes, p.source) for p in guard.pods()}
    assert ranked == {
        "alpha-r0": (20e9, "plan"),
        "beta-r0": (90e9, "plan"),
        "gamma-r0": (40 * 2**30, "requests"),
    }
    tight = read_pressure(proc(tmp_path, PSI_STALLING, 2 * 1024 * 1024))
    stop = guard.check(tight, Floor()).stop
    assert stop is not None and stop.name == "beta-r0"


def test_every_rank_pod_carries_its_planned_memory() -> None:
    from sparkrack.planner.memory import GB
    from sparkrack.serving.deployments.bundle import from_inventory, render_serving

    deployments = from_inventory("inventories/lab")
    footprint = {d.name: d.res.footprint_gb for d in deployments.deployments}
    rendered = render_serving(deployments)
    for dep in rendered["deployments"]:
        sets = [d for d in dep["manifests"] if d["kind"] == "StatefulSet"]
        assert sets
        for sts in sets:
            notes = sts["spec"]["template"]["metadata"]["annotations"]
            planned = int(notes[contract.PLANNED_MEMORY_ANNOTATION])
            assert planned == round(footprint[dep["name"]] * GB) > 0, sts["metadata"]["name"]


def test_a_fabric_check_pod_is_no_engine_pod_to_the_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fabric check's pods carry a rank label (their NCCL rank) in the serving namespace, as
    the engine pods do; only the serving component tells them apart. On spark2 the guard neither
    counts nor stops the rendered fabric-check pod, though it is charged the most memory there;
    the rendered engine pod of the same node is its candidate (negative control)."""
    plan = load_inventory("inventories/lab").plan()
    ns, node = "sparkrack", plan.nodes[1].name
    ctx = context_from_vars(plan, {"serving_namespace": ns})
    [engine] = [
        as_listed({**t, "metadata": {**t["metadata"], "name": f"{d['metadata']['name']}-0"}}, ns)
        for d in render_manifests(load_profile("nemotron-3-super-120b-a12b-nvfp4"), ctx)
        if d["kind"] == "StatefulSet"
        for t in [d["spec"]["template"]]
        if t["spec"]["nodeSelector"][contract.HOSTNAME_LABEL] == node
    ]
    [check] = [
        as_listed(d, ns)
        for d in render_fabric_check(plan, ClusterOptions(namespace=ns))
        if d["kind"] == "Pod" and d["spec"]["nodeSelector"][contract.HOSTNAME_LABEL] == node
    ]
    assert engine.spec.node_name == check.spec.node_name == node
    assert contract.LABEL_RANK in check.metadata.labels  # what made it look like an engine pod
    cgroup = tmp_path / "kubepods.slice"
    for p, size in ((check, 90 * 2**30), (engine, 60 * 2**30)):
        slice_ = cgroup / f"kubepods-pod{p.metadata.uid.replace('-', '_')}.slice"
        slice_.mkdir(parents=True)
        (slice_ / "memory.current").write_text(f"{size}\n")
    core = StandInCore([check, engine])
    # The stand-in's negative control: selected by the rank label alone, both pods are listed.
    by_rank = core.list_namespaced_pod(ns, label_selector=contract.LABEL_RANK).items
    assert {p.metadata.name for p in by_rank} == {check.metadata.name, engine.metadata.name}
    monkeypatch.setattr(client, "CoreV1Api", lambda api: core)
    guard = memguard.Guard(object(), node, ns, grace_s=0)
    assert [p.name for p in guard.pods(tmp_path)] == [engine.metadata.name]
    tight = read_pressure(proc(tmp_path / "proc", PSI_STALLING, 2 * 1024 * 1024))
    decision = guard.check(tight, Floor(), tmp_path)
    assert decision.stop == PodMemory(
        engine.metadata.name, ns, engine.metadata.uid, 60 * 2**30, "cgroup"
    )
    assert core.deleted == [(ns, engine.metadata.name)]


def test_the_guards_admission_rule_is_the_engine_selector_in_cel() -> None:
    """The policy that limits the guard's deletions asks what its list asks: the serving
    component and a rank label (the real API enforces it in the deployed guard's test). A
    selector form the translation cannot say is refused, never widened (negative control)."""
    from sparkrack.serving.objects.agents import memguard_policy, selector_expression

    [rule] = [
        v
        for v in memguard_policy("n")[0]["spec"]["validations"]
        if v["message"].endswith("engine pods only")
    ]
    labels = "oldObject.metadata.labels"
    assert rule["expression"] == (
        f"has({labels}) && 'sparkrack.io/component' in {labels}"
        f" && {labels}['sparkrack.io/component'] == 'serving' && 'sparkrack.io/rank' in {labels}"
    )
    for selector in ("a!=b", "!a", "a in (b)", "a==b", "a,,b", ""):
        with pytest.raises(ValueError, match="is not key or key=value"):
            selector_expression(selector, "oldObject")


# --- against a real control plane ----------------------------------------------------------------


@pytest.fixture(scope="module")
def nodes(kube_api: Any) -> Iterator[tuple[Any, list[str]]]:
    api = kube_api.client()
    core = client.CoreV1Api(api)
    plan = load_inventory("inventories/lab").plan()
    cp = NodeInput("cp1", "172.28.250.10")
    names, made = [], []
    for host in ("spark3", "spark4"):
        node = registered_node(k3s.agent_config(plan, host, cp, k3s.options_from({})), "aarch64")
        names.append(node["metadata"]["name"])
        with contextlib.suppress(client.ApiException):
            core.create_node(node)
            made.append(node["metadata"]["name"])
    try:
        yield api, names
    finally:
        for name in made:
            with contextlib.suppress(client.ApiException):
                core.delete_node(name)


def live(core: Any, ns: str) -> set[str]:
    return {
        p.metadata.name
        for p in core.list_namespaced_pod(ns).items
        if p.metadata.deletion_timestamp is None
    }


def test_the_guard_stops_the_largest_engine_pod_on_its_node_with_evidence(
    kube_api: Any, nodes: tuple[Any, list[str]], tmp_path: Path
) -> None:
    api, (here, there) = nodes
    core = client.CoreV1Api(api)
    ns = kube_api.namespace("memguard", {"pod-security.kubernetes.io/enforce": "privileged"})
    try:
        for body in (
            pod("alpha-r0", here, "40Gi"),
            pod("beta-r0", here, "20Gi"),
            pod("gamma-r0", there, "90Gi"),  # bigger, but on another Spark
            pod("fetch", here, "100Gi", rank=False),  # bigger, but not an engine pod
        ):
            core.create_namespaced_pod(ns, body)
        guard = memguard.Guard(api, here, ns, grace_s=0)
        calm = read_pressure(proc(tmp_path / "calm", PSI_CALM, 60 * 1024 * 1024))
        assert guard.check(calm, Floor()).stop is None  # negative control
        assert live(core, ns) == {"alpha-r0", "beta-r0", "gamma-r0", "fetch"}

        tight = read_pressure(proc(tmp_path / "tight", PSI_STALLING, 2 * 1024 * 1024))
        decision = guard.check(tight, Floor())
        assert decision.stop is not None and decision.stop.name == "alpha-r0"
        assert decision.stop.source == "requests" and decision.stop.bytes == 40 * 2**30
        deadline = time.monotonic() + 30
        while "alpha-r0" in live(core, ns) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert live(core, ns) == {"beta-r0", "gamma-r0", "fetch"}
        [event] = [
            e for e in core.list_namespaced_event(ns).items if e.reason == memguard.EVENT_REASON
        ]
        assert event.involved_object.name == "alpha-r0" and event.type == "Warning"
        assert "MemFree 2.1 GB < floor" in event.message
        assert "PSI full avg10 24.51% >= 10%" in event.message

        # Next look: the largest left on this node is beta (alpha is gone, gamma elsewhere).
        beta = str(core.read_namespaced_pod("beta-r0", ns).metadata.uid)
        assert guard.check(tight, Floor()).stop == PodMemory(
            "beta-r0", ns, beta, 20 * 2**30, "requests"
        )
    finally:
        core.delete_namespace(ns)


def test_the_deployed_guard_stops_a_pod_with_its_role_and_no_more(
    kube_api: Any, nodes: tuple[Any, list[str]], tmp_path: Path
) -> None:
    """The rendered DaemonSet is accepted by the API and runs one pod per Spark; its
    ServiceAccount's token is enough for ``sparkrack memguard --once`` to stop the engine pod,
    and reads no Secret and deletes no StatefulSet."""
    from kubernetes import config as kube_config
    from kubernetes.dynamic import DynamicClient
    from test_watch_cluster import sa_kubeconfig

    from sparkrack.k8s.common import validated
    from sparkrack.serving.objects.agents import MemguardSettings, memguard_manifests
    from sparkrack.watch.cluster import Cluster

    api, (here, there) = nodes
    core = client.CoreV1Api(api)
    ns = kube_api.namespace("memguard", {"pod-security.kubernetes.io/enforce": "privileged"})
    settings = MemguardSettings(image="registry.invalid/sparkrack@sha256:" + "0" * 64)
    docs = validated(memguard_manifests(ns, settings), "test")
    dyn = DynamicClient(api)
    try:
        for doc in docs:
            dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(
                body=doc, namespace=ns
            )
        apps = client.AppsV1Api(api)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ds = apps.read_namespaced_daemon_set("sparkrack-memguard", ns)
            if ds.status.desired_number_scheduled and ds.status.current_number_scheduled == (
                ds.status.desired_number_scheduled
            ):
                break
            time.sleep(0.5)
        assert ds.status.desired_number_scheduled >= 2  # one per registered Spark
        core.create_namespaced_pod(ns, pod("alpha-r0", here, "40Gi"))
        [mine] = [
            p
            for p in core.list_namespaced_pod(
                ns, label_selector="sparkrack.io/component=memguard"
            ).items
            if p.spec.node_name == here
        ]
        # The token the kubelet gives the guard's pod on ``here``: bound to it, its node named.
        config = sa_kubeconfig(
            kube_api, Cluster(api, ns), "sparkrack-memguard", tmp_path / "sa", mine
        )
        root = proc(tmp_path / "proc", PSI_STALLING, 2 * 1024 * 1024)
        run = subprocess.run(
            [sys.executable, "-m", "sparkrack", "memguard", "--once", "--node", here]
            + ["--namespace", ns, "--proc", str(root), "--kubeconfig", str(config)]
            + ["--grace", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert run.stdout.startswith(f"stopped {ns}/alpha-r0, the largest engine pod"), run.stdout
        assert "alpha-r0" not in live(core, ns)

        as_guard = client.AuthorizationV1Api(
            kube_config.new_client_from_config(config_file=str(config))
        )

        def allowed(verb: str, resource: str, group: str = "") -> bool:
            attrs = {"namespace": ns, "verb": verb, "resource": resource, "group": group}
            review = as_guard.create_self_subject_access_review(
                {"spec": {"resourceAttributes": attrs}}
            )
            return bool(review.status.allowed)

        assert allowed("delete", "pods") and allowed("create", "events")  # negative control
        assert not allowed("get", "secrets")
        assert not allowed("delete", "statefulsets", "apps")
        assert not allowed("create", "pods")
        # Nothing that reads another container's environment: no exec, no attach, no Secret.
        assert not allowed("create", "pods/exec") and not allowed("create", "pods/attach")
        assert not allowed("get", "pods/log")

        # The Role lets it delete pods; the admission policy the real API enforces narrows that
        # to engine pods of its own node.
        as_core = client.CoreV1Api(kube_config.new_client_from_config(config_file=str(config)))
        core.create_namespaced_pod(ns, pod("gamma-r0", there, "40Gi"))
        core.create_namespaced_pod(ns, pod("fetch", here, "40Gi", rank=False))
        # A fabric-check pod carries a rank label too; only its component differs.
        check = pod("check-r0", here, "40Gi")
        check["metadata"]["labels"][contract.LABEL_COMPONENT] = contract.COMPONENT_FABRIC_CHECK
        core.create_namespaced_pod(ns, check)
        for victim, why in (
            ("gamma-r0", "its own node only"),
            ("fetch", "engine pods only"),
            ("check-r0", "engine pods only"),
        ):
            with pytest.raises(client.ApiException) as refused:
                as_core.delete_namespaced_pod(victim, ns)
            assert refused.value.status == 403 and why in str(refused.value.body), victim
        assert {"gamma-r0", "fetch", "check-r0"} <= live(core, ns)
        # A token not bound to the guard's pod names no node: it deletes nothing.
        core.create_namespaced_pod(ns, pod("delta-r0", here, "40Gi"))
        unbound = sa_kubeconfig(kube_api, Cluster(api, ns), "sparkrack-memguard", tmp_path / "u")
        with pytest.raises(client.ApiException) as refused:
            client.CoreV1Api(
                kube_config.new_client_from_config(config_file=str(unbound))
            ).delete_namespaced_pod("delta-r0", ns)
        assert refused.value.status == 403
        # Negative control: an engine pod of its own node it deletes.
        as_core.delete_namespaced_pod("delta-r0", ns)
    finally:
        core.delete_namespace(ns)
        for doc in docs:
            if "namespace" not in doc["metadata"] and doc["kind"].startswith("Validating"):
                with contextlib.suppress(client.ApiException):
                    dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).delete(
                        name=doc["metadata"]["name"]
                    )


def test_the_guard_reads_its_own_proc_as_a_user_of_its_own() -> None:
    """The guard's pod mounts no host /proc (whose ``<pid>/environ`` files hold the keys of
    other pods), shares no process namespace with the host, and runs as a user no other
    serving container has."""
    from sparkrack.serving.objects.agents import MemguardSettings, memguard_manifests

    [ds] = [
        d for d in memguard_manifests("n", MemguardSettings(image="x")) if d["kind"] == "DaemonSet"
    ]
    spec = ds["spec"]["template"]["spec"]
    [container] = spec["containers"]
    hosts = [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v]
    assert "/proc" not in hosts and not spec.get("hostPID") and not spec.get("hostNetwork")
    assert container["args"][container["args"].index("--proc") + 1] == "/proc"
    # The user the process runs as: the container's, where it names one, else the pod's.
    for context in (spec["securityContext"], container["securityContext"]):
        assert context["runAsUser"] == context["runAsGroup"] == contract.MEMGUARD_UID
        assert context["runAsNonRoot"] is True
    assert contract.MEMGUARD_UID != contract.SERVING_UID
    assert not hosts  # a restricted namespace admits no host path at all


def test_the_inventory_variables_take_the_guards_defaults_and_refuse_nonsense() -> None:
    from sparkrack.inputs.variable_table import VARIABLES
    from sparkrack.serving.objects.agents import MemguardSettings

    forms = {v.name: v.form for v in VARIABLES}
    floor, psi = forms["serving_memguard_floor"], forms["serving_memguard_psi_full"]
    defaults = MemguardSettings(image="x")
    assert floor.problem(defaults.floor) is None and psi.problem(int(defaults.psi_full)) is None
    assert defaults.floor == f"{DEFAULT_OS_HEADROOM_GB:g}G"  # the planner's headroom
    assert floor.problem("200G") and floor.problem("lots") and floor.problem("0G")
    assert psi.problem(0) and psi.problem(101) and psi.problem("ten")


def test_the_serve_render_adds_one_guard_with_the_inventorys_floor_and_only_with_an_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``render -i`` (the serve role's render) carries the guard beside the watchdogs, with
    their image and the inventory's floor and PSI level; no watchdog image, no guard (negative
    control)."""
    import shutil

    import yaml

    lab = tmp_path / "lab"
    shutil.copytree(Path("inventories/lab"), lab)
    group_vars = lab / "group_vars" / "all.yml"
    base = yaml.safe_load(group_vars.read_text())

    def guards(**changes: Any) -> list[dict[str, Any]]:
        group_vars.write_text(yaml.safe_dump({**base, **changes}))
        assert main(["render", "-i", str(lab), "--what", "manifests"]) == 0
        out = capsys.readouterr().out
        return [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "DaemonSet"]

    [guard] = guards(serving_memguard_floor="12G", serving_memguard_psi_full=25)
    [container] = guard["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--floor") + 1] == "12G"
    assert args[args.index("--psi-full") + 1] == "25"
    assert args[args.index("--node") + 1] == "$(NODE_NAME)"
    assert container["image"] == base["serving_watchdog_image"]
    assert guards(serving_watchdog_image="") == []
