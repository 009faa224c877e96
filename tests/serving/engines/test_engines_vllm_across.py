"""engine: vllm across Sparks — the shipped multi-Spark profile renders one StatefulSet per Spark
with the head/headless split, meets at the head's fabric address, and binds what crosses Sparks
on the fabric; a deployment on two Sparks and the bad topologies are judged by their keys.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping
from typing import Any

import pytest

from sparkrack import contract
from sparkrack.errors import SparkrackError
from sparkrack.k8s.validate import validate_manifests
from sparkrack.serving import load_profile, render_manifests, resolve, validate_profile
from sparkrack.serving.context import ServingContext, context_from_inventory
from sparkrack.serving.deployments.load import load_deployments
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.vllm import VLLMAcrossSparks
from sparkrack.serving.engines.vllm_across import ACROSS_LISTENERS
from sparkrack.serving.objects.connections import connection_problems
from sparkrack.serving.objects.ranks import deployment_objects

NAME = "nemotron-3-super-120b-a12b-nvfp4-vllm4"
SINGLE = "nemotron-3-super-120b-a12b-nvfp4-vllm"
INVENTORIES = ["inventories/example", "inventories/lab"]


def _sets(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "StatefulSet"]


def _container(sts: Mapping[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = sts["spec"]["template"]["spec"]["containers"][0]
    return container


def _argv(sts: Mapping[str, Any]) -> list[str]:
    container = _container(sts)
    command = container["command"]
    return [*command[command.index("--") + 1 :], *container["args"]]


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _env(sts: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in _container(sts)["env"] if "value" in e}


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_one_statefulset_per_spark_with_the_head_headless_split(inventory: str) -> None:
    ctx = context_from_inventory(inventory)
    profile = load_profile(NAME)
    docs = render_manifests(profile, ctx)
    assert validate_manifests(docs, source=NAME) == []
    sets = _sets(docs)
    nodes = sorted(ctx.plan.nodes, key=lambda n: n.rank)
    assert len(sets) == len(nodes) == 4
    head = nodes[0].serving_vf.address
    for rank, (sts, node) in enumerate(zip(sets, nodes, strict=True)):
        argv = _argv(sts)
        env = _env(sts)
        pod = sts["spec"]["template"]["spec"]
        assert pod["nodeSelector"]["kubernetes.io/hostname"] == node.name
        assert argv[:2] == ["vllm", "serve"]
        assert _flag(argv, "--nnodes") == "4"
        assert _flag(argv, "--node-rank") == str(rank)
        assert _flag(argv, "--tensor-parallel-size") == "4"
        # Every rank meets at the head's fabric address (the address plan's), never a cluster one.
        assert _flag(argv, "--master-addr") == head
        assert _flag(argv, "--master-port") == str(ctx.dist_port)
        assert ("--headless" in argv) is (rank > 0)
        # The message queues bind the rank's own fabric address; NCCL and Gloo use the VF.
        assert env["VLLM_HOST_IP"] == node.serving_vf.address
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == contract.POD_FABRIC_IFNAME
        assert contract.MULTUS_NETWORKS_ANNOTATION in sts["spec"]["template"]["metadata"].get(
            "annotations", {}
        )
        container = _container(sts)
        ports = {p["name"] for p in container["ports"]}
        assert ports == {"dist"}  # the head's API port is its gate's (test_engine_gate_vllm)
        if rank == 0:
            assert container["livenessProbe"]["httpGet"]["path"] == "/health"
        else:
            # A headless worker serves no HTTP: the group guard restarts it with its head.
            guard = container["livenessProbe"]["exec"]["command"]
            assert guard[1].endswith(contract.GUARD_FILE) and "VLLM_API_KEY" in guard
        keys = {e["name"] for e in container["env"] if "valueFrom" in e}
        assert "VLLM_API_KEY" in keys
        assert not any("VLLM_API_KEY" in w for w in argv)


def test_the_connections_between_ranks_stay_on_the_fabric() -> None:
    ctx = context_from_inventory("inventories/lab")
    res = resolve(load_profile(NAME), ctx)
    docs = deployment_objects(res, [])
    assert connection_problems(res, docs) == []
    # Negative control: without VLLM_HOST_IP vLLM binds its message queues on the address of
    # the default route (eth0), which the deployment's policy does not admit.
    broken = copy.deepcopy(docs)
    for sts in _sets(broken):
        container = _container(sts)
        container["env"] = [e for e in container["env"] if e["name"] != "VLLM_HOST_IP"]
    problems = connection_problems(res, broken)
    assert problems and all("ZeroMQ XPUB" in p.message for p in problems)
    assert all("VLLM_HOST_IP" in p.fix for p in problems)


def test_the_listeners_cover_what_crosses_sparks() -> None:
    names = {row.name: row for row in ACROSS_LISTENERS}
    store = names["dist-init (torch TCPStore)"]
    assert store.opens == "head" and store.reached_on() == "fabric"
    queue = names["message queues across nodes (ZeroMQ XPUB)"]
    assert queue.opens == "every" and queue.chosen_by == ("VLLM_HOST_IP",)


def test_the_variant_follows_the_topology() -> None:
    single = load_profile(SINGLE).data
    across = load_profile(NAME).data
    assert not engine_of(single).uses_fabric
    assert isinstance(engine_of(across), VLLMAcrossSparks)
    # The same profile at tp 1 is the one-Spark engine again.
    one = copy.deepcopy(across)
    one["topology"]["tp"] = 1
    assert not engine_of(one).uses_fabric


def test_the_shipped_profile_is_valid_on_four_sparks_only() -> None:
    data = load_profile(NAME).data
    assert validate_profile(copy.deepcopy(data), "x.yml", nodes=4) == []
    problems = validate_profile(copy.deepcopy(data), "x.yml", nodes=2)
    assert [(p.key, p.rule) for p in problems] == [("topology.tp", "vllm-across-ranks")]
    assert "set tp·pp to at most 2" in problems[0].fix


TWO = "nemotron-3-super-120b-a12b-nvfp4-vllm2"


def test_a_two_spark_profile_alone_runs_on_the_first_two_sparks() -> None:
    ctx = context_from_inventory("inventories/example")
    assert validate_profile(copy.deepcopy(load_profile(TWO).data), "x.yml", nodes=4) == []
    res = resolve(load_profile(TWO), ctx)
    head, worker = ctx.group()[:2]
    assert [r.node.name for r in res.ranks] == [head.name, worker.name]
    for rank in res.ranks:
        argv = res.argv(rank)
        assert _flag(argv, "--nnodes") == "2" and _flag(argv, "--tensor-parallel-size") == "2"
        assert _flag(argv, "--master-addr") == head.serving_vf.address
        assert ("--headless" in argv) is (rank.rank == 1)


def test_the_one_line_form_runs_a_two_spark_profile_on_the_first_two() -> None:
    base = context_from_inventory("inventories/lab")
    (deployment,) = load_deployments({"serving_profile": TWO}, base, "lab.yml", check_memory=False)
    assert [r.node.name for r in deployment.res.ranks] == ["spark1", "spark2"]
    assert all(_flag(deployment.res.argv(r), "--nnodes") == "2" for r in deployment.res.ranks)


def test_a_deployment_listing_more_sparks_than_the_profile_ranks_is_refused() -> None:
    four = ["spark1", "spark2", "spark3", "spark4"]
    variables, base = _lab([{"name": "super-2", "profile": TWO, "sparks": four}])
    with pytest.raises(SparkrackError) as err:
        load_deployments(variables, base, "lab.yml", check_memory=False)
    (problem,) = err.value.problems
    assert problem.rule == "vllm-across-ranks" and problem.key == "sparks"
    assert "list 2 Sparks" in problem.fix


def _lab(deployments: list[dict[str, Any]]) -> tuple[dict[str, Any], ServingContext]:
    base = context_from_inventory("inventories/lab")
    return {"serving_deployments": deployments}, base


def test_a_deployment_on_two_sparks_sets_tp_2() -> None:
    variables, base = _lab(
        [
            {
                "name": "super-2",
                "profile": NAME,
                "sparks": ["spark3", "spark4"],
                "topology": {"tp": 2},
            }
        ]
    )
    (deployment,) = load_deployments(variables, base, "lab.yml", check_memory=False)
    res = deployment.res
    assert [r.node.name for r in res.ranks] == ["spark3", "spark4"]
    head = base.node("spark3").serving_vf.address
    for rank in res.ranks:
        argv = res.argv(rank)
        assert _flag(argv, "--nnodes") == "2" and _flag(argv, "--tensor-parallel-size") == "2"
        assert _flag(argv, "--master-addr") == head
        assert ("--headless" in argv) is (rank.rank == 1)
    assert connection_problems(res, deployment_objects(res, [])) == []


def test_a_deployment_whose_sparks_do_not_match_tp_is_refused_naming_the_key() -> None:
    variables, base = _lab([{"name": "super-2", "profile": NAME, "sparks": ["spark3", "spark4"]}])
    with pytest.raises(SparkrackError) as err:
        load_deployments(variables, base, "lab.yml", check_memory=False)
    (problem,) = err.value.problems
    assert problem.rule == "vllm-across-ranks" and problem.key.startswith("topology.tp")


def test_the_rendered_head_command_reads_as_vllm_serve() -> None:
    ctx = context_from_inventory("inventories/example")
    res = resolve(load_profile(NAME), ctx)
    command = shlex.split(res.command(1))
    assert command[:2] == ["vllm", "serve"] and command[-1] == "--headless"


@pytest.mark.parametrize(
    "words",
    [["--distributed-executor-backend", "ray"], ["--data-parallel-backend=ray"]],
)
def test_ray_across_sparks_is_refused_with_the_reason_and_the_flags_to_use(
    words: list[str],
) -> None:
    data = copy.deepcopy(load_profile(NAME).data)
    data["extra_args"] = words
    (problem,) = validate_profile(data, "x.yml", nodes=4)
    assert (problem.key, problem.rule) == ("extra_args", "extra-args-owned")
    assert "memory monitor" in problem.message and "95 %" in problem.message
    for flag in ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless"):
        assert flag in problem.message
