"""vLLM on one Spark (seed 004): the registry table and the rules the seed names.

The table is in the order of seed 004's ``docker run`` command, so the rendered argv reads like
the seed. Flags are spelled as the seed spells them (vLLM's argument parser accepts both
``--mamba_ssm_cache_dtype`` and ``--mamba-ssm-cache-dtype``). The container's command is
``vllm serve`` (the vllm/vllm-openai image's entrypoint), the argv below follows it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from sparkrack.errors import Problem
from sparkrack.profiles.engines.knobs import env, k, long_context_problems, runtime
from sparkrack.profiles.registry import Knob
from sparkrack.profiles.rules import Ctx, rule

NAME = "vllm"
ENTRY = ("vllm", "serve")
HEALTH_PATH = "/health"
# Seed 004: "MTP + NVFP4 on DGX Spark requires a vLLM nightly build (cu130). The pinned
# release 0.17.1 does not support this combination on a single-GPU Spark configuration."
NIGHTLY_TAG = re.compile(r":cu130-nightly(?:-[0-9a-f]{7,40})?$")
KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16")
SSM_DTYPES = ("float32", "float16", "bfloat16", "auto")

KNOBS: tuple[Knob, ...] = (
    k("model", "string", "Hugging Face model id", "--model"),
    k(
        "vllm.served_model_name",
        "string",
        "model name reported by the OpenAI API",
        "--served-model-name",
    ),
    runtime("--host", "host"),
    runtime("--port", "port"),
    k(
        "vllm.async_scheduling",
        "boolean",
        "asynchronous scheduling",
        "--async-scheduling",
        kind="bool",
    ),
    k("vllm.dtype", "string", "activation/weight dtype", "--dtype"),
    k("vllm.kv_cache_dtype", "string", "KV cache data type", "--kv-cache-dtype", choices=KV_DTYPES),
    k("topology.tp", "integer", "tensor-parallel size", "--tensor-parallel-size", minimum=1),
    k("topology.pp", "integer", "pipeline-parallel size", "--pipeline-parallel-size", minimum=1),
    k(
        "vllm.data_parallel_size",
        "integer",
        "data-parallel size",
        "--data-parallel-size",
        minimum=1,
    ),
    k(
        "vllm.trust_remote_code",
        "boolean",
        "run the model repo's code",
        "--trust-remote-code",
        kind="bool",
    ),
    k(
        "vllm.gpu_memory_utilization",
        "number",
        "fraction of GPU memory for weights + activations + KV",
        "--gpu-memory-utilization",
        minimum=0.05,
        maximum=0.99,
    ),
    k(
        "vllm.enable_chunked_prefill",
        "boolean",
        "chunked prefill",
        "--enable-chunked-prefill",
        kind="bool",
    ),
    k("vllm.max_num_seqs", "integer", "concurrent sequences", "--max-num-seqs", minimum=1),
    k("vllm.max_model_len", "integer", "maximum context length", "--max-model-len", minimum=1),
    k("vllm.moe_backend", "string", "MoE kernel backend", "--moe-backend"),
    k(
        "vllm.mamba_ssm_cache_dtype",
        "string",
        "Mamba SSM state cache dtype",
        "--mamba_ssm_cache_dtype",
        choices=SSM_DTYPES,
    ),
    k("vllm.quantization", "string", "weight quantization method", "--quantization"),
    k(
        "vllm.speculative_config",
        "object",
        "speculative decoding config (e.g. method mtp, num_speculative_tokens)",
        "--speculative_config",
        kind="json",
    ),
    k(
        "vllm.reasoning_parser_plugin",
        "string",
        "reasoning-parser plugin file; fetched from the model repo into the pod at this path",
        "--reasoning-parser-plugin",
    ),
    k(
        "vllm.reasoning_parser",
        "string",
        "reasoning (thinking) output parser",
        "--reasoning-parser",
    ),
    k(
        "vllm.enable_auto_tool_choice",
        "boolean",
        "automatic tool choice",
        "--enable-auto-tool-choice",
        kind="bool",
    ),
    k("vllm.tool_call_parser", "string", "tool-call output parser", "--tool-call-parser"),
    # -- environment (seed 004 "Env Vars", in its order)
    env(
        "vllm.nvfp4_gemm_backend",
        "string",
        "NVFP4 GEMM backend (marlin on Spark)",
        "VLLM_NVFP4_GEMM_BACKEND",
    ),
    env(
        "vllm.allow_long_max_model_len",
        "boolean",
        "allow max_model_len beyond the model config",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    ),
    env(
        "vllm.flashinfer_allreduce_backend",
        "string",
        "flashinfer allreduce backend (trtllm fixes single-GPU allreduce)",
        "VLLM_FLASHINFER_ALLREDUCE_BACKEND",
    ),
    env(
        "vllm.use_flashinfer_moe_fp4",
        "boolean",
        "FlashInfer FP4 MoE kernels (Blackwell multi-GPU only)",
        "VLLM_USE_FLASHINFER_MOE_FP4",
    ),
)
SECTIONS = ("vllm",)


def _v(c: Ctx, key: str) -> object:
    return (c.data.get("vllm") or {}).get(key)


def _is(c: Ctx) -> bool:
    return c.data.get("engine") == NAME


def _nvfp4(c: Ctx) -> bool:
    return _v(c, "quantization") == "fp4" or "nvfp4" in str(c.info("quantization", ""))


@rule(
    "vllm-mtp-nvfp4-nightly",
    "seed 004 (vLLM: MTP + NVFP4 needs the cu130 nightly; release 0.17.1 does not support it)",
    "vLLM MTP on an NVFP4 checkpoint needs vllm/vllm-openai:cu130-nightly",
)
def _mtp_nightly(c: Ctx) -> Iterator[Problem]:
    spec = _v(c, "speculative_config")
    method = spec.get("method") if isinstance(spec, dict) else None
    image = str(c.data.get("image", ""))
    if _is(c) and method == "mtp" and _nvfp4(c) and not NIGHTLY_TAG.search(image):
        yield c.p(
            "image",
            f"MTP + NVFP4 on one Spark does not run on {image} (vLLM 0.17.1 lacks it)",
            "use image vllm/vllm-openai:cu130-nightly, or drop vllm.speculative_config",
            "vllm-mtp-nvfp4-nightly",
        )


@rule(
    "vllm-long-context-env",
    "seed 004 (--max-model-len 1M requires VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)",
    "max_model_len beyond the model config needs vllm.allow_long_max_model_len",
)
def _long_len(c: Ctx) -> Iterator[Problem]:
    yield from long_context_problems(
        c, NAME, "max_model_len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "vllm-long-context-env"
    )


@rule(
    "vllm-flashinfer-moe-fp4",
    "seed 004 (FlashInfer FP4 MoE kernels are Blackwell multi-GPU only; Marlin handles FP4 on Spark)",
    "vLLM FlashInfer FP4 MoE must stay off on a Spark",
)
def _fi_moe(c: Ctx) -> Iterator[Problem]:
    if _is(c) and _v(c, "use_flashinfer_moe_fp4") is True:
        yield c.p(
            "vllm.use_flashinfer_moe_fp4",
            "FlashInfer FP4 MoE kernels are Blackwell multi-GPU only",
            "set vllm.use_flashinfer_moe_fp4: false and vllm.moe_backend: marlin",
            "vllm-flashinfer-moe-fp4",
        )


@rule(
    "vllm-mamba-ssm-float32",
    "seed 004 (Mamba-2 SSM cache: float32 for all checkpoint precisions; only TRT-LLM has "
    "stochastic rounding)",
    "vLLM keeps the Mamba SSM cache in float32 on NemotronH",
)
def _ssm(c: Ctx) -> Iterator[Problem]:
    dtype = _v(c, "mamba_ssm_cache_dtype")
    if _is(c) and c.arch == "NemotronHForCausalLM" and dtype not in (None, "float32"):
        yield c.p(
            "vllm.mamba_ssm_cache_dtype",
            f"{dtype} SSM state without stochastic rounding loses accuracy on Mamba-2",
            "use float32 (or TensorRT-LLM with mamba_ssm_stochastic_rounding)",
            "vllm-mamba-ssm-float32",
        )
