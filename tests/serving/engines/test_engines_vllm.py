"""engine: vllm — the seed-004 profile renders src:super-guide's command, env and image; its rules refuse
the failing variants the seed names; its manifests are the SGLang path's objects on one Spark.

The expected command below is typed from src:super-guide ("Serve Command", after the image name).
"""

from __future__ import annotations

import copy
import json
import shlex
from typing import Any

import pytest

from sparkrack.contract import HF_CACHE_MOUNT
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k8s.validate import validate_manifests
from sparkrack.serving import (
    ServingContext,
    context_from_vars,
    load_profile,
    render_argv,
    render_env,
    render_manifests,
    serving_selector,
    validate_profile,
)
from sparkrack.serving.engines.listeners import LOOPBACK_ADDRESS
from sparkrack.serving.profile.capacity import plan_profile

NAME = "nemotron-3-super-120b-a12b-nvfp4-vllm"

SEED_IMAGE = "vllm/vllm-openai:cu130-nightly"
SEED_ARGS = """
--model nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4
--served-model-name nemotron-3-super
--host 0.0.0.0
--port 8000
--async-scheduling
--dtype auto
--kv-cache-dtype fp8
--tensor-parallel-size 1
--pipeline-parallel-size 1
--data-parallel-size 1
--trust-remote-code
--gpu-memory-utilization 0.90
--enable-chunked-prefill
--max-num-seqs 4
--max-model-len 1000000
--moe-backend marlin
--mamba_ssm_cache_dtype float32
--quantization fp4
--speculative_config '{"method":"mtp","num_speculative_tokens":3,"moe_backend":"triton"}'
--reasoning-parser-plugin /app/super_v3_reasoning_parser.py
--reasoning-parser super_v3
--enable-auto-tool-choice
--tool-call-parser qwen3_coder
"""
SEED_ENV = {
    "VLLM_NVFP4_GEMM_BACKEND": "marlin",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1",
    "VLLM_FLASHINFER_ALLREDUCE_BACKEND": "trtllm",
    "VLLM_USE_FLASHINFER_MOE_FP4": "0",
}


def same_word(rendered: str, seed: str) -> bool:
    """Equal, or the same number ("0.9" / "0.90"), or the same JSON object (key order free)."""
    if rendered == seed:
        return True
    try:
        return float(rendered) == float(seed)
    except ValueError:
        pass
    try:
        return bool(json.loads(rendered) == json.loads(seed))
    except ValueError:
        return False


@pytest.fixture(scope="module")
def ctx() -> ServingContext:
    plan = load_inventory("inventories/example").plan()
    return context_from_vars(plan, {"serving_api_port": 8000})


def test_command_is_the_seed_command(ctx: ServingContext) -> None:
    argv = render_argv(load_profile(NAME), ctx, 0)
    assert argv[:2] == ["vllm", "serve"]  # the vllm/vllm-openai entrypoint
    seed = shlex.split(SEED_ARGS)
    rendered = argv[2:]
    assert len(rendered) == len(seed), (rendered, seed)
    # The one deliberate difference: the server listens on the pod's address only.
    host_at = seed.index("--host") + 1
    assert seed[host_at] == "0.0.0.0" and rendered[host_at] == LOOPBACK_ADDRESS
    rendered[host_at] = seed[host_at]
    for got, want in zip(rendered, seed, strict=True):
        assert same_word(got, want), f"{got!r} != seed {want!r}"


def test_env_is_the_seed_env_and_the_server_gets_no_token(ctx: ServingContext) -> None:
    profile = load_profile(NAME)
    env = render_env(profile, ctx, 0)
    assert {k: env[k] for k in SEED_ENV} == SEED_ENV
    assert list(env)[:4] == list(SEED_ENV)  # seed order
    assert "HF_TOKEN" not in env
    docs = render_manifests(profile, ctx)
    container = _sts(docs)["spec"]["template"]["spec"]["containers"][0]
    # Offline (the fetch step put the weights in the node's cache): no HF token at all.
    names = {e["name"]: e for e in container["env"]}
    assert "HF_TOKEN" not in names and names["HF_HUB_OFFLINE"]["value"] == "1"


def test_image_is_the_seed_nightly() -> None:
    assert load_profile(NAME).image == SEED_IMAGE


def _sts(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    return sts


def test_manifests_are_valid_and_single_spark(ctx: ServingContext) -> None:
    profile = load_profile(NAME)
    docs = render_manifests(profile, ctx)
    assert validate_manifests(docs, source=NAME) == []
    assert sorted(d["kind"] for d in docs) == [
        "ConfigMap",
        "Namespace",
        "NetworkPolicy",
        "Service",
        "Service",
        "StatefulSet",
    ]
    pod = _sts(docs)["spec"]["template"]
    head = ctx.plan.nodes[0]
    # Pinned like every rank: the K3s node name and the spark-index label from the same plan.
    assert pod["spec"]["nodeSelector"] == {
        "kubernetes.io/hostname": head.name,
        "sparkrack.io/spark-index": str(head.spark_index),
    }
    container = pod["spec"]["containers"][0]
    assert container["image"] == SEED_IMAGE
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    # One Spark: no fabric VF, no NCCL, no privileged mode (src:super-guide: --gpus all only).
    assert "k8s.v1.cni.cncf.io/networks" not in pod["metadata"].get("annotations", {})
    assert "securityContext" not in container
    assert not any(e["name"].startswith("NCCL_") for e in container["env"])


def test_switch_and_teardown_labels_match_the_sglang_path(ctx: ServingContext) -> None:
    profile = load_profile(NAME)
    selector = dict(kv.split("=") for kv in serving_selector(profile).split(","))
    for doc in render_manifests(profile, ctx):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "sparkrack"
        if doc["kind"] != "Namespace":
            assert selector.items() <= labels.items(), doc["kind"]


def test_probes_use_vllm_health_endpoint(ctx: ServingContext) -> None:
    container = _sts(render_manifests(load_profile(NAME), ctx))["spec"]["template"]["spec"][
        "containers"
    ][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        # the API port by number: its gate container, not vLLM's, declares the port "http"
        assert container[probe]["httpGet"] == {"path": "/health", "port": ctx.api_port}
    startup = container["startupProbe"]
    # Sized for multi-minute loads, like the SGLang head.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1200


def test_reasoning_parser_plugin_is_mounted_at_the_seed_path(ctx: ServingContext) -> None:
    spec = _sts(render_manifests(load_profile(NAME), ctx))["spec"]["template"]["spec"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m.get("subPath"))
    assert mount["mountPath"] == "/app/super_v3_reasoning_parser.py"
    # After the switch's waits (weights marker, memory), the engine's own init container copies
    # the file of the model repo out of the node's HF cache (offline, at the fetched revision).
    names = [c["name"] for c in spec["initContainers"]]
    assert names == ["wait-weights", "wait-memory", "fetch-plugins", "settle"]
    init = spec["initContainers"][-2]
    assert init["command"][-3:] == [
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        "main",
        "super_v3_reasoning_parser.py",
    ]
    cache = {"name": "hf-cache", "mountPath": HF_CACHE_MOUNT, "readOnly": True}
    assert cache in init["volumeMounts"]
    assert not [e for e in init["env"] if e["name"] == "HF_TOKEN"]
    compile(init["command"][2], "fetch-plugins", "exec")


def test_pinned_to_the_chosen_spark() -> None:
    plan = load_inventory("inventories/example").plan()
    last = plan.nodes[-1]
    chosen = context_from_vars(plan, {"serving_spark": last.name})
    sts = _sts(render_manifests(load_profile(NAME), chosen))
    assert sts["spec"]["template"]["spec"]["nodeSelector"] == {
        "kubernetes.io/hostname": last.name,
        "sparkrack.io/spark-index": str(last.spark_index),
    }
    assert sts["spec"]["template"]["metadata"]["labels"]["sparkrack.io/spark-index"] == str(
        last.spark_index
    )
    from sparkrack.errors import SparkrackError

    with pytest.raises(SparkrackError, match="serving_spark"):
        render_manifests(load_profile(NAME), context_from_vars(plan, {"serving_spark": "nope"}))


# --- validation -------------------------------------------------------------------------------


def _data() -> dict[str, Any]:
    return copy.deepcopy(load_profile(NAME).data)


def _rules(data: dict[str, Any]) -> set[str]:
    return {p.rule for p in validate_profile(data, "x.yml", nodes=4)}


def test_shipped_profile_is_valid_on_a_four_spark_inventory() -> None:
    assert validate_profile(_data(), "x.yml", nodes=4) == []


def test_mtp_nvfp4_on_the_release_image_is_refused() -> None:
    data = _data()
    data["image"] = "vllm/vllm-openai:v0.17.1"
    assert _rules(data) == {"vllm-mtp-nvfp4-nightly"}
    data["vllm"].pop("speculative_config")  # without MTP the release is fine
    assert _rules(data) == set()


def test_context_beyond_the_config_needs_the_long_len_env() -> None:
    data = _data()
    data["vllm"]["allow_long_max_model_len"] = False
    assert _rules(data) == {"vllm-long-context-env"}
    data["vllm"]["max_model_len"] = 262144  # the config's own cap
    assert _rules(data) == set()


def test_sglang_keys_and_typos_are_refused_by_the_schema() -> None:
    data = _data()
    data["vllm"]["gpu_memory_utilisation"] = 0.9
    assert _rules(data) == {"schema"}
    data = _data()
    data["sglang"] = {"mem_fraction_static": 0.8}
    assert _rules(data) == {"schema"}


def test_extra_args_may_not_repeat_the_port() -> None:
    data = _data()
    data["extra_args"] = ["--port", "9000"]
    assert _rules(data) == {"extra-args-owned"}


def test_planner_sees_one_million_tokens_of_fp8_kv() -> None:
    p = plan_profile(load_profile(NAME))
    assert p.fits
    assert (p.tp, p.engine, p.context_length) == (1, "vllm", 1_000_000)
    assert (p.kv_tokens or 0) >= 1_000_000
