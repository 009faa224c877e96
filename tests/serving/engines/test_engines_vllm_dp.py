"""engine: vllm data parallel across Sparks — a profile with ``vllm.data_parallel_size`` > 1
renders one rank StatefulSet per Spark (dp groups of tp x pp), the head serving the API and the
other ranks headless with their DP start rank, every DP socket on the head's fabric address; what
the pinned releases do not support, or sparkrack renders itself, is refused by key and rule.

The profiles are test data (tests/data/profiles), not shipped ones.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sparkrack.errors import SparkrackError
from sparkrack.k8s.validate import validate_manifests
from sparkrack.serving import load_profile, render_manifests, resolve, validate_profile
from sparkrack.serving.context import context_from_inventory
from sparkrack.serving.deployments.load import load_deployments
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.listeners import Bind, PortOf
from sparkrack.serving.engines.vllm import VLLMAcrossSparks
from sparkrack.serving.engines.vllm_across import DATA_PARALLEL, DP_LISTENERS
from sparkrack.serving.objects.connections import connection_problems
from sparkrack.serving.objects.ranks import deployment_objects

DATA = Path(__file__).resolve().parents[2] / "data" / "profiles"
DP2 = DATA / "vllm-dp2.yml"  # dp 2 x tp 1: 2 Sparks
DP2_TP2 = DATA / "vllm-dp2-tp2.yml"  # dp 2 x tp 2: 4 Sparks
INVENTORIES = ["inventories/example", "inventories/lab"]


def _argv(sts: Mapping[str, Any]) -> list[str]:
    container = sts["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    return [*command[command.index("--") + 1 :], *container["args"]]


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("inventory", INVENTORIES)
@pytest.mark.parametrize(("path", "tp", "sparks"), [(DP2, 1, 2), (DP2_TP2, 2, 4)])
def test_one_rank_per_spark_with_the_head_headless_split_and_dp_ranks(
    inventory: str, path: Path, tp: int, sparks: int
) -> None:
    ctx = context_from_inventory(inventory)
    profile = load_profile(path)
    assert validate_profile(copy.deepcopy(profile.data), "x.yml", nodes=4) == []
    docs = render_manifests(profile, ctx)
    assert validate_manifests(docs, source=profile.name) == []
    sets = [d for d in docs if d["kind"] == "StatefulSet"]
    nodes = sorted(ctx.plan.nodes, key=lambda n: n.rank)[:sparks]
    assert len(sets) == sparks
    head = nodes[0].serving_vf.address
    for rank, (sts, node) in enumerate(zip(sets, nodes, strict=True)):
        argv = _argv(sts)
        assert sts["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] == (
            node.name
        )
        assert argv[:2] == ["vllm", "serve"]
        assert _flag(argv, "--nnodes") == str(sparks)
        assert _flag(argv, "--node-rank") == str(rank)
        assert _flag(argv, "--data-parallel-size") == "2"
        assert _flag(argv, "--tensor-parallel-size") == str(tp)
        # Every DP socket and the torch group: the head's fabric address, never a cluster one.
        assert _flag(argv, "--master-addr") == _flag(argv, "--data-parallel-address") == head
        assert _flag(argv, "--data-parallel-rpc-port") == str(ctx.dist_port + 1)
        assert ("--headless" in argv) is (rank > 0)
        # The head leaves the start rank out (it would turn on vLLM's hybrid load balancer).
        start = _flag(argv, "--data-parallel-start-rank")
        assert start == (None if rank == 0 else str(rank // tp))
        assert "--data-parallel-size-local" not in argv


def test_a_profile_without_data_parallel_renders_no_dp_flag_nor_socket() -> None:
    ctx = context_from_inventory("inventories/example")
    res = resolve(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm2"), ctx)
    words = {w for r in res.ranks for w in res.argv(r) if w.startswith("--data-parallel-")}
    assert words == {"--data-parallel-size"}  # the profile's own 1
    assert not set(DP_LISTENERS) & set(res.engine.listeners(ctx))
    dp = resolve(load_profile(DP2), ctx)
    assert set(DP_LISTENERS) <= set(dp.engine.listeners(ctx))


def test_the_dp_sockets_are_the_heads_and_stay_on_the_fabric() -> None:
    ctx = context_from_inventory("inventories/lab")
    for path in (DP2, DP2_TP2):
        res = resolve(load_profile(path), ctx)
        assert connection_problems(res, deployment_objects(res, [])) == []
    for row in DP_LISTENERS:
        assert row.opens == "head" and row.when == DATA_PARALLEL
        assert row.reached_on() is Bind.FABRIC
        assert "vllm/" in row.source
    handshake = next(r for r in DP_LISTENERS if "handshake" in r.name)
    assert handshake.port is PortOf.DIST_NEXT
    assert handshake.port_of(ctx.api_port, ctx.dist_port) == ctx.dist_port + 1


def test_the_plan_says_what_each_spark_holds() -> None:
    data = load_profile(DP2).data
    memory = engine_of(data).serving(data).memory
    (line,) = [a for a in memory.assumptions if "data parallel" in a]
    assert "each of the 2 DP ranks holds its own copy of the weights" in line
    one = load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm2").data
    assert not any("data parallel" in a for a in engine_of(one).serving(one).memory.assumptions)


def test_the_variant_counts_dp_ranks() -> None:
    data = load_profile(DP2_TP2).data
    eng = engine_of(data)
    assert isinstance(eng, VLLMAcrossSparks) and (eng.sparks, eng.dp) == (4, 2)
    # dp 2 alone on tp 1 is across Sparks too; dp 1 and tp 1 is one Spark again.
    one = copy.deepcopy(load_profile(DP2).data)
    assert isinstance(engine_of(one), VLLMAcrossSparks)
    one["vllm"]["data_parallel_size"] = 1
    assert not engine_of(one).uses_fabric


# --- refusals ------------------------------------------------------------------------------


def test_more_dp_ranks_than_sparks_is_refused_naming_the_key() -> None:
    data = load_profile(DP2_TP2).data
    problems = validate_profile(copy.deepcopy(data), "x.yml", nodes=2)
    assert [(p.key, p.rule) for p in problems] == [("vllm.data_parallel_size", "vllm-across-ranks")]
    assert "dp·tp·pp = 2·2·1 = 4" in problems[0].message
    assert "at most 2" in problems[0].fix


def test_data_parallel_of_a_dense_model_is_refused() -> None:
    data = copy.deepcopy(load_profile(DP2).data)
    del data["model_info"]["experts"]
    del data["model_info"]["layers"]["moe"]
    problems = validate_profile(data, "x.yml", nodes=4)
    assert [(p.key, p.rule) for p in problems] == [
        ("vllm.data_parallel_size", "vllm-across-data-parallel")
    ]
    assert "set vllm.data_parallel_size: 1" in problems[0].fix


def test_data_parallel_on_a_release_sparkrack_has_not_read_is_refused() -> None:
    data = copy.deepcopy(load_profile(DP2).data)
    data["image"] = "vllm/vllm-openai:cu130-nightly-0123abc"
    data["image_info"] = {"vllm": "0.33.0"}
    problems = validate_profile(data, "x.yml", nodes=4)
    assert [(p.key, p.rule) for p in problems] == [("image", "vllm-across-data-parallel")]
    assert "0.18 and 0.19" in problems[0].fix
    data["image_info"] = {"vllm": "0.19.1"}
    assert validate_profile(data, "x.yml", nodes=4) == []


@pytest.mark.parametrize(
    "words",
    [
        ["--data-parallel-address", "10.0.0.1"],
        ["--data-parallel-rpc-port=1234"],
        ["-dpa", "10.0.0.1"],
        ["--data-parallel-start-rank", "1"],
        ["--data-parallel-size-local", "1"],
        ["--data-parallel-rank", "1"],
        ["--data-parallel-hybrid-lb"],
        ["--data-parallel-external-lb"],
        ["--api-server-count", "1"],
        ["--data-parallel-backend", "ray"],
    ],
)
def test_dp_flags_by_hand_are_refused(words: list[str]) -> None:
    data = copy.deepcopy(load_profile(DP2).data)
    data["extra_args"] = words
    (problem,) = validate_profile(data, "x.yml", nodes=4)
    assert (problem.key, problem.rule) == ("extra_args", "extra-args-owned")
    assert "sparkrack" in problem.message


def _deploy(sparks: list[str]) -> dict[str, Any]:
    return {"serving_deployments": [{"name": "dp", "profile": str(DP2), "sparks": sparks}]}


def test_a_deployment_on_two_other_sparks_meets_at_its_own_head() -> None:
    base = context_from_inventory("inventories/lab")
    (deployment,) = load_deployments(_deploy(["spark3", "spark4"]), base, "lab.yml")
    res = deployment.res
    assert [r.node.name for r in res.ranks] == ["spark3", "spark4"]
    head = base.node("spark3").serving_vf.address
    assert all(_flag(res.argv(r), "--data-parallel-address") == head for r in res.ranks)
    assert connection_problems(res, deployment_objects(res, [])) == []


def test_a_deployment_whose_sparks_do_not_match_dp_is_refused() -> None:
    base = context_from_inventory("inventories/lab")
    with pytest.raises(SparkrackError) as err:
        load_deployments(_deploy(["spark1", "spark2", "spark3"]), base, "lab.yml")
    (problem,) = err.value.problems
    assert (problem.key, problem.rule) == ("sparks", "vllm-across-ranks")
    assert "dp·tp·pp runs 2 vLLM ranks" in problem.message and "list 2 Sparks" in problem.fix


def test_a_dist_port_next_to_the_api_port_is_refused() -> None:
    ctx = context_from_inventory("inventories/example")
    clash = copy.copy(ctx)
    object.__setattr__(clash, "api_port", ctx.dist_port + 1)
    with pytest.raises(SparkrackError) as err:
        resolve(load_profile(DP2), clash)
    (problem,) = err.value.problems
    assert (problem.key, problem.rule) == ("serving_dist_port", "vllm-across-ranks")
