"""TensorRT-LLM on one Spark (seed 004): ``trtllm-serve`` flags, ``extra-llm-api-config.yml`` keys,
and the rules the seed names.

Profile blocks: ``trtllm`` (CLI flags + environment) and ``trtllm_config`` (the keys of
``extra-llm-api-config.yml``, each with its exact nested schema). The renderer writes
``trtllm_config`` into a ConfigMap and passes its path with ``--extra_llm_api_options``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sparkrack.errors import Problem
from sparkrack.profiles.engines.knobs import (
    PositionalKnob,
    cfg,
    env,
    k,
    long_context_problems,
    runtime,
)
from sparkrack.profiles.registry import Knob
from sparkrack.profiles.rules import Ctx, rule

NAME = "trtllm"
ENTRY = ("trtllm-serve",)
HEALTH_PATH = "/health"
CONFIG_FILE = "extra-llm-api-config.yml"

_BOOL = {"type": "boolean"}
_INT = {"type": "integer", "minimum": 0}
_FRACTION = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}

KV_CACHE_CONFIG = {
    "dtype": {"enum": ["auto", "fp8", "nvfp4"]},
    "enable_block_reuse": _BOOL,
    "free_gpu_memory_fraction": _FRACTION,
    "mamba_ssm_cache_dtype": {"enum": ["auto", "float32", "float16", "bfloat16"]},
    "mamba_ssm_stochastic_rounding": _BOOL,
    "mamba_ssm_philox_rounds": _INT,
    "max_tokens": _INT,
}
MOE_CONFIG = {"backend": {"enum": ["CUTLASS", "TRTLLM", "TRITON", "WIDEEP", "CUTEDSL", "DEEPGEMM"]}}
CUDA_GRAPH_CONFIG = {
    "enable_padding": _BOOL,
    "max_batch_size": _INT,
    "batch_sizes": {"type": "array"},
}
SPECULATIVE_CONFIG = {
    "decoding_type": {"enum": ["MTP", "Eagle", "Eagle3", "NGram", "DraftTarget"]},
    "num_nextn_predict_layers": _INT,
    "max_draft_len": _INT,
    "allow_advanced_sampling": _BOOL,
}

KNOBS: tuple[Knob, ...] = (
    # `trtllm-serve <model>` — the checkpoint is the profile's HF id.
    PositionalKnob(key="model", type="string", help="Hugging Face model id (checkpoint)"),
    runtime("--host", "host"),
    runtime("--port", "port"),
    k("trtllm.max_batch_size", "integer", "largest runtime batch", "--max_batch_size", minimum=1),
    k("topology.tp", "integer", "tensor-parallel size", "--tp_size", minimum=1),
    k("topology.ep", "integer", "expert-parallel size", "--ep_size", minimum=1),
    k(
        "trtllm.max_num_tokens",
        "integer",
        "tokens per scheduled batch",
        "--max_num_tokens",
        minimum=1,
    ),
    k(
        "trtllm.trust_remote_code",
        "boolean",
        "run the model repo's code",
        "--trust_remote_code",
        kind="bool",
    ),
    k(
        "trtllm.reasoning_parser",
        "string",
        "reasoning (thinking) output parser",
        "--reasoning_parser",
    ),
    k("trtllm.tool_parser", "string", "tool-call output parser", "--tool_parser"),
    runtime("--extra_llm_api_options", "config"),
    k("trtllm.max_seq_len", "integer", "maximum sequence length", "--max_seq_len", minimum=1),
    env(
        "trtllm.allow_long_max_model_len",
        "boolean",
        "allow max_seq_len beyond the model config",
        "TLLM_ALLOW_LONG_MAX_MODEL_LEN",
    ),
    # -- extra-llm-api-config.yml (seed 004 order)
    cfg("trtllm_config.kv_cache_config", "object", "KV/SSM cache", KV_CACHE_CONFIG),
    cfg("trtllm_config.moe_config", "object", "MoE backend", MOE_CONFIG),
    cfg("trtllm_config.cuda_graph_config", "object", "CUDA graphs", CUDA_GRAPH_CONFIG),
    cfg("trtllm_config.enable_attention_dp", "boolean", "attention data parallelism"),
    cfg("trtllm_config.enable_chunked_prefill", "boolean", "chunked prefill"),
    cfg("trtllm_config.stream_interval", "integer", "tokens per streamed chunk"),
    cfg("trtllm_config.print_iter_log", "boolean", "per-iteration log lines"),
    cfg("trtllm_config.speculative_config", "object", "speculative decoding", SPECULATIVE_CONFIG),
)
SECTIONS = ("trtllm", "trtllm_config")


def config_file(data: dict[str, Any]) -> dict[str, Any]:
    """The ``extra-llm-api-config.yml`` mapping, keys in the registry's (= the seed's) order."""
    block = data.get("trtllm_config") or {}
    keys = [knob.name for knob in KNOBS if knob.section == "trtllm_config"]
    return {key: block[key] for key in keys if key in block}


def _kv(c: Ctx) -> dict[str, Any]:
    return dict((c.data.get("trtllm_config") or {}).get("kv_cache_config") or {})


def _is(c: Ctx) -> bool:
    return c.data.get("engine") == NAME


@rule(
    "trtllm-long-context-env",
    "seed 004 (TLLM_ALLOW_LONG_MAX_MODEL_LEN=1 for --max_seq_len 1048576)",
    "max_seq_len beyond the model config needs trtllm.allow_long_max_model_len",
)
def _long_len(c: Ctx) -> Iterator[Problem]:
    yield from long_context_problems(
        c, NAME, "max_seq_len", "TLLM_ALLOW_LONG_MAX_MODEL_LEN", "trtllm-long-context-env"
    )


@rule(
    "trtllm-ssm-fp16-stochastic-rounding",
    "seed 004 (FP16 SSM cache only with stochastic rounding, 5 Philox rounds)",
    "a float16 Mamba SSM cache needs mamba_ssm_stochastic_rounding",
)
def _ssm(c: Ctx) -> Iterator[Problem]:
    kv = _kv(c)
    if (
        _is(c)
        and kv.get("mamba_ssm_cache_dtype") == "float16"
        and kv.get("mamba_ssm_stochastic_rounding") is not True
    ):
        yield c.p(
            "trtllm_config.kv_cache_config.mamba_ssm_stochastic_rounding",
            "a float16 SSM cache without stochastic rounding loses precision",
            "set mamba_ssm_stochastic_rounding: true (seed: mamba_ssm_philox_rounds: 5) "
            "or mamba_ssm_cache_dtype: float32",
            "trtllm-ssm-fp16-stochastic-rounding",
        )


@rule(
    "trtllm-mtp-layers",
    "seed 004 (speculative_config: decoding_type MTP, num_nextn_predict_layers 3)",
    "MTP needs num_nextn_predict_layers >= 1",
)
def _mtp(c: Ctx) -> Iterator[Problem]:
    spec = (c.data.get("trtllm_config") or {}).get("speculative_config") or {}
    if (
        _is(c)
        and spec.get("decoding_type") == "MTP"
        and int(spec.get("num_nextn_predict_layers", 0)) < 1
    ):
        yield c.p(
            "trtllm_config.speculative_config.num_nextn_predict_layers",
            "MTP without draft layers does nothing",
            "set num_nextn_predict_layers (seed 004: 3)",
            "trtllm-mtp-layers",
        )
