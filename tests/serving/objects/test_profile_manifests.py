"""Manifests of every shipped profile: valid against the Kubernetes schemas, wired to the plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkrack.contract import GUARD_FILE, HF_CACHE_MOUNT, LAUNCHER_MOUNT, POD_FABRIC_IFNAME
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k8s.nads import pod_network_annotation
from sparkrack.k8s.validate import validate_manifests
from sparkrack.serving import (
    ServingContext,
    context_from_vars,
    list_profiles,
    load_profile,
    render_env,
    render_manifests,
)

SHIPPED = [p.stem for p in list_profiles() if load_profile(p.stem).data["engine"] == "sglang"]


@pytest.fixture(scope="module", params=["inventories/example", "inventories/lab"])
def ctx(request: pytest.FixtureRequest) -> ServingContext:
    inv = load_inventory(request.param)
    return context_from_vars(inv.plan(), {"serving_namespace": "sparkrack"})


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("name", SHIPPED)
def test_manifests_validate_against_kubernetes_schemas(name: str, ctx: ServingContext) -> None:
    docs = render_manifests(load_profile(name), ctx)
    assert validate_manifests(docs, source=name) == []
    kinds = sorted(d["kind"] for d in docs)
    kept = ["Namespace", "ConfigMap", "Service", "Service", "NetworkPolicy"]
    assert kinds == sorted(kept + ["StatefulSet"] * 4)


@pytest.mark.parametrize("name", SHIPPED)
def test_each_rank_pinned_and_wired_from_the_plan(name: str, ctx: ServingContext) -> None:
    profile = load_profile(name)
    docs = render_manifests(profile, ctx)
    sets = by_kind(docs, "StatefulSet")
    head_ip = ctx.plan.head.serving_vf.address
    assert len(sets) == len(ctx.plan.nodes)
    for sts, node in zip(sets, ctx.plan.nodes, strict=True):
        pod = sts["spec"]["template"]
        spec = pod["spec"]
        container = spec["containers"][0]
        args = container["args"]
        assert spec["nodeSelector"] == {
            "kubernetes.io/hostname": node.name,
            "sparkrack.io/spark-index": str(node.spark_index),
        }
        assert pod["metadata"]["labels"]["sparkrack.io/spark-index"] == str(node.spark_index)
        assert pod["metadata"]["annotations"][
            "k8s.v1.cni.cncf.io/networks"
        ] == pod_network_annotation(node, ctx.namespace)
        assert args[args.index("--node-rank") + 1] == str(node.rank)
        assert args[args.index("--nnodes") + 1] == str(len(ctx.plan.nodes))
        assert args[args.index("--dist-init-addr") + 1] == f"{head_ip}:{ctx.dist_port}"
        assert container["securityContext"] == {"privileged": True}
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
        env = {e["name"]: e for e in container["env"]}
        rails = node.rail_vfs(node.serving_vf.index)
        assert env["NCCL_IB_HCA"]["value"] == "=" + ",".join(vf.rdma_device for vf in rails)
        assert env["NCCL_SOCKET_IFNAME"]["value"] == POD_FABRIC_IFNAME
        assert env["GLOO_SOCKET_IFNAME"]["value"] == POD_FABRIC_IFNAME
        assert env["NCCL_DEBUG"]["value"] == "INFO"
        # Offline (the fetch step put the weights in the node's cache): no HF token.
        assert "HF_TOKEN" not in env and env["HF_HUB_OFFLINE"]["value"] == "1"
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/dev/shm", HF_CACHE_MOUNT, LAUNCHER_MOUNT} <= mounts
        assert container["command"][-1] == "--" and profile.architecture in container["command"]
        for patch in profile.patches:
            assert patch in container["command"]


def test_probes_allow_multi_minute_loads(ctx: ServingContext) -> None:
    docs = render_manifests(load_profile("nemotron-3-ultra-550b-a55b-nvfp4"), ctx)
    for sts in by_kind(docs, "StatefulSet"):
        c = sts["spec"]["template"]["spec"]["containers"][0]
        startup = c["startupProbe"]
        # src:ultra-post: Ultra's weights alone load in ~490 s; CUDA graph capture comes on top.
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 3 * 490
        assert "livenessProbe" in c
    head = by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert head["livenessProbe"]["httpGet"]["path"] == "/health_generate"
    worker = by_kind(docs, "StatefulSet")[1]["spec"]["template"]["spec"]["containers"][0]
    assert worker["livenessProbe"]["exec"]["command"][:3] == [
        "python3",
        f"{LAUNCHER_MOUNT}/{GUARD_FILE}",
        "live",
    ]


def test_secret_never_inline_and_configmap_holds_code_only(ctx: ServingContext) -> None:
    docs = render_manifests(load_profile("glm-4.7-nvfp4"), ctx)
    text = json.dumps(docs)
    assert not by_kind(docs, "Secret")
    assert "HF_TOKEN" not in json.dumps(by_kind(docs, "ConfigMap"))
    (cm,) = by_kind(docs, "ConfigMap")
    assert GUARD_FILE in cm["data"] and "launcher.py" in cm["data"]
    # The head: the engine's two keys; each worker: the engine key only (it serves no admin
    # route). The ranks run offline, so no HF token reaches them (the fetch Job's has it).
    assert text.count('"secretKeyRef"') == 2 + (len(ctx.plan.nodes) - 1)


def test_labels_follow_the_contract(ctx: ServingContext) -> None:
    profile = load_profile("gemma-4-31b-it")
    for doc in render_manifests(profile, ctx):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "sparkrack"
        if doc["kind"] != "Namespace":  # the namespace outlives a model switch
            assert labels["sparkrack.io/component"] == "serving"
            assert labels["sparkrack.io/profile"] == "gemma-4-31b-it"
    api = [
        d
        for d in by_kind(render_manifests(profile, ctx), "Service")
        if "clusterIP" not in d["spec"]
    ]
    assert api[0]["spec"]["selector"]["sparkrack.io/rank"] == "0"


def test_two_profiles_never_share_object_names(ctx: ServingContext) -> None:
    a = {
        (d["kind"], d["metadata"]["name"])
        for d in render_manifests(load_profile("glm-4.7-nvfp4"), ctx)
    }
    b = {
        (d["kind"], d["metadata"]["name"])
        for d in render_manifests(load_profile("gemma-4-31b-it"), ctx)
    }
    # Only the namespace and the stable OpenAI endpoint are shared; both are re-applied on switch.
    assert a & b == {("Namespace", "sparkrack")}


def test_gid_index_overrides_per_node_or_from_the_plan() -> None:
    inv = load_inventory("inventories/example")
    plan = inv.plan()
    profile = load_profile("glm-4.7-nvfp4")
    key = "SPARKRACK_GID_INDEX_OVERRIDE"
    per_node = context_from_vars(plan, {}, {"spark1": 3, "spark2": 5})
    assert render_env(profile, per_node, 0)[key] == "3"
    assert render_env(profile, per_node, 1)[key] == "5"
    assert key not in render_env(profile, per_node, 2)
    from dataclasses import replace

    pinned = context_from_vars(replace(plan, gid_index=7), {}, {"spark1": 3})
    assert render_env(profile, pinned, 0)[key] == "3"
    assert render_env(profile, pinned, 1)[key] == "7"
    for rank in range(4):
        env = render_env(profile, pinned, rank)
        assert "NCCL_IB_GID_INDEX" not in env
        assert env["SPARKRACK_GID_TARGETS"] == f"rocep1s0f0v0={plan.nodes[rank].vf(0).address}"


def test_socket_transport_env(tmp_path: Any) -> None:
    import yaml

    data = yaml.safe_load(Path("model_profiles/glm-4.7-nvfp4.yml").read_text())
    data["transport"] = "socket"
    path = tmp_path / "glm-socket.yml"
    path.write_text(yaml.safe_dump(data))
    inv = load_inventory("inventories/example")
    env = render_env(load_profile(str(path)), context_from_vars(inv.plan(), {}), 0)
    assert env["NCCL_NET"] == "Socket" and env["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" not in env
    assert env["NCCL_SOCKET_IFNAME"] == POD_FABRIC_IFNAME
