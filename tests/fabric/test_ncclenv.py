"""One NCCL environment: serving ranks and fabric-check pods get the same one, HCAs exact."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack import contract
from sparkrack.errors import SparkrackError
from sparkrack.fabric.addressplan import FabricPlan, NodeInput
from sparkrack.fabric.layout import compute_plan
from sparkrack.fabric.ncclenv import rank_env
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k8s import ClusterOptions, render_addons
from sparkrack.k8s.fabric_check import render_fabric_check
from sparkrack.serving import (
    context_from_vars,
    list_profiles,
    load_profile,
    render_env,
    render_manifests,
)

RAILS = ["enp1s0f0np0", "enP2p1s0f0np0"]
NCCL_KEYS = re.compile(r"^(NCCL_|GLOO_|SPARKRACK_GID_)")
SGLANG = [p.stem for p in list_profiles() if load_profile(p.stem).data["engine"] == "sglang"]


def plan_of(**fabric: Any) -> FabricPlan:
    spec = {"subnet": "10.77.0.0/24", "vf_count": 4, "vfs_in_use": [0], **fabric}
    nodes = [NodeInput(f"spark{i}", f"192.168.1.{10 + i}", i) for i in range(1, 5)]
    return compute_plan(spec, nodes)


PLANS = {
    "example": lambda: load_inventory("inventories/example").plan(),
    "lab": lambda: load_inventory("inventories/lab").plan(),
    "vf1": lambda: plan_of(vfs_in_use=[1, 2]),
    "two-rails": lambda: plan_of(ports=RAILS, rails=RAILS, vfs_in_use=[1, 3]),
}


def pod_envs(docs: list[dict[str, Any]]) -> list[dict[str, str]]:
    envs = []
    for doc in docs:
        spec = doc.get("spec", {})
        spec = spec.get("template", {}).get("spec", spec)
        for container in spec.get("containers", []) if isinstance(spec, dict) else []:
            if container.get("name") == contract.GATE_CONTAINER:
                continue  # the head's HTTP gate holds no env and joins no NCCL group
            envs.append({e["name"]: e.get("value", "") for e in container.get("env", [])})
    return envs


def nccl_part(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if NCCL_KEYS.match(k)}


def profile_with_transport(tmp_path: Path, transport: str) -> Any:
    data = yaml.safe_load(Path("model_profiles/glm-4.7-nvfp4.yml").read_text())
    data["transport"] = transport
    path = tmp_path / f"glm-{transport}.yml"
    path.write_text(yaml.safe_dump(data))
    return load_profile(str(path))


@pytest.mark.parametrize("which", sorted(PLANS))
@pytest.mark.parametrize("transport", ["roce", "socket"])
def test_serving_rank_and_fabric_check_pod_get_the_same_nccl_env(
    which: str, transport: str, tmp_path: Path
) -> None:
    plan = PLANS[which]()
    ctx = context_from_vars(plan, {})
    profile = profile_with_transport(tmp_path, transport)
    serving = [nccl_part(e) for e in pod_envs(render_manifests(profile, ctx))]
    check = [
        nccl_part(e)
        for e in pod_envs(render_fabric_check(plan, ClusterOptions(), transport))  # type: ignore[arg-type]
    ]
    assert len(serving) == len(check) == len(plan.nodes)
    assert serving == check
    for rank, node in enumerate(plan.nodes):
        assert nccl_part(render_env(profile, ctx, rank)) == check[rank]
        assert check[rank] == rank_env(plan, node, transport=transport)
    # the rendered env is not trivially equal: it carries the node's own VF device(s) and
    # addresses; the GID index converge discovered is not baked in (the rank reads it at start)
    if transport == "roce":
        assert check[0]["SPARKRACK_GID_TARGETS"] != check[1]["SPARKRACK_GID_TARGETS"]
        assert all("NCCL_IB_GID_INDEX" not in env for env in check + serving)
        assert check[0]["NCCL_IB_HCA"].startswith("=")


def test_fabric_check_for_another_vf_differs_from_serving() -> None:
    """Negative control: the equality above fails when the check runs on a different VF."""
    plan = PLANS["vf1"]()
    node = plan.nodes[0]
    serving = rank_env(plan, node, transport="roce")
    other = pod_envs(render_fabric_check(plan, ClusterOptions(), "roce", vf_index=2))[0]
    assert nccl_part(other) != serving
    assert nccl_part(other) == rank_env(plan, node, transport="roce", vf_index=2)
    assert other["NCCL_IB_HCA"] == "=rocep1s0f0v2"
    (net,) = json.loads(
        render_fabric_check(plan, ClusterOptions(), "roce", vf_index=2)[1]["metadata"][
            "annotations"
        ]["k8s.v1.cni.cncf.io/networks"]
    )
    assert net["name"] == "sparkrack-vf2" and net["ips"] == [node.vf(2).cidr]


def test_two_rails_list_both_vfs_exactly_and_merge_them() -> None:
    plan = PLANS["two-rails"]()
    spark2 = plan.node("spark2")
    env = rank_env(plan, spark2, transport="roce")
    assert env["NCCL_IB_HCA"] == "=rocep1s0f0v1,roceP2p1s0f0v1"
    assert env["NCCL_IB_MERGE_NICS"] == "1"
    assert env["NCCL_NET"] == "IB"
    v1 = spark2.rail_vfs(1)
    assert env["SPARKRACK_GID_TARGETS"] == ",".join(f"{v.rdma_device}={v.address}" for v in v1)
    env3 = rank_env(plan, spark2, transport="roce", vf_index=3)
    assert env3["NCCL_IB_HCA"] == "=rocep1s0f0v3,roceP2p1s0f0v3"
    vf1 = PLANS["vf1"]()
    one_rail = rank_env(vf1, vf1.node("spark2"), transport="roce")
    assert one_rail["NCCL_IB_HCA"] == "=rocep1s0f0v1"
    assert "NCCL_IB_MERGE_NICS" not in one_rail


def test_plan_gid_index_is_handed_to_the_resolver_as_an_override() -> None:
    plan = replace(PLANS["vf1"](), gid_index=7)
    env = rank_env(plan, plan.nodes[0], transport="roce")
    assert env["SPARKRACK_GID_INDEX_OVERRIDE"] == "7" and "NCCL_IB_GID_INDEX" not in env
    unset = rank_env(PLANS["vf1"](), plan.nodes[0], transport="roce")
    assert "SPARKRACK_GID_INDEX_OVERRIDE" not in unset


def test_socket_transport_names_no_hca() -> None:
    plan = PLANS["two-rails"]()
    env = rank_env(plan, plan.nodes[0], transport="socket")
    assert env == {
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": "net1",
        "GLOO_SOCKET_IFNAME": "net1",
        "NCCL_NET": "Socket",
        "NCCL_IB_DISABLE": "1",
    }


def test_unknown_transport_and_vf_are_refused() -> None:
    plan = PLANS["vf1"]()
    with pytest.raises(SparkrackError, match="transport"):
        rank_env(plan, plan.nodes[0], transport="tcp")
    with pytest.raises(SparkrackError, match="VF index 9 does not exist"):
        rank_env(plan, plan.nodes[0], transport="roce", vf_index=9)


# --- no bare HCA prefix anywhere rendered ----------------------------------------------------

_HCA_VALUE = re.compile(
    r"NCCL_IB_HCA(?:=(?P<shell>[^\s\"'`]+)"  # shell: NCCL_IB_HCA=<value>
    r"|[\"']?(?::\s*|,\s*[\"']?value[\"']?\s*:\s*|\n\s*value:\s*)[\"']?(?P<data>[^\s\"'}]+))"
)


def bare_hca_values(text: str) -> list[str]:
    """Every NCCL_IB_HCA value in ``text`` that NCCL would read as a prefix (no leading '=')."""
    values = [m["shell"] or m["data"] for m in _HCA_VALUE.finditer(text)]
    return [v for v in values if not v.startswith("=")]


def test_bare_hca_detector_catches_a_prefix() -> None:
    """Negative control for the sweep below."""
    bad = yaml.safe_dump({"env": [{"name": "NCCL_IB_HCA", "value": "rocep1s0f0v1"}]})
    assert bare_hca_values(bad) == ["rocep1s0f0v1"]
    assert bare_hca_values(json.dumps({"NCCL_IB_HCA": "mlx5_0,mlx5_1"})) == ["mlx5_0,mlx5_1"]
    assert bare_hca_values("export NCCL_IB_HCA=rocep1s0f0v0") == ["rocep1s0f0v0"]
    assert bare_hca_values("export NCCL_IB_HCA==rocep1s0f0v0") == []
    assert bare_hca_values("check NCCL_IB_HCA names the device") == []
    good = yaml.safe_dump({"env": [{"name": "NCCL_IB_HCA", "value": "=rocep1s0f0v1"}]})
    assert bare_hca_values(good) == []


@pytest.mark.parametrize("which", sorted(PLANS))
def test_no_bare_hca_prefix_in_any_rendered_manifest(which: str) -> None:
    plan = PLANS[which]()
    ctx = context_from_vars(plan, {}, {})
    docs: list[dict[str, Any]] = list(render_addons(plan, ClusterOptions()))
    docs += render_fabric_check(plan, ClusterOptions())
    for name in SGLANG:
        docs += render_manifests(load_profile(name), ctx)
    text = yaml.safe_dump_all(docs)
    assert "NCCL_IB_HCA" in text
    assert bare_hca_values(text) == []
    devices = {vf.rdma_device for n in plan.nodes for vf in n.vfs}
    for env in pod_envs(docs):
        if "NCCL_IB_HCA" in env:
            listed = env["NCCL_IB_HCA"].removeprefix("=").split(",")
            assert set(listed) <= devices
            assert len(listed) == len(plan.rails)


def test_no_bare_hca_prefix_in_docs() -> None:
    for path in [Path("README.md"), *Path("docs").rglob("*.md")]:
        assert bare_hca_values(path.read_text()) == [], path
