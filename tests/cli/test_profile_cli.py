"""`sparkrack validate` / `sparkrack render`: the contract other tools rely on."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from hostile_corpus import by_id, write

from sparkrack.cli import main
from sparkrack.k8s.validate import validate_manifests

LINE = re.compile(r"^\S+: \S+: .+ \[[a-z0-9-]+\]$")


def test_validate_all_profiles_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkrack.serving import list_profiles

    assert main(["validate"]) == 0
    count = len(list_profiles())
    assert count >= 5
    assert f"{count} profile(s) valid for 4 Sparks" in capsys.readouterr().out


def test_validate_bad_profiles_exit_1_one_line_per_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = [str(write(by_id(i), tmp_path)) for i in ("ultra-mfs-085", "gemma-flashinfer")]
    files = [*bad, "glm-4.7-nvfp4"]
    assert main(["validate", *files]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert all(LINE.match(line) for line in lines), lines
    assert lines[0].startswith(f"{files[0]}: sglang.mem_fraction_static: ")
    assert lines[0].endswith("[mem-fraction-ep-floor]")
    assert lines[1].endswith("[gemma4-flashinfer-attention]")


def test_validate_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "no-such-model"]) == 1
    assert "[profile-not-found]" in capsys.readouterr().out


def test_validate_nodes_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--nodes", "2", "gemma-4-31b-it"]) == 1
    assert "[topology-nodes]" in capsys.readouterr().out


def test_render_command_is_shell_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "render",
                "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
                "--rank",
                "2",
                "--what",
                "command",
            ]
        )
        == 0
    )
    words = shlex.split(capsys.readouterr().out)
    assert (
        words[words.index("--json-model-override-args") + 1] == '{"max_position_embeddings":524288}'
    )
    assert words[words.index("--node-rank") + 1] == "2"


def test_render_env_key_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["render", "qwen3.5-397b-a17b-nvfp4", "--what", "env", "--gid-index", "spark1=3"]) == 0
    )
    env = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    assert env["SGLANG_ENABLE_SPEC_V2"] == "1"
    # an override for the rank's resolver, never a baked NCCL_IB_GID_INDEX
    assert env["SPARKRACK_GID_INDEX_OVERRIDE"] == "3" and "NCCL_IB_GID_INDEX" not in env
    assert "HF_TOKEN" not in env


def test_render_manifests_multi_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "render",
                "model_profiles/gemma-4-31b-it.yml",
                "-i",
                "inventories/lab",
                "--what",
                "manifests",
            ]
        )
        == 0
    )
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    # The serving and the agents' namespaces, each one's default deny, the watchdogs' evidence
    # volume and claim; the switch ConfigMap, the fetch Job and 3 receiver Jobs (4 Sparks); the
    # launcher ConfigMap, 2 Services, 4 StatefulSets and the deployment's NetworkPolicy; its
    # watchdog (account, Role, binding, state ConfigMap, policy, Deployment): in the order the
    # serve play applies them.
    assert [d["kind"] for d in docs] == [
        "Namespace",
        "Namespace",
        *["NetworkPolicy"] * 2,
        "PersistentVolume",
        "PersistentVolumeClaim",
        "ConfigMap",
        *["Job"] * 4,
        "ConfigMap",
        *["Service"] * 2,
        *["StatefulSet"] * 4,
        "NetworkPolicy",
        *["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "NetworkPolicy", "Deployment"],
    ]
    assert validate_manifests(docs) == []


def test_render_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "glm-4.7-nvfp4", "-i", "inventories/lab", "--what", "plan"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [r["node"] for r in plan["ranks"]] == ["spark1", "spark2", "spark3", "spark4"]
    assert plan["command_rank0"].startswith("python3 -m sglang.launch_server ")


def test_render_plan_of_a_single_spark_engine(capsys: pytest.CaptureFixture[str]) -> None:
    profile = "nemotron-3-super-120b-a12b-nvfp4-vllm"
    assert main(["render", profile, "-i", "inventories/lab", "--what", "plan"]) == 0
    plan = json.loads(capsys.readouterr().out)
    # One process on the rank-0 Spark (serving_spark: null): no NCCL group, no fabric address.
    assert plan["ranks"] == [{"rank": 0, "node": "spark1", "spark_index": 1}]
    assert "10.77." not in plan["dist_init_addr"] + plan["transport"]
    assert plan["command_rank0"].startswith("vllm serve ")


def test_render_refuses_invalid_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = write(by_id("qwen-eager"), tmp_path)
    assert main(["render", str(bad), "--what", "command"]) == 1
    assert "[cutlass-fp4-eager]" in capsys.readouterr().err


def test_render_refuses_bad_rank(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "glm-4.7-nvfp4", "--rank", "9", "--what", "env"]) == 2
    assert "no such rank" in capsys.readouterr().err
