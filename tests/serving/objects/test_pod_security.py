"""Least privilege of every pod the serve play applies, over every inventory (lab and example),
the pre-pull Jobs included, with ``serving_rdma_access`` both ways.

Each property is a checker returning the pods or containers that break it; every checker is run
once over the renders (nothing found) and once over a pod broken on purpose (found):

* no pod mounts a ServiceAccount token (none of them talks to the API);
* every container that is not an engine (fetch, push, receiver, pre-pull, the ranks' init
  containers, the gateway) runs as a non-root user on a read-only root filesystem, with no
  privilege escalation, RuntimeDefault seccomp and every capability dropped; the memory settle
  step (``wait-memory`` and the ``settle`` sidecar) is the named exception: privileged, to write
  /proc/sys/vm, with the switch scripts as its only mount;
* the HF token reaches only the container that downloads; everything else runs offline;
* a container that asks for no GPU has ``NVIDIA_VISIBLE_DEVICES=void``, one that asks has not;
* only an NCCL rank (when the inventory keeps ``privileged``) and the memory settle step are
  privileged: with ``device-plugin`` an NCCL rank adds ``IPC_LOCK`` alone and asks for the RDMA
  resource.

The namespace's Pod Security level is judged by the real admission plugin (``kube_api``): every
pod is admitted at the level the namespace carries, and a stricter level refuses some of them,
so the level is the strictest the pods allow.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from sparkrack import contract
from sparkrack.inputs.inventory import load_inventory
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.k8s.reconcile import WORKLOADS, template_pod
from sparkrack.serving.context import SERVING_VARS, context_from_vars
from sparkrack.serving.deployments.bundle import (
    DEPLOYMENT_VARS,
    from_vars,
    in_apply_order,
    render_serving,
)
from sparkrack.serving.objects.agents import MEMGUARD, MEMGUARD_NAME
from sparkrack.serving.objects.agents import name as watchdog_name
from sparkrack.serving.switch.objects import RECEIVER_SECURITY, SETTLE_SECURITY

INVENTORIES = ["inventories/example", "inventories/lab"]
PSA = "pod-security.kubernetes.io/enforce"
LEVELS = ("restricted", "baseline", "privileged")

Pod = tuple[str, dict[str, Any], dict[str, Any]]
"""(ident, pod metadata, pod spec)."""


def rendered(inventory: str, rdma: str = "privileged") -> dict[str, Any]:
    """What the serve play applies for ``inventory``, pre-pull Jobs on, RDMA access ``rdma``."""
    inv = load_inventory(inventory)
    settings = {n: inv.var(n) for n in SERVING_VARS}
    settings |= {"serving_prepull": True, "serving_rdma_access": rdma}
    ctx = context_from_vars(inv.plan(), settings)
    return render_serving(from_vars({n: inv.var(n) for n in DEPLOYMENT_VARS}, ctx, inventory))


def pods(docs: list[dict[str, Any]]) -> list[Pod]:
    out = []
    for doc in docs:
        if doc["kind"] in WORKLOADS:
            pod = template_pod(doc)
        elif doc["kind"] == "Pod":
            pod = doc
        else:
            continue
        out.append((f"{doc['kind']}/{doc['metadata']['name']}", pod["metadata"], pod["spec"]))
    return out


def component(meta: dict[str, Any]) -> str:
    return str(meta.get("labels", {}).get(contract.LABEL_COMPONENT, ""))


def containers(spec: dict[str, Any]) -> Iterator[tuple[dict[str, Any], bool]]:
    """(container, is it an init container)."""
    yield from ((c, True) for c in spec.get("initContainers", []))
    yield from ((c, False) for c in spec.get("containers", []))


def is_engine(meta: dict[str, Any], c: dict[str, Any], init: bool) -> bool:
    return component(meta) == contract.COMPONENT_SERVING and not init


def env(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


# --- the checkers --------------------------------------------------------------------------------


def token_mounts(all_pods: list[Pod]) -> list[str]:
    """Pods that mount a ServiceAccount token, except each watchdog and the memory guard with
    their own accounts (the pods that call the API, with a Role of what they call)."""
    return [
        i
        for i, meta, spec in all_pods
        if spec.get("automountServiceAccountToken") is not False
        and not (
            component(meta) == contract.COMPONENT_WATCHDOG
            and spec.get("serviceAccountName")
            == watchdog_name(meta["labels"][contract.LABEL_DEPLOYMENT])
        )
        and not (component(meta) == MEMGUARD and spec.get("serviceAccountName") == MEMGUARD_NAME)
    ]


SETTLE_NAMES = ("wait-memory", "settle")


def is_settle(c: dict[str, Any], init: bool) -> bool:
    """The memory settle step, exactly as named: privileged, only the switch scripts mounted."""
    mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
    return (
        init
        and c["name"] in SETTLE_NAMES
        and c.get("securityContext") == SETTLE_SECURITY
        and mounts == [contract.SWITCH_MOUNT]
    )


def not_hardened(all_pods: list[Pod]) -> list[str]:
    found = []
    for ident, meta, spec in all_pods:
        for c, init in containers(spec):
            if is_engine(meta, c, init) or is_settle(c, init):
                continue
            sc = c.get("securityContext") or {}
            # The one named exception: the rsync receiver starts as root with the capabilities
            # RECEIVER_SECURITY names (chroot, hand the model's folder to the transfer user).
            receiver = c["name"] == "receive" and sc.get("runAsUser") == 0
            adds = (sc.get("capabilities") or {}).get("add")
            ok = (
                (
                    receiver
                    and "runAsNonRoot" not in sc
                    and adds == RECEIVER_SECURITY["capabilities"]["add"]
                )
                or (
                    sc.get("runAsNonRoot") is True
                    and isinstance(sc.get("runAsUser"), int)
                    and sc["runAsUser"] != 0
                    and not adds
                )
            ) and (
                sc.get("readOnlyRootFilesystem") is True
                and sc.get("allowPrivilegeEscalation") is False
                and not sc.get("privileged")
                and (sc.get("seccompProfile") or {}).get("type") == "RuntimeDefault"
                and (sc.get("capabilities") or {}).get("drop") == ["ALL"]
            )
            mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            if not ok or "/tmp" not in mounts:
                found.append(f"{ident}/{c['name']}")
    return found


def token_offline(all_pods: list[Pod]) -> list[str]:
    """Containers given the HF token that run offline (HF_HUB_OFFLINE=1) or do not download."""
    found = []
    for ident, _meta, spec in all_pods:
        for c, _init in containers(spec):
            e = env(c)
            if "HF_TOKEN" in e and (c["name"] != "download" or "HF_HUB_OFFLINE" in e):
                found.append(f"{ident}/{c['name']}")
    return found


def gpu_leaks(all_pods: list[Pod]) -> list[str]:
    found = []
    for ident, _meta, spec in all_pods:
        for c, _init in containers(spec):
            gpu = "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
            void = (env(c).get("NVIDIA_VISIBLE_DEVICES") or {}).get("value") == "void"
            if gpu == void:
                found.append(f"{ident}/{c['name']}")
    return found


def needless_privilege(all_pods: list[Pod], rdma: str, resource: str) -> list[str]:
    """Privileged containers other than NCCL ranks kept privileged by the inventory; an NCCL
    rank under device-plugin that is privileged, adds more than IPC_LOCK or lacks the resource."""
    found = []
    for ident, meta, spec in all_pods:
        for c, init in containers(spec):
            sc = c.get("securityContext") or {}
            nccl = is_engine(meta, c, init) and any(p["name"] == "dist" for p in c.get("ports", []))
            limits = (c.get("resources") or {}).get("limits") or {}
            if sc.get("privileged") and not (nccl and rdma == "privileged" or is_settle(c, init)):
                found.append(f"{ident}/{c['name']}")
            if (
                nccl
                and rdma == "device-plugin"
                and (
                    (sc.get("capabilities") or {}).get("add") != [contract.RDMA_CAPABILITY]
                    or resource not in limits
                )
            ):
                found.append(f"{ident}/{c['name']}")
            if nccl and rdma == "privileged" and not sc.get("privileged"):
                found.append(f"{ident}/{c['name']} (NCCL rank without RDMA access)")
    return found


# --- over every render ---------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[(i, r) for i in INVENTORIES for r in contract.RDMA_ACCESS])
def render(request: pytest.FixtureRequest) -> tuple[str, list[Pod]]:
    inventory, rdma = request.param
    return rdma, pods(in_apply_order(rendered(inventory, rdma)))


def test_every_kind_of_pod_is_rendered(render: tuple[str, list[Pod]]) -> None:
    _rdma, all_pods = render
    kinds = {component(meta) for _i, meta, _s in all_pods}
    assert kinds >= {
        contract.COMPONENT_SERVING,
        contract.COMPONENT_FETCH,
        contract.COMPONENT_PREPULL,
        contract.COMPONENT_GATEWAY,
    }
    names = {c["name"] for _i, _m, spec in all_pods for c, _init in containers(spec)}
    assert {"download", "wait-weights", "wait-memory", "settle", "litellm", "pull-0"} <= names


def test_no_pod_mounts_a_service_account_token(render: tuple[str, list[Pod]]) -> None:
    assert token_mounts(render[1]) == []
    # Negative control: a watchdog on the namespace's default account is found.
    watchdogs = [p for p in render[1] if component(p[1]) == contract.COMPONENT_WATCHDOG]
    assert watchdogs
    ident, meta, spec = watchdogs[0]
    assert token_mounts([(ident, meta, {**spec, "serviceAccountName": "default"})]) == [ident]


def test_every_container_but_the_engine_is_hardened(render: tuple[str, list[Pod]]) -> None:
    assert not_hardened(render[1]) == []


def test_the_hf_token_reaches_only_the_download(render: tuple[str, list[Pod]]) -> None:
    assert token_offline(render[1]) == []
    # ...and every download has it (by reference).
    downloads = [
        env(c)["HF_TOKEN"]
        for _i, _m, spec in render[1]
        for c, _init in containers(spec)
        if c["name"] == "download"
    ]
    assert downloads and all("valueFrom" in e for e in downloads)


def test_containers_without_a_gpu_see_none(render: tuple[str, list[Pod]]) -> None:
    assert gpu_leaks(render[1]) == []


def test_privilege_only_where_rdma_needs_it(render: tuple[str, list[Pod]]) -> None:
    rdma, all_pods = render
    resource = SERVING_DEFAULTS["serving_rdma_resource"]
    assert needless_privilege(all_pods, rdma, resource) == []


def test_rdma_access_is_refused_unless_known() -> None:
    from sparkrack.errors import SparkrackError
    from sparkrack.serving.context import rdma_access

    with pytest.raises(SparkrackError, match="serving_rdma_access"):
        rdma_access("host")


# --- negative controls: each checker finds a pod broken on purpose -----------------------------


def one(all_pods: list[Pod], name: str) -> Pod:
    for ident, meta, spec in all_pods:
        if any(c["name"] == name for c, _init in containers(spec)):
            return ident, copy.deepcopy(meta), copy.deepcopy(spec)
    raise AssertionError(name)


def named(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c, _init in containers(spec) if c["name"] == name)


def test_negative_controls_each_checker_finds_a_broken_pod() -> None:
    all_pods = pods(in_apply_order(rendered("inventories/example")))
    ident, meta, spec = one(all_pods, "litellm")
    spec.pop("automountServiceAccountToken")
    assert token_mounts([(ident, meta, spec)]) == [ident]

    for key, bad in [
        ("runAsNonRoot", False),
        ("runAsUser", 0),
        ("readOnlyRootFilesystem", False),
        ("allowPrivilegeEscalation", True),
        ("seccompProfile", {"type": "Unconfined"}),
        ("capabilities", {"drop": ["ALL"], "add": ["NET_ADMIN"]}),
    ]:
        ident, meta, spec = one(all_pods, "download")
        named(spec, "download")["securityContext"][key] = bad
        assert not_hardened([(ident, meta, spec)]) == [f"{ident}/download"], key

    # The receiver's exception is exactly its named capabilities, on a read-only root.
    for key, bad in [
        ("capabilities", {"drop": ["ALL"], "add": ["CHOWN", "SYS_ADMIN"]}),
        ("readOnlyRootFilesystem", False),
        ("allowPrivilegeEscalation", True),
    ]:
        ident, meta, spec = one(all_pods, "receive")
        assert not_hardened([(ident, meta, spec)]) == []
        named(spec, "receive")["securityContext"][key] = bad
        assert not_hardened([(ident, meta, spec)]) == [f"{ident}/receive"], key

    # The settle step's exception is exactly its security context and its one mount.
    for name in SETTLE_NAMES:
        ident, meta, spec = one(all_pods, name)
        assert not_hardened([(ident, meta, spec)]) == []
        assert f"{ident}/{name}" not in needless_privilege([(ident, meta, spec)], "privileged", "r")
        named(spec, name)["volumeMounts"].append({"name": "hf-cache", "mountPath": "/hf"})
        assert not_hardened([(ident, meta, spec)]) == [f"{ident}/{name}"]
        assert f"{ident}/{name}" in needless_privilege([(ident, meta, spec)], "privileged", "r")
        ident, meta, spec = one(all_pods, name)
        named(spec, name)["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}
        assert not_hardened([(ident, meta, spec)]) == [f"{ident}/{name}"]

    ident, meta, spec = one(all_pods, "wait-weights")
    named(spec, "wait-weights")["env"].append({"name": "HF_TOKEN", "value": "x"})
    assert token_offline([(ident, meta, spec)]) == [f"{ident}/wait-weights"]

    ident, meta, spec = one(all_pods, "pull-0")
    c = named(spec, "pull-0")
    c["env"] = [e for e in c["env"] if e["name"] != "NVIDIA_VISIBLE_DEVICES"]
    assert gpu_leaks([(ident, meta, spec)]) == [f"{ident}/pull-0"]

    ident, meta, spec = one(all_pods, "litellm")
    named(spec, "litellm")["securityContext"]["privileged"] = True
    assert needless_privilege([(ident, meta, spec)], "privileged", "r") == [f"{ident}/litellm"]


# --- the namespace's Pod Security level, judged by the real admission plugin -------------------


def admitted(pods_api: Any, namespace: str, pod: dict[str, Any]) -> bool:
    body = copy.deepcopy(pod)
    body["metadata"]["namespace"] = namespace
    # Pod Security is judged here; the play applies the watchdog's account beside its pod.
    if "serviceAccountName" in body["spec"]:
        body["spec"]["serviceAccountName"] = "default"
    try:
        pods_api.create(body=body, namespace=namespace, dry_run="All")
    except ApiException as exc:
        assert exc.status == 403 and "violates PodSecurity" in str(exc.body), exc.body
        return False
    return True


def test_the_namespace_level_is_the_strictest_its_pods_allow(kube_api: Any) -> None:
    out = rendered("inventories/example")
    serving_doc, agents_doc = in_apply_order(out)[:2]
    levels = {
        serving_doc["metadata"]["name"]: serving_doc["metadata"]["labels"][PSA],
        agents_doc["metadata"]["name"]: agents_doc["metadata"]["labels"][PSA],
    }
    api = DynamicClient(kube_api.client()).resources.get(api_version="v1", kind="Pod")
    every = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": dict(meta), "spec": spec}
        for _i, meta, spec in pods(in_apply_order(out))
    ]
    verdicts = {}
    for candidate in LEVELS:
        ns = kube_api.namespace("psa", {PSA: candidate})
        verdicts[candidate] = [admitted(api, ns, p) for p in every]
    for namespace, level in levels.items():
        own = [i for i, p in enumerate(every) if p["metadata"]["namespace"] == namespace]
        assert own, f"no pod of {namespace}"
        admitted_there = [verdicts[level][i] for i in own]
        assert all(admitted_there), f"a pod is refused at {namespace}'s own level {level}"
        # Negative control: a stricter level refuses some pod (else the level could be
        # stricter); the agents' namespace is at the strictest level there is.
        for stricter in LEVELS[: LEVELS.index(level)]:
            assert not all(verdicts[stricter][i] for i in own), (namespace, stricter)
    assert levels[agents_doc["metadata"]["name"]] == LEVELS[0] == "restricted"
    # The gateway, the watchdogs and the memory guard are the agents' namespace's pods.
    agents = {
        component(p["metadata"])
        for p in every
        if p["metadata"]["namespace"] == agents_doc["metadata"]["name"]
    }
    assert agents == {
        contract.COMPONENT_GATEWAY,
        contract.COMPONENT_WATCHDOG,
        contract.COMPONENT_MEMGUARD,
    }
