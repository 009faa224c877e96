"""Several models at once: serving_deployments validated, rendered per deployment, routed by alias."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack import contract
from sparkrack.cli import main
from sparkrack.errors import SparkrackError
from sparkrack.fabric.addressplan import nodes_from_hostvars
from sparkrack.fabric.layout import compute_plan
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k8s.validate import validate_manifests
from sparkrack.serving.context import ServingContext, context_from_inventory, context_from_vars
from sparkrack.serving.deployments.bundle import DeploymentSet, from_vars, render_serving
from sparkrack.serving.trust import TRUST_VARS

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "guide" / "several-models.md"

MIXED = [  # (a): Gemma-4 TP2 on spark1+spark2, vLLM Super on spark3, TRT-LLM Super on spark4
    {
        "name": "gemma",
        "profile": "gemma-4-31b-it",
        "sparks": ["spark1", "spark2"],
        "topology": {"tp": 2},
    },
    {
        "name": "super-vllm",
        "profile": "nemotron-3-super-120b-a12b-nvfp4-vllm",
        "sparks": ["spark3"],
    },
    {
        "name": "super-trtllm",
        "profile": "nemotron-3-super-120b-a12b-nvfp4-trtllm",
        "sparks": ["spark4"],
        "alias": "super-trtllm",
    },
]


@pytest.fixture(scope="module")
def ctx() -> ServingContext:
    return context_from_inventory("inventories/example")


@pytest.fixture(scope="module")
def two_vfs() -> ServingContext:
    """The example inventory with VFs 0 and 1 in use (two deployments may share Sparks)."""
    inv = load_inventory("inventories/example")
    fabric = {**inv.var("fabric"), "vfs_in_use": [0, 1]}
    return context_from_vars(
        compute_plan(fabric, nodes_from_hostvars(inv.sparks, inv.hostvars)),
        {
            "serving_fetch_image": inv.var("serving_fetch_image"),
            **{name: inv.var(name) for name in TRUST_VARS},
        },
    )


def render(deployments: list[dict[str, Any]], ctx: ServingContext) -> dict[str, Any]:
    return render_serving(from_vars({"serving_deployments": deployments}, ctx, "inv.yml"))


def objects(rendered: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return next(d for d in rendered["deployments"] if d["name"] == name)["manifests"]


def pod(sts: dict[str, Any]) -> dict[str, Any]:
    return sts["spec"]["template"]  # type: ignore[no-any-return]


def env_of(sts: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod(sts)["spec"]["containers"][0]["env"]}


def profile_copy(tmp_path: Path, name: str, **sglang: Any) -> str:
    data = yaml.safe_load((ROOT / "model_profiles" / f"{name}.yml").read_text())
    data["sglang"].update(sglang)
    path = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.yml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


# --- (a) 2+1+1 on the example inventory -------------------------------------------------------


def test_mixed_engines_render_valid_distinct_pinned_objects(ctx: ServingContext) -> None:
    out = render(MIXED, ctx)
    assert validate_manifests(out["manifests"], source="mixed") == []
    keys = [
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in out["manifests"]
    ]
    assert len(keys) == len(set(keys)), "object name collision"
    sparks = {m["name"]: m["sparks"] for m in MIXED}
    for dep in out["deployments"]:
        sts = [o for o in dep["manifests"] if o["kind"] == "StatefulSet"]
        assert len(sts) == len(sparks[dep["name"]])
        for rank, doc in enumerate(sts):
            assert doc["metadata"]["labels"]["sparkrack.io/deployment"] == dep["name"]
            selector = pod(doc)["spec"]["nodeSelector"]
            assert selector["kubernetes.io/hostname"] == sparks[dep["name"]][rank]
    gemma = [o for o in objects(out, "gemma") if o["kind"] == "StatefulSet"]
    for rank, doc in enumerate(gemma):
        annotation = pod(doc)["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        node = ctx.node(sparks["gemma"][rank])
        assert node.serving_vf.address in annotation
        assert env_of(doc)["NCCL_IB_HCA"] == f"={node.serving_vf.rdma_device}"
        assert "--tp-size 2" in " ".join(pod(doc)["spec"]["containers"][0]["args"])
        assert pod(doc)["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    for name in ("super-vllm", "super-trtllm"):
        [doc] = [o for o in objects(out, name) if o["kind"] == "StatefulSet"]
        assert "k8s.v1.cni.cncf.io/networks" not in pod(doc)["metadata"].get("annotations", {})
        assert "securityContext" not in pod(doc)["spec"]["containers"][0]
        assert not any(k.startswith("NCCL_") for k in env_of(doc))


def test_gateway_routes_every_alias_to_its_api_service(ctx: ServingContext) -> None:
    out = render(MIXED, ctx)
    config = yaml.safe_load(out["gateway"]["manifests"][0]["data"]["config.yaml"])
    routes = {m["model_name"]: m["litellm_params"] for m in config["model_list"]}
    assert set(routes) == {
        "google/gemma-4-31B-it",
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        "super-trtllm",
    }
    for dep in out["deployments"]:
        assert f"//{dep['api_service']}.sparkrack.svc" in routes[dep["alias"]]["api_base"]
    assert routes["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"]["model"] == (
        "openai/nemotron-3-super"  # the vLLM profile's served_model_name
    )
    # The master key is a Secret reference, never a value.
    gateway = out["gateway"]["manifests"][1]["spec"]["template"]["spec"]["containers"][0]
    key = [e for e in gateway["env"] if e["name"] == "LITELLM_MASTER_KEY"]
    assert len(key) == 1 and "value" not in key[0] and key[0]["valueFrom"]["secretKeyRef"]


# --- (b) co-located on the same two Sparks -------------------------------------------------------


def test_colocated_deployments_with_own_vfs_fit(two_vfs: ServingContext, tmp_path: Path) -> None:
    small = profile_copy(tmp_path, "gemma-4-31b-it", mem_fraction_static=0.45)
    deps = [
        {
            "name": "a",
            "profile": small,
            "sparks": ["spark1", "spark2"],
            "topology": {"tp": 2},
            "vf": 0,
            "alias": "a",
        },
        {
            "name": "b",
            "profile": small,
            "sparks": ["spark1", "spark2"],
            "topology": {"tp": 2},
            "vf": 1,
            "alias": "b",
        },
    ]
    out = render(deps, two_vfs)
    for name, vf in (("a", 0), ("b", 1)):
        for doc in [o for o in objects(out, name) if o["kind"] == "StatefulSet"]:
            node = two_vfs.node(
                doc["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"]
            )
            assert env_of(doc)["NCCL_IB_HCA"] == f"={node.vf(vf).rdma_device}"
            assert (
                node.vf(vf).address
                in pod(doc)["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
            )


def test_colocated_deployments_that_do_not_fit_are_refused_with_the_table(
    two_vfs: ServingContext,
) -> None:
    deps = [
        {
            "name": n,
            "profile": "gemma-4-31b-it",
            "sparks": ["spark1", "spark2"],
            "topology": {"tp": 2},
            "vf": vf,
            "alias": n,
        }
        for n, vf in (("a", 0), ("b", 1))
    ]
    with pytest.raises(SparkrackError) as exc:
        render(deps, two_vfs)
    [problem] = exc.value.problems
    assert problem.rule == "deployments-memory" and problem.file == "inv.yml"
    table = problem.message
    assert re.search(r"spark1\s+a\s+72\.0", table) and re.search(r"spark1\s+b\s+72\.0", table)
    assert re.search(r"spark1\s+= total / usable\s+144\.0 / 120 OVER", table)


def test_shared_spark_needs_distinct_vfs(two_vfs: ServingContext, tmp_path: Path) -> None:
    small = profile_copy(tmp_path, "gemma-4-31b-it", mem_fraction_static=0.45)
    deps = [
        {
            "name": n,
            "profile": small,
            "sparks": ["spark1", "spark2"],
            "topology": {"tp": 2},
            "alias": n,
        }
        for n in ("a", "b")
    ]
    with pytest.raises(SparkrackError, match=r"a, b share VF 0 on spark1") as exc:
        render(deps, two_vfs)
    assert {p.key for p in exc.value.problems} == {"serving_deployments.vf"}


# --- (c) dropping a deployment changes only its objects -----------------------------------------


def test_dropping_a_deployment_leaves_the_others_byte_identical(ctx: ServingContext) -> None:
    full = render(MIXED, ctx)
    less = render(MIXED[:1] + MIXED[2:], ctx)
    for name in ("gemma", "super-trtllm"):
        assert yaml.safe_dump_all(objects(full, name)) == yaml.safe_dump_all(objects(less, name))
    assert "super-vllm" not in less["names"]
    assert less["prune_selectors"][-1] == "sparkrack.io/deployment notin (gemma,super-trtllm)"


# --- refusals ------------------------------------------------------------------------------


TOPOLOGY = "serving_deployments[0].topology.tp"
REFUSALS = [
    ({"sparks": ["spark1", "spark9"]}, "serving_deployments[0].sparks", "spark9 is not a Spark"),
    ({"sparks": ["spark1", "spark2", "spark3"]}, TOPOLOGY, "tp·pp = 2·1 = 2 ranks"),
    ({"vf": 3}, "serving_deployments[0].vf", "VF 3 is not in fabric.vfs_in_use"),
    ({"colour": "red"}, "serving_deployments.0.colour", "unknown key"),
    ({"name": "Gemma_4"}, "serving_deployments.0.name", "does not have the accepted form"),
    ({"name": "x" * 40}, "serving_deployments.0.name", "is 40 characters long (at most 39)"),
    ({"topology": {"tp": 3}}, TOPOLOGY, "does not divide"),
    ({"profile": "no-such-profile"}, "serving_deployments[0].profile", "no such profile"),
]


@pytest.mark.parametrize(("change", "key", "message"), REFUSALS)
def test_bad_deployment_is_refused_naming_file_key_and_fix(
    change: dict[str, Any], key: str, message: str, ctx: ServingContext
) -> None:
    deps = copy.deepcopy(MIXED)
    deps[0].update(change)
    with pytest.raises(SparkrackError) as exc:
        render(deps, ctx)
    hits = [p for p in exc.value.problems if p.key.startswith(key) and message in p.message]
    assert hits, [str(p) for p in exc.value.problems]
    assert all(p.fix for p in exc.value.problems)
    # The value was written in the inventory: the refusal names it, not the profile.
    assert {p.file for p in hits} == {"inv.yml"}


def test_duplicate_names_and_aliases_are_refused(ctx: ServingContext) -> None:
    deps = copy.deepcopy(MIXED)
    deps[2]["name"] = "super-vllm"
    deps[2]["alias"] = deps[1].get("alias", "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    with pytest.raises(SparkrackError) as exc:
        render(deps, ctx)
    assert {p.key for p in exc.value.problems} == {
        "serving_deployments.name",
        "serving_deployments.alias",
    }


def test_single_spark_engine_on_two_sparks_is_refused(ctx: ServingContext) -> None:
    deps = copy.deepcopy(MIXED)
    deps[1]["sparks"] = ["spark3", "spark4"]
    deps[2]["sparks"] = ["spark1"]
    with pytest.raises(SparkrackError, match="vllm runs on one Spark"):
        render(deps, ctx)


def test_the_one_line_form_is_one_deployment_on_every_spark(ctx: ServingContext) -> None:
    serving = from_vars({"serving_profile": "glm-4.7-nvfp4"}, ctx, "inv.yml")
    [dep] = serving.deployments
    assert dep.name == "glm-4-7-nvfp4" and dep.sparks == ("spark1", "spark2", "spark3", "spark4")
    one = from_vars(
        {"serving_profile": "nemotron-3-super-120b-a12b-nvfp4-vllm", "serving_spark": "spark2"},
        ctx,
        "inv.yml",
    )
    assert one.deployments[0].sparks == ("spark2",)


# --- docs/guide/several-models.md's examples and the CLI ------------------------------------------------------


def readme_examples() -> list[list[dict[str, Any]]]:
    section = PAGE.read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    return [yaml.safe_load(b)["serving_deployments"] for b in blocks if "serving_deployments" in b]


def test_readme_examples_validate_on_the_example_inventory(ctx: ServingContext) -> None:
    examples = readme_examples()
    assert [len(e) for e in examples] == [3, 2]  # 2+1+1 and 2+2
    for deps in examples:
        out = render(deps, ctx)
        assert validate_manifests(out["manifests"], source="readme") == []
        assert sorted(s for d in deps for s in d["sparks"]) == [
            "spark1",
            "spark2",
            "spark3",
            "spark4",
        ]


def inventory_with(tmp_path: Path, deployments: list[dict[str, Any]]) -> str:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text((ROOT / "inventories/example/hosts.yml").read_text())
    base = yaml.safe_load((ROOT / "inventories/example/group_vars/all.yml").read_text())
    del base["serving_profile"], base["serving_spark"]  # serving_deployments replaces them
    base["serving_deployments"] = deployments
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(base))
    return str(inv)


def test_cli_renders_the_inventory_one_deployment_and_the_gateway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = inventory_with(tmp_path, MIXED)
    assert main(["render", "-i", inv, "--what", "manifests"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert sum(d["kind"] == "StatefulSet" for d in docs) == 4
    assert main(["render", "-i", inv, "--deployment", "gemma", "--what", "manifests"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {d["metadata"].get("labels", {}).get("sparkrack.io/deployment") for d in docs} == {
        None,  # the namespaces and what the deployments share
        "gemma",
    }
    shared = [
        f"{d['kind']}/{d['metadata']['name']}"
        for d in docs
        if "sparkrack.io/deployment" not in d["metadata"].get("labels", {})
    ]
    assert {"PersistentVolume", "PersistentVolumeClaim"} <= {s.split("/")[0] for s in shared}
    assert sum(s.startswith("NetworkPolicy/") for s in shared) == 2  # each namespace's deny
    assert main(["render", "-i", inv, "--what", "gateway"]) == 0
    assert len(yaml.safe_load(capsys.readouterr().out)["model_list"]) == 3
    assert (
        main(["render", "-i", inv, "--deployment", "gemma", "--rank", "1", "--what", "command"])
        == 0
    )
    assert "--node-rank 1" in capsys.readouterr().out


def test_plan_prints_the_per_spark_table_and_exits_1_on_overcommit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "-i", inventory_with(tmp_path / "ok", MIXED)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"spark4\s+super-trtllm\s+\d+\.\d", out) and "OVER" not in out
    crowded = copy.deepcopy(MIXED)
    crowded[1]["sparks"] = ["spark1"]  # vLLM Super on top of Gemma's head
    assert main(["plan", "-i", inventory_with(tmp_path / "over", crowded)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"spark1\s+= total / usable\s+\d+\.\d / 120 OVER", out)
    assert "over-committed: spark1" in out


def test_serving_object_is_typed(ctx: ServingContext) -> None:
    serving = from_vars({"serving_deployments": MIXED}, ctx, "inv.yml")
    assert isinstance(serving, DeploymentSet)
    with pytest.raises(SparkrackError, match="is not a deployment"):
        serving.deployment("nope")


def test_the_cli_renders_the_gateway_with_the_inventorys_key_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``render -i`` prints what the serve play applies: the gateway reads the master key from
    the Secret the inventory names, not from the default one."""
    import shutil

    from sparkrack.adapters.ansible import FILTERS

    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "lab", inv)
    group_vars = inv / "group_vars" / "all.yml"
    group_vars.write_text(group_vars.read_text() + "serving_gateway_key_secret: my-gateway-key\n")

    def key_secret(docs: list[dict[str, Any]]) -> str:
        [gw] = [
            d
            for d in docs
            if d["kind"] == "Deployment"
            and d["metadata"]["labels"][contract.LABEL_COMPONENT] == contract.COMPONENT_GATEWAY
        ]
        env = gw["spec"]["template"]["spec"]["containers"][0]["env"]
        return str(env[0]["valueFrom"]["secretKeyRef"]["name"])

    assert main(["render", "-i", str(inv), "--what", "manifests"]) == 0
    assert key_secret(list(yaml.safe_load_all(capsys.readouterr().out))) == "my-gateway-key"
    loaded = load_inventory(str(inv))
    filtered = FILTERS["sparkrack_serving_render"](
        {"serving_deployments": loaded.var("serving_deployments")},
        loaded.plan().to_dict(),
        loaded.hostvars,
        {
            "serving_fetch_image": loaded.var("serving_fetch_image"),
            "serving_gateway_key_secret": "my-gateway-key",
            **{name: loaded.var(name) for name in TRUST_VARS},
        },
    )
    assert key_secret(filtered["manifests"]) == "my-gateway-key"
