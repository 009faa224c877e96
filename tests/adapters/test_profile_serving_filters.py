"""The serving role's Jinja filters (sparkrack.adapters.ansible) on real inventories and logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from hostile_corpus import by_id, write

from sparkrack.adapters.ansible import FILTERS
from sparkrack.fabric.addressplan import nodes_from_hostvars
from sparkrack.fabric.layout import compute_plan
from sparkrack.inputs.inventory import Inventory, load_inventory
from sparkrack.serving.trust import TRUST_VARS

ROOT = Path(__file__).resolve().parents[2]
NCCL = ROOT / "tests" / "data" / "nccl"


def one(profile: str) -> dict[str, str]:
    return {"serving_profile": profile}


def settings(inv: Inventory, **given: str) -> dict[str, object]:
    """The serving settings the role passes: the inventory's trust lists and ``given``."""
    return {**{k: inv.var(k) for k in TRUST_VARS}, **given}


def test_render_the_lab_deployments() -> None:
    inv = load_inventory("inventories/lab")
    out = FILTERS["sparkrack_serving_render"](
        {"serving_deployments": inv.var("serving_deployments"), "serving_profile": ""},
        inv.plan().to_dict(),
        inv.hostvars,
        settings(inv, serving_fetch_image=inv.var("serving_fetch_image")),
    )
    assert out["names"] == ["gemma", "super-vllm", "super-trtllm"]
    assert [len(d["pods"]) for d in out["deployments"]] == [2, 1, 1]
    assert [d["nccl_check"] for d in out["deployments"]] == [True, False, False]
    assert any(line.startswith("deployment gemma:") for line in out["summary"])


@pytest.mark.parametrize("inventory", ["inventories/example"])
def test_render_for_the_inventory(inventory: str) -> None:
    inv = load_inventory(inventory)
    out = FILTERS["sparkrack_serving_render"](
        {"serving_profile": inv.var("serving_profile"), "serving_deployments": []},
        inv.plan().to_dict(),
        inv.hostvars,
        settings(
            inv,
            serving_namespace=inv.var("serving_namespace"),
            serving_api_port="30000",
            serving_fetch_image=inv.var("serving_fetch_image"),
        ),
    )
    [dep] = out["deployments"]
    assert dep["profile"] == "nemotron-3-super-120b-a12b-nvfp4"
    assert dep["head_pod"] == "sparkrack-nemotron-3-super-120b-a12b-nvfp4-r0-0"
    assert len(dep["pods"]) == len(inv.sparks) == len(dep["plan"]["ranks"])
    assert dep["selector"] == (
        "sparkrack.io/component=serving,sparkrack.io/deployment=nemotron-3-super-120b-a12b-nvfp4"
    )
    # The serving and the agents' namespaces and their default denies; launcher ConfigMap, 2
    # Services, a StatefulSet per Spark, the deployment's NetworkPolicy; the gateway's 3 and its
    # NetworkPolicy.
    assert len(out["manifests"]) == 4 + 3 + len(inv.sparks) + 1 + 3 + 1
    kinds = [d["kind"] for d in out["manifests"]]
    assert kinds.count("NetworkPolicy") == 4
    assert dep["nccl_check"] is True
    assert out["prune_selectors"][-1] == (
        "sparkrack.io/deployment notin (nemotron-3-super-120b-a12b-nvfp4)"
    )


def test_the_discovered_gid_index_stays_out_of_the_pods() -> None:
    inv = load_inventory("inventories/example")
    hostvars = {h: {**v, "roce_gid_index": 3} for h, v in inv.hostvars.items()}
    out = FILTERS["sparkrack_serving_render"](
        one("glm-4.7-nvfp4"),
        inv.plan().to_dict(),
        hostvars,
        settings(inv, serving_fetch_image="f:1"),
    )
    sts = [d for d in out["manifests"] if d["kind"] == "StatefulSet"]
    assert len(sts) == 4
    for doc in sts:
        env = {
            e["name"]: e.get("value")
            for e in doc["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        # a converge-time index moves with the VFs: the rank resolves its own at start
        assert "NCCL_IB_GID_INDEX" not in env and "SPARKRACK_GID_INDEX_OVERRIDE" not in env
        assert env["SPARKRACK_GID_TARGETS"].startswith("rocep1s0f0v0=")


def test_refused_profile_stops_with_rule_id(tmp_path: Path) -> None:
    inv = load_inventory("inventories/lab")
    bad = str(write(by_id("super-cudnn"), tmp_path))
    with pytest.raises(AnsibleFilterError, match=r"\[fp4-gemm-cudnn-missing\]"):
        FILTERS["sparkrack_serving_render"](
            one(bad), inv.plan().to_dict(), inv.hostvars, settings(inv)
        )


def test_topology_checked_against_the_inventory() -> None:
    inv = load_inventory("inventories/lab")
    with pytest.raises(AnsibleFilterError, match=r"\[topology-nodes\]"):
        two = compute_plan(inv.var("fabric"), nodes_from_hostvars(inv.sparks[:2], inv.hostvars))
        FILTERS["sparkrack_serving_render"](
            one("gemma-4-31b-it"), two.to_dict(), inv.hostvars, settings(inv)
        )


def test_nccl_transport_gate() -> None:
    roce = (NCCL / "roce_4node_allreduce.log").read_text()
    fallback = (NCCL / "socket_fallback_unprivileged.log").read_text()
    assert FILTERS["sparkrack_nccl_problems"](roce, "roce") == []
    assert FILTERS["sparkrack_nccl_problems"](roce.splitlines(), "roce") == []
    problems = FILTERS["sparkrack_nccl_problems"](fallback, "roce")
    assert problems and any("Socket" in p for p in problems)


def test_diagnose_lines_name_known_failures() -> None:
    log = ["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]
    findings = FILTERS["sparkrack_diagnose"](log)
    assert findings and "mem_fraction_static" in "\n".join(findings)
    assert FILTERS["sparkrack_diagnose"]("all good") == []


def test_the_serve_plays_log_tail_is_redacted() -> None:
    log = [
        "server_args=ServerArgs(model_path='m', api_key='sk-engine-5521', admin_api_key='adm-77')",
        "Authorization: Bearer sk-gw-9182",
        "all good",
    ]
    lines = FILTERS["sparkrack_redact"](log)
    assert len(lines) == 3 and lines[2] == "all good" and "model_path='m'" in lines[0]
    assert not [s for s in ("sk-engine-5521", "adm-77", "sk-gw-9182") if s in "\n".join(lines)]
    findings = FILTERS["sparkrack_diagnose"]([*log, "torch.OutOfMemoryError: api_key='sk-x-1234'"])
    assert findings and "sk-x-1234" not in "\n".join(findings)


def test_single_spark_engine_waits_for_one_pod() -> None:
    inv = load_inventory("inventories/lab")
    out = FILTERS["sparkrack_serving_render"](
        one("nemotron-3-super-120b-a12b-nvfp4-vllm"),
        inv.plan().to_dict(),
        inv.hostvars,
        settings(inv),
    )
    [dep] = out["deployments"]
    sts = [d for d in out["manifests"] if d["kind"] == "StatefulSet"]
    assert dep["pods"] == [f"{sts[0]['metadata']['name']}-0"] == [dep["head_pod"]]
    # No NCCL group on one Spark: the serve play must not demand NCCL transport lines.
    assert dep["nccl_check"] is False
