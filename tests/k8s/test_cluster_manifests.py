"""Every cluster add-on manifest rendered for the example inventory, validated offline, plus the
refusals: a broken manifest never leaves the renderer."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from sparkrack.errors import SparkrackError
from sparkrack.fabric.addressplan import NodeInput
from sparkrack.fabric.layout import compute_plan
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k8s import ClusterOptions, render_addons, validated
from sparkrack.k8s.common import K3S_CNI_BIN_DIR, K3S_CNI_CONF_DIR
from sparkrack.k8s.device_plugin import render_device_plugin
from sparkrack.k8s.fabric_check import render_fabric_check
from sparkrack.k8s.multus import render_multus
from sparkrack.k8s.options import options_from
from sparkrack.k8s.validate import validate_manifests

EXAMPLE = "inventories/example"


@pytest.fixture(scope="module")
def example_plan() -> Any:
    return load_inventory(EXAMPLE).plan()


def four_nodes(vfs_in_use: list[int], gid_index: int | None = None) -> Any:
    fabric = {"subnet": "10.77.0.0/24", "vf_count": 4, "vfs_in_use": vfs_in_use}
    if gid_index is not None:
        fabric["gid_index"] = gid_index
    nodes = [NodeInput(f"spark{i}", f"192.168.1.{10 + i}", i) for i in range(1, 5)]
    return compute_plan(fabric, nodes)


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_example_inventory_renders_valid_addons(example_plan: Any) -> None:
    docs = render_addons(example_plan, ClusterOptions())
    assert validate_manifests(docs) == []
    assert [d["kind"] for d in docs[:1]] == ["CustomResourceDefinition"]  # CRD applied first
    assert {d["kind"] for d in docs} == {
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceAccount",
        "ConfigMap",
        "DaemonSet",
        "Namespace",
        "NetworkAttachmentDefinition",
    }
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "sparkrack"


@pytest.mark.parametrize("vfs", [[0], [0, 2], [0, 1, 2, 3]])
def test_one_nad_per_vf_in_use_on_four_nodes(vfs: list[int]) -> None:
    plan = four_nodes(vfs)
    docs = render_addons(plan, ClusterOptions(namespace="llm"))
    nads = by_kind(docs, "NetworkAttachmentDefinition")
    assert [n["metadata"]["name"] for n in nads] == [f"sparkrack-vf{v}" for v in vfs]
    for nad, v in zip(nads, vfs, strict=True):
        assert nad["metadata"]["namespace"] == "llm"
        config = json.loads(nad["spec"]["config"])
        assert config["type"] == "host-device"
        assert config["device"] == f"enp1s0f0v{v}"  # same netdev name on every Spark
        assert config["capabilities"] == {"ips": True}
        assert config["ipam"] == {"type": "static"}
        assert config["name"] == nad["metadata"]["name"]


def test_fabric_check_pods_ask_for_their_nodes_planned_vf_address() -> None:
    plan = four_nodes([1, 3])
    docs = validated(render_fabric_check(plan, ClusterOptions()), "test")
    pods = by_kind(docs, "Pod")
    assert len(pods) == 4
    for pod, node in zip(pods, plan.nodes, strict=True):
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": node.name}
        (net,) = json.loads(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
        assert net["name"] == "sparkrack-vf1"  # first VF in use
        assert net["ips"] == [node.vf(1).cidr]  # == host-side netplan address of that VF
        assert net["interface"] == "net1"
        container = spec["containers"][0]
        assert container["securityContext"] == {"privileged": True}  # src:roce-post
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["RANK"] == str(node.rank)
        assert env["WORLD_SIZE"] == "4"
        assert env["MASTER_ADDR"] == plan.head.vf(1).address
        assert env["NCCL_IB_HCA"] == "=rocep1s0f0v1"  # exact match, not a prefix
        assert env["NCCL_SOCKET_IFNAME"] == "net1"
        assert env["NCCL_DEBUG"] == "INFO"
        assert "NCCL_IB_GID_INDEX" not in env  # not discovered, not pinned
    script = by_kind(docs, "ConfigMap")[0]["data"]["nccl_allreduce.py"]
    assert "init_process_group" in script


def test_fabric_check_pods_resolve_the_gid_index_at_start() -> None:
    docs = render_fabric_check(four_nodes([0]), ClusterOptions(), "roce")
    config = by_kind(docs, "ConfigMap")[0]["data"]
    pods = by_kind(docs, "Pod")
    envs = [{e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]} for p in pods]
    assert all("NCCL_IB_GID_INDEX" not in e for e in envs)
    assert [e["SPARKRACK_GID_TARGETS"] for e in envs] == [
        f"rocep1s0f0v0={n.vf(0).address}" for n in four_nodes([0]).nodes
    ]
    command = pods[0]["spec"]["containers"][0]["command"]
    # the resolver runs first and execs the check; the ConfigMap ships the file it names
    assert command[:3] == ["python3", "-I", "/opt/sparkrack-fabric-check/gidtable.py"]
    assert command[-1] == "/opt/sparkrack-fabric-check/nccl_allreduce.py"
    assert "def rank_environment" in config["gidtable.py"]
    pinned = by_kind(render_fabric_check(four_nodes([0], gid_index=1), ClusterOptions()), "Pod")
    overrides = {
        e["value"]
        for p in pinned
        for e in p["spec"]["containers"][0]["env"]
        if e["name"] == "SPARKRACK_GID_INDEX_OVERRIDE"
    }
    assert overrides == {"1"}


def test_socket_baseline_disables_ib() -> None:
    pod = by_kind(render_fabric_check(four_nodes([0]), ClusterOptions(), "socket"), "Pod")[0]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" not in env


def test_multus_uses_k3s_cni_paths() -> None:
    docs = render_multus(ClusterOptions())
    ds = by_kind(docs, "DaemonSet")[0]
    volumes = {
        v["name"]: v.get("hostPath", {}).get("path")
        for v in ds["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["cni"] == K3S_CNI_CONF_DIR == "/var/lib/rancher/k3s/agent/etc/cni/net.d"
    assert volumes["cnibin"] == K3S_CNI_BIN_DIR == "/var/lib/rancher/k3s/data/cni"
    mounts = {
        m["name"]: m["mountPath"]
        for m in ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }
    assert mounts["cnibin"] == K3S_CNI_BIN_DIR  # identical path in the daemon and on the host
    config = json.loads(by_kind(docs, "ConfigMap")[0]["data"]["daemon-config.json"])
    assert config["binDir"] == K3S_CNI_BIN_DIR
    assert config["chrootDir"] == "/hostroot"
    images = {c["image"] for c in ds["spec"]["template"]["spec"]["initContainers"]} | {
        c["image"] for c in ds["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"ghcr.io/k8snetworkplumbingwg/multus-cni:v4.2.2-thick"}


def test_device_plugin_one_gpu_per_spark_by_default() -> None:
    docs = render_device_plugin(ClusterOptions())
    assert [d["kind"] for d in docs] == ["DaemonSet"]  # no time-slicing config
    spec = docs[0]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"sparkrack.io/role": "spark"}
    assert spec["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.18.2"
    assert "--device-discovery-strategy=nvml" in spec["containers"][0]["args"]
    shared = validated(render_device_plugin(ClusterOptions(gpus_per_spark=2)), "test")
    config = json.loads(by_kind(shared, "ConfigMap")[0]["data"]["config.yaml"])
    assert config["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 2}
    ]


# --- refusals ---------------------------------------------------------------------------------


def test_broken_manifest_is_refused(example_plan: Any) -> None:
    docs = render_addons(example_plan, ClusterOptions())
    broken = copy.deepcopy(docs)
    ds = next(d for d in broken if d["metadata"]["name"] == "kube-multus-ds")
    ds["spec"]["template"]["spec"]["containers"][0]["privilegd"] = True  # typo: unknown field
    with pytest.raises(SparkrackError) as exc:
        validated(broken, "test")
    assert "DaemonSet/kube-multus-ds" in str(exc.value)
    assert "privilegd" in str(exc.value)


def test_nad_with_invalid_cni_json_is_refused(example_plan: Any) -> None:
    docs = render_addons(example_plan, ClusterOptions())
    nad = copy.deepcopy(by_kind(docs, "NetworkAttachmentDefinition")[0])
    nad["spec"]["config"] = nad["spec"]["config"][:-1]
    with pytest.raises(SparkrackError, match="spec.config: is not valid JSON"):
        validated([nad], "test")


def test_manifest_without_part_of_label_is_refused() -> None:
    doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "labels": {}}}
    with pytest.raises(SparkrackError, match="part-of"):
        validated([doc], "test")


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"bogus": 1}, "cluster_addons.bogus"),
        ({"multus_image": "ghcr.io/k8snetworkplumbingwg/multus-cni:latest"}, "multus_image"),
        ({"device_plugin_image": "nvcr.io/nvidia/k8s-device-plugin"}, "device_plugin_image"),
        ({"gpus_per_spark": 0}, "gpus_per_spark"),
        ({"gpus_per_spark": "1"}, "gpus_per_spark"),
        ({"device_list_strategy": "magic"}, "device_list_strategy"),
        ({"namespace": "Not_A_Label"}, "namespace"),
    ],
)
def test_bad_options_are_refused_naming_the_key(raw: dict[str, Any], key: str) -> None:
    with pytest.raises(SparkrackError) as exc:
        options_from(raw, "inventories/x/group_vars")
    assert key in str(exc.value)
    assert "inventories/x/group_vars" in str(exc.value)


def test_two_rails_one_nad_per_rail_and_vf_and_pods_on_both() -> None:
    rails = ["enp1s0f0np0", "enP2p1s0f0np0"]
    fabric = {"subnet": "10.77.0.0/24", "ports": rails, "rails": rails, "vfs_in_use": [0, 1]}
    nodes = [NodeInput(f"spark{i}", f"192.168.1.{10 + i}", i) for i in range(1, 5)]
    plan = compute_plan(fabric, nodes)
    docs = render_addons(plan, ClusterOptions()) + render_fabric_check(plan, ClusterOptions())
    assert validate_manifests(docs) == []
    nads = {
        n["metadata"]["name"]: json.loads(n["spec"]["config"])["device"]
        for n in by_kind(docs, "NetworkAttachmentDefinition")
    }
    assert nads == {
        "sparkrack-vf0": "enp1s0f0v0",
        "sparkrack-vf1": "enp1s0f0v1",
        "sparkrack-rail1-vf0": "enP2p1s0f0v0",
        "sparkrack-rail1-vf1": "enP2p1s0f0v1",
    }
    for pod in by_kind(docs, "Pod"):
        nets = json.loads(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
        assert [(n["name"], n["interface"]) for n in nets] == [
            ("sparkrack-vf0", "net1"),
            ("sparkrack-rail1-vf0", "net2"),
        ]
        assert {n["name"] for n in nets} <= set(nads)
