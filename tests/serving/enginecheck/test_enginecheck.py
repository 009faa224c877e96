"""The engine check runs the real upstream parser and start-up checks of SGLang and vLLM wheels.

The first run downloads the wheels and their pinned dependencies from PyPI into the repository's
``.cache`` (a failed download fails the test with pip's error); later runs are offline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sparkrack.errors import SparkrackError
from sparkrack.serving.enginecheck import upstream as enginecheck
from sparkrack.serving.enginecheck.upstream import Answer, Invocation, ask
from sparkrack.serving.engines.trtllm import table_check

pytestmark = pytest.mark.tools  # engine environments from PyPI

REPO = Path(__file__).resolve().parents[3]

NEMOTRON_SUPER: dict[str, Any] = {
    "architecture": "NemotronHForCausalLM",
    "attention_heads": 32,
    "kv_heads": 2,
    "head_dim": 128,
    "hidden_size": 4096,
    "max_position_embeddings": 262144,
    "layers": {"total": 88, "attention": 8, "mamba": 40, "moe": 40},
    "quantization": "nvfp4-mixed",
    "experts": {"routed": 512, "shared": 1, "per_token": 22, "latent_size": 1024},
    "mamba": {"state_size": 128, "num_heads": 128, "head_dim": 64, "conv_kernel": 4},
}
GLM: dict[str, Any] = {
    "architecture": "Glm4MoeForCausalLM",
    "attention_heads": 96,
    "kv_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 202752,
    "layers": {"total": 92, "attention": 92, "dense": 3, "moe": 89},
    "quantization": "nvfp4",
    "experts": {"routed": 160, "shared": 1, "per_token": 8},
}
GLM_ARGV = [
    "--model-path",
    "nvidia/GLM-4.7-NVFP4",
    "--trust-remote-code",
    "--quantization",
    "modelopt_fp4",
    "--tp-size",
    "4",
    "--context-length",
    "202752",
    "--mem-fraction-static",
    "0.6",
    "--kv-cache-dtype",
    "fp8_e4m3",
    "--attention-backend",
    "flashinfer",
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-num-draft-tokens",
    "4",
    "--nnodes",
    "4",
    "--node-rank",
    "1",
    "--dist-init-addr",
    "10.77.0.17:20000",
    "--host",
    "0.0.0.0",
    "--port",
    "30000",
]
SUPER_ARGV = [
    "--model-path",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
    "--trust-remote-code",
    "--tp-size",
    "1",
    "--quantization",
    "modelopt_fp4",
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]
VLLM_ARGV = [
    "--model",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
    "--tensor-parallel-size",
    "1",
    "--trust-remote-code",
    "--max-model-len",
    "1000000",
    "--kv-cache-dtype",
    "fp8",
    "--max-num-seqs",
    "4",
    "--mamba_ssm_cache_dtype",
    "float32",
]
# src:super-guide's environment: the two NVFP4 knobs exist in vLLM 0.19 and are gone from 0.33.
VLLM_ENV = {
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1",
    "VLLM_NVFP4_GEMM_BACKEND": "marlin",
    "VLLM_USE_FLASHINFER_MOE_FP4": "0",
}


@pytest.fixture(scope="session", autouse=True)
def engine_cache() -> None:
    """Every environment lives in the repository's .cache; built once per machine."""
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(REPO / ".cache"))


@pytest.fixture(scope="session")
def sglang_0_5_13(engine_cache: None) -> str:
    enginecheck.ensure_env("sglang", "0.5.13")
    return "0.5.13"


def glm(*extra: str, label: str = "glm") -> Invocation:
    return Invocation(label, (*GLM_ARGV, *extra), {}, "nvidia/GLM-4.7-NVFP4", GLM)


def nemotron(*extra: str, label: str = "super") -> Invocation:
    model = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
    return Invocation(label, (*SUPER_ARGV, *extra), {}, model, NEMOTRON_SUPER)


SGLANG_WORDS = ["--node-r", "2", "--tp-size=4", "--ep", "2", "--no-such-flag", "--model-path", "m"]


@pytest.fixture(scope="module")
def sglang_answer(sglang_0_5_13: str) -> Answer:
    """One SGLang 0.5.13 process answers the verdict and option tests."""
    batch = [
        glm("--speculative-eagle-topk", "1", label="topk"),
        glm(label="no-topk"),
        glm("--no-such-flag", label="unknown-flag"),
        glm("--attention-backend", "no-such-backend", label="bad-choice"),
        nemotron(label="no_buffer"),
        nemotron("--mamba-scheduler-strategy", "extra_buffer", label="extra_buffer"),
        Invocation(
            "env",
            (*GLM_ARGV, "--speculative-eagle-topk", "1"),
            {"SGLANG_NO_SUCH_KNOB": "1", "SGLANG_ENABLE_JIT_DEEPGEMM": "0", "NCCL_DEBUG": "INFO"},
            "nvidia/GLM-4.7-NVFP4",
            GLM,
        ),
    ]
    return ask("sglang", sglang_0_5_13, batch, SGLANG_WORDS, offline=True)


def test_sglang_verdicts_are_the_upstream_checks(sglang_answer: Answer) -> None:
    got = {v.label: v for v in sglang_answer.verdicts}
    assert got["topk"].ok, got["topk"].error
    assert not got["no-topk"].ok
    assert got["no-topk"].error.startswith("TypeError: '>' not supported between")
    assert not got["unknown-flag"].ok
    assert "unrecognized arguments: --no-such-flag" in got["unknown-flag"].error
    assert not got["bad-choice"].ok
    assert "invalid choice: 'no-such-backend'" in got["bad-choice"].error
    assert not got["no_buffer"].ok
    assert got["no_buffer"].error.startswith("ValueError: Speculative decoding for NemotronH")
    assert "--mamba-scheduler-strategy no_buffer" in got["no_buffer"].error
    assert got["extra_buffer"].ok, got["extra_buffer"].error
    assert got["env"].ok, got["env"].error
    assert got["env"].unknown_env == ("SGLANG_NO_SUCH_KNOB",)


def test_sglang_option_dests_follow_the_real_parser(sglang_answer: Answer) -> None:
    assert sglang_answer.dests == [
        ("--node-r", "node_rank"),
        ("--tp-size=4", "tensor_parallel_size"),
        ("--ep", "expert_parallel_size"),
        ("--no-such-flag", None),
        ("--model-path", "model_path"),
    ]


def test_offline_without_cache_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKRACK_CACHE_DIR", str(tmp_path))
    with pytest.raises(SparkrackError, match="sparkrack validate --engine-check"):
        enginecheck.ensure_env("sglang", "0.5.13", offline=True)


def test_unknown_engine_version_is_refused() -> None:
    with pytest.raises(SparkrackError, match="no engine-check environment for sglang 0.4.0"):
        enginecheck.ensure_env("sglang", "0.4.0", offline=True)


@pytest.fixture(scope="session")
def vllm_version(engine_cache: None) -> str:
    enginecheck.ensure_env("vllm", "0.19.0")
    return "0.19.0"


def vllm_inv(argv: tuple[str, ...], env: dict[str, str], label: str) -> Invocation:
    model = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
    return Invocation(label, argv, env, model, NEMOTRON_SUPER)


VLLM_WORDS = ["--tensor_parallel_size", "2", "--max-num-seq", "4", "--no-such-flag"]
SEED_004 = vllm_inv(tuple(VLLM_ARGV), VLLM_ENV, "seed-004 env")


@pytest.fixture(scope="module")
def vllm_answer(vllm_version: str) -> Answer:
    """One vLLM 0.19 process answers the verdict, option and env tests."""
    argv = tuple(VLLM_ARGV)
    batch = [
        vllm_inv(argv, VLLM_ENV, "ok"),
        vllm_inv(argv, {}, "no-long-len"),
        vllm_inv((*argv, "--no-such-flag"), VLLM_ENV, "unknown-flag"),
        vllm_inv((*argv, "--dtype", "float3"), VLLM_ENV, "bad-choice"),
        vllm_inv(argv, {**VLLM_ENV, "VLLM_NO_SUCH_KNOB": "1"}, "env"),
        SEED_004,
    ]
    return ask("vllm", vllm_version, batch, VLLM_WORDS, offline=True)


def test_vllm_verdicts_are_the_upstream_checks(vllm_answer: Answer) -> None:
    got = {v.label: v for v in vllm_answer.verdicts}
    assert got["ok"].ok, got["ok"].error
    assert got["ok"].unknown_env == ()
    assert not got["no-long-len"].ok
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in got["no-long-len"].error
    assert not got["unknown-flag"].ok
    assert "--no-such-flag" in got["unknown-flag"].error
    assert not got["bad-choice"].ok
    assert "float3" in got["bad-choice"].error
    assert got["env"].unknown_env == ("VLLM_NO_SUCH_KNOB",)


def test_vllm_option_dests_accept_underscores(vllm_answer: Answer) -> None:
    assert vllm_answer.dests == [
        ("--tensor_parallel_size", "tensor_parallel_size"),
        ("--max-num-seq", "max_num_seqs"),
        ("--no-such-flag", None),
    ]


def test_trtllm_table_accepts_the_shipped_options_and_refuses_others() -> None:
    argv = [
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        "--host",
        "0.0.0.0",
        "--tp_size",
        "1",
        "--extra_llm_api_options",
        "/etc/x.yml",
    ]
    config = {"kv_cache_config": {"dtype": "fp8"}}
    assert table_check(argv, config) == []
    bad = table_check([*argv, "--no_such_option", "1"], {"kv_cache_config": {"no_such": 1}})
    assert len(bad) == 2
    assert "no such option --no_such_option" in bad[0]
    assert "unknown key 'no_such'" in bad[1]


def test_model_config_stand_in_carries_model_info() -> None:
    config = enginecheck.hf_config(NEMOTRON_SUPER)
    assert config["model_type"] == "nemotron_h"
    pattern = config["hybrid_override_pattern"]
    assert (pattern.count("M"), pattern.count("E"), pattern.count("*")) == (40, 40, 8)
    assert config["quantization_config"]["quant_algo"] == "NVFP4"
    with pytest.raises(SparkrackError, match="no model config stand-in"):
        enginecheck.hf_config({"architecture": "NoSuchForCausalLM"})


def test_vllm_reports_env_names_a_later_release_dropped(vllm_answer: Answer) -> None:
    enginecheck.ensure_env("vllm", "0.33.0")
    # One vLLM 0.33 process answers both its env list and its verdict on seed-004's env.
    later = ask("vllm", "0.33.0", [SEED_004], offline=True)
    known = later.known_env
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in known
    assert "VLLM_NVFP4_GEMM_BACKEND" not in known
    got = {v.label: v for v in vllm_answer.verdicts}
    assert got[SEED_004.label].unknown_env == ()
    dropped = ("VLLM_NVFP4_GEMM_BACKEND", "VLLM_USE_FLASHINFER_MOE_FP4")
    assert later.verdicts[0].unknown_env == dropped
