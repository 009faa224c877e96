"""engine: trtllm — the seed-004 profile renders src:super-guide's ``trtllm-serve`` command, its
``extra-llm-api-config.yml`` (into a ConfigMap mounted where the flag points) and its env.

Expected values are typed from src:super-guide ("TensorRT-LLM" section).
"""

from __future__ import annotations

import copy
import posixpath
import shlex
from typing import Any

import pytest
import yaml

from sparkrack.inputs.inventory import load_inventory
from sparkrack.k8s.validate import validate_manifests
from sparkrack.serving import (
    ServingContext,
    context_from_vars,
    load_profile,
    render_argv,
    render_env,
    render_manifests,
    validate_profile,
)
from sparkrack.serving.engines.listeners import LOOPBACK_ADDRESS
from sparkrack.serving.engines.trtllm import CONFIG_FILE
from sparkrack.serving.profile.capacity import plan_profile

NAME = "nemotron-3-super-120b-a12b-nvfp4-trtllm"
SEED_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc9"
CKPT = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"  # the seed's <nvfp4_ckpt>
SEED_COMMAND = f"""
trtllm-serve {CKPT}
--host 0.0.0.0
--port 8123
--max_batch_size 8
--tp_size 1 --ep_size 1
--max_num_tokens 8192
--trust_remote_code
--reasoning_parser nano-v3
--tool_parser qwen3_coder
--extra_llm_api_options extra-llm-api-config.yml
--max_seq_len 1048576
"""
SEED_CONFIG = """
kv_cache_config:
  dtype: fp8
  enable_block_reuse: false
  free_gpu_memory_fraction: 0.9
  mamba_ssm_cache_dtype: float16
  mamba_ssm_stochastic_rounding: true
  mamba_ssm_philox_rounds: 5
moe_config:
  backend: CUTLASS
cuda_graph_config:
  enable_padding: true
  max_batch_size: 8
enable_attention_dp: false
enable_chunked_prefill: true
stream_interval: 1
print_iter_log: true
speculative_config:
  decoding_type: MTP
  num_nextn_predict_layers: 3
  allow_advanced_sampling: true
"""


@pytest.fixture(scope="module")
def ctx() -> ServingContext:
    plan = load_inventory("inventories/example").plan()
    return context_from_vars(plan, {"serving_api_port": 8123})


def _docs(ctx: ServingContext) -> list[dict[str, Any]]:
    return render_manifests(load_profile(NAME), ctx)


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def config_map(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine's config ConfigMap (the other one is the gate's launcher)."""
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and CONFIG_FILE in d["data"]]
    return cm


def test_command_is_the_seed_command(ctx: ServingContext) -> None:
    argv = render_argv(load_profile(NAME), ctx, 0)
    seed = shlex.split(SEED_COMMAND)
    config_at = seed.index("--extra_llm_api_options") + 1
    # The deliberate differences: the config file is a ConfigMap mount, so its path is absolute;
    # the server listens on loopback only, behind the gate (test_engine_gate_vllm), not on every
    # address (0.0.0.0).
    assert posixpath.basename(argv[config_at]) == seed[config_at]
    assert posixpath.isabs(argv[config_at])
    host_at = seed.index("--host") + 1
    assert seed[host_at] == "0.0.0.0" and argv[host_at] == LOOPBACK_ADDRESS
    argv[host_at] = seed[host_at]
    assert argv[:config_at] + argv[config_at + 1 :] == seed[:config_at] + seed[config_at + 1 :]


def test_config_file_is_the_seed_config_in_the_seed_order(ctx: ServingContext) -> None:
    docs = _docs(ctx)
    cm = config_map(docs)
    (body,) = cm["data"].values()
    rendered = yaml.safe_load(body)
    seed = yaml.safe_load(SEED_CONFIG)
    # The one deliberate addition, last: the switch that mounts /prometheus/metrics.
    assert rendered.pop("return_perf_metrics") is True
    assert rendered == seed
    assert list(rendered) == list(seed)
    assert list(rendered["kv_cache_config"]) == list(seed["kv_cache_config"])


def test_config_map_is_mounted_where_the_flag_points(ctx: ServingContext) -> None:
    docs = _docs(ctx)
    cm = config_map(docs)
    spec = _one(docs, "StatefulSet")["spec"]["template"]["spec"]
    container = spec["containers"][0]
    path = container["args"][container["args"].index("--extra_llm_api_options") + 1]
    (volume,) = [
        v for v in spec["volumes"] if v.get("configMap", {}).get("name") == cm["metadata"]["name"]
    ]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert posixpath.join(mount["mountPath"], posixpath.basename(path)) == path
    assert posixpath.basename(path) in cm["data"]
    assert container["command"] == ["trtllm-serve"]


def test_env_and_image(ctx: ServingContext) -> None:
    profile = load_profile(NAME)
    env = render_env(profile, ctx, 0)
    assert env["TLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"
    assert "HF_TOKEN" not in env
    assert profile.image == SEED_IMAGE


def test_manifests_validate_and_carry_no_secret(ctx: ServingContext) -> None:
    docs = _docs(ctx)
    assert validate_manifests(docs, source=NAME) == []
    text = yaml.safe_dump_all(docs)
    # The server runs offline (HF_HUB_OFFLINE=1): no Secret, the HF token included, reaches it.
    assert "secretKeyRef" not in text and "HF_HUB_OFFLINE" in text
    cm = config_map(docs)
    assert "token" not in yaml.safe_dump(cm["data"]).lower()


# --- validation -------------------------------------------------------------------------------


def _data() -> dict[str, Any]:
    return copy.deepcopy(load_profile(NAME).data)


def _rules(data: dict[str, Any]) -> set[str]:
    return {p.rule for p in validate_profile(data, "x.yml", nodes=4)}


def test_shipped_profile_is_valid() -> None:
    assert _rules(_data()) == set()


def test_long_context_needs_the_env() -> None:
    data = _data()
    data["trtllm"]["allow_long_max_model_len"] = False
    assert _rules(data) == {"trtllm-long-context-env"}


def test_fp16_ssm_cache_needs_stochastic_rounding() -> None:
    data = _data()
    data["trtllm_config"]["kv_cache_config"]["mamba_ssm_stochastic_rounding"] = False
    assert _rules(data) == {"trtllm-ssm-fp16-stochastic-rounding"}
    data["trtllm_config"]["kv_cache_config"]["mamba_ssm_cache_dtype"] = "float32"
    assert _rules(data) == set()


def test_typo_inside_the_config_file_is_refused() -> None:
    data = _data()
    data["trtllm_config"]["kv_cache_config"]["free_gpu_mem_fraction"] = 0.9
    problems = validate_profile(data, "x.yml", nodes=4)
    assert {p.rule for p in problems} == {"schema"}
    assert any("free_gpu_mem_fraction" in p.key for p in problems)


def test_expert_parallel_is_refused_on_one_spark() -> None:
    data = _data()
    data["topology"]["ep"] = 4
    assert "single-node-topology" in _rules(data)


def test_planner_uses_trtllm_free_memory_fraction() -> None:
    p = plan_profile(load_profile(NAME))
    assert p.fits
    assert p.memory_fraction == 0.9
    # free_gpu_memory_fraction is of the memory left after weights and overhead
    hw = p.hardware
    expected = 0.9 * (hw.usable_gb - p.weights_per_gpu_gb - hw.runtime_overhead_gb)
    assert p.kv_pool_gb + (p.mamba_pool_gb or 0) == pytest.approx(expected)
    assert p.mamba_bytes_per_request is not None


def test_planner_loads_the_mtp_layer_for_trtllm_mtp() -> None:
    data = _data()
    with_mtp = plan_profile(data)
    data["trtllm_config"].pop("speculative_config")
    without = plan_profile(data)
    assert with_mtp.weights_per_gpu_gb - without.weights_per_gpu_gb == pytest.approx(2.90 * 2)
