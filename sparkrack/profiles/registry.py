"""THE registry: every profile key an engine understands, and what it becomes on the engine side.

One table per engine (``ENGINES``). A profile key is a dotted path into the profile
(``sglang.attention_backend``, ``speculative.num_steps``, ``topology.tp``); its :class:`Knob`
says which CLI flag (or environment variable) it turns into and how the value is written.
The JSON Schema of the profile (``model_profiles/schema.json``), the launch command and the
environment are all derived from this table; nothing else maps profile keys to flags.

SGLang flags were checked against ``python/sglang/srt/server_args.py`` (``add_argument``
calls) of the PyPI wheels sglang 0.5.10, 0.5.11, 0.5.12 and 0.5.13, the versions the seeds'
images carry; ``since`` records the first of those versions that has the flag, and
``tests/test_profile_flags.py`` re-checks every flag against the real wheels. Two keys the
seeds write like flags are environment variables in SGLang, not ServerArgs:
``disable_deep_gemm`` (seed 002 prints ``--disable-deep-gemm``, which ``server_args.py`` does not
define and ``parse_args`` would reject) is ``SGLANG_ENABLE_JIT_DEEPGEMM=0``, and
``enable_spec_v2`` (seed 001, seed 003 Qwen3.5) is ``SGLANG_ENABLE_SPEC_V2=1``
(``sglang/srt/environ.py``).

To add an engine (vLLM, TensorRT-LLM): add its table to ``ENGINES`` under the engine's name;
the profile then carries a block of the same name, the schema and the renderers pick it up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["value", "bool", "json", "env_bool"]
Type = Literal["integer", "number", "string", "boolean", "object"]


@dataclass(frozen=True)
class Knob:
    """One profile key and its engine-side form."""

    key: str
    """Dotted path in the profile, e.g. ``sglang.mem_fraction_static``."""
    type: Type
    help: str
    flag: str | None = None
    """CLI flag; ``None`` for environment-only knobs."""
    env: str | None = None
    """Environment variable for ``env_bool`` knobs."""
    kind: Kind = "value"
    """value: ``--flag V``; bool: ``--flag`` when true; json: ``--flag '<json>'``;
    env_bool: ``ENV=1``/``ENV=0`` (only when the profile sets the key)."""
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    since: str = "0.5.10"
    """First checked SGLang version that has the flag/env (0.5.10–0.5.13 were checked)."""
    env_true: str = "1"
    env_false: str = "0"

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split(".", 1)[1]

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "description": self.describe()}
        if self.type == "object":
            out["additionalProperties"] = True
        if self.choices:
            out["enum"] = list(self.choices)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out

    def describe(self) -> str:
        target = self.flag or f"env {self.env}"
        return f"{self.help} ({target})"

    def args(self, value: Any) -> list[str]:
        """CLI words for ``value`` (empty for env knobs and false booleans)."""
        if self.flag is None or value is None:
            return []
        if self.kind == "bool":
            return [self.flag] if value else []
        if self.kind == "json":
            return [self.flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        return [self.flag, _scalar(value)]

    def env_pair(self, value: Any) -> tuple[str, str] | None:
        if self.kind != "env_bool" or self.env is None or value is None:
            return None
        return self.env, self.env_true if value else self.env_false


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# Choice lists are the intersection the seeds need; each value was found in the
# *_CHOICES lists of server_args.py 0.5.10–0.5.13.
ATTENTION_BACKENDS = ("flashinfer", "triton", "torch_native", "flex_attention", "fa3", "fa4")
MOE_RUNNERS = ("auto", "triton", "flashinfer_cutlass", "cutlass", "flashinfer_trtllm", "deep_gemm")
FP4_GEMM_BACKENDS = (
    "auto",
    "cutlass",
    "flashinfer_cutlass",
    "flashinfer_cudnn",
    "flashinfer_trtllm",
)
KV_CACHE_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16")
QUANTIZATIONS = ("modelopt_fp4", "modelopt_fp8", "modelopt_mixed", "modelopt", "fp8", "awq")
MAMBA_STRATEGIES = ("auto", "no_buffer", "extra_buffer")
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


def _k(key: str, type_: Type, help_: str, flag: str | None = None, **kw: Any) -> Knob:
    return Knob(key=key, type=type_, help=help_, flag=flag, **kw)


SGLANG: tuple[Knob, ...] = (
    # -- what is served, and how it is split (model/topology come from the profile's top level)
    _k("model", "string", "Hugging Face model id", "--model-path"),
    _k(
        "sglang.trust_remote_code",
        "boolean",
        "run the model repo's code",
        "--trust-remote-code",
        kind="bool",
    ),
    _k(
        "sglang.quantization",
        "string",
        "weight quantization method",
        "--quantization",
        choices=QUANTIZATIONS,
    ),
    _k("topology.tp", "integer", "tensor-parallel size", "--tp-size", minimum=1),
    _k("topology.pp", "integer", "pipeline-parallel size", "--pp-size", minimum=1),
    _k("topology.ep", "integer", "expert-parallel size", "--ep-size", minimum=1),
    # -- memory, context, scheduling
    _k("sglang.context_length", "integer", "maximum context length", "--context-length", minimum=1),
    _k(
        "sglang.json_model_override_args",
        "object",
        "overrides of the model's config.json",
        "--json-model-override-args",
        kind="json",
    ),
    _k(
        "sglang.mem_fraction_static",
        "number",
        "fraction of GPU memory for weights + KV pool",
        "--mem-fraction-static",
        minimum=0.05,
        maximum=0.99,
    ),
    _k(
        "sglang.max_running_requests",
        "integer",
        "concurrent request cap",
        "--max-running-requests",
        minimum=1,
    ),
    _k(
        "sglang.max_mamba_cache_size",
        "integer",
        "Mamba state pool slots (hybrid models)",
        "--max-mamba-cache-size",
        minimum=1,
    ),
    _k(
        "sglang.mamba_scheduler_strategy",
        "string",
        "Mamba/radix-cache scheduling strategy",
        "--mamba-scheduler-strategy",
        choices=MAMBA_STRATEGIES,
    ),
    _k(
        "sglang.chunked_prefill_size",
        "integer",
        "prefill chunk size in tokens",
        "--chunked-prefill-size",
    ),
    _k(
        "sglang.disable_radix_cache",
        "boolean",
        "turn the prefix (radix) cache off",
        "--disable-radix-cache",
        kind="bool",
    ),
    # -- kernels
    _k(
        "sglang.kv_cache_dtype",
        "string",
        "KV cache data type",
        "--kv-cache-dtype",
        choices=KV_CACHE_DTYPES,
    ),
    _k(
        "sglang.attention_backend",
        "string",
        "attention kernel backend",
        "--attention-backend",
        choices=ATTENTION_BACKENDS,
    ),
    _k(
        "sglang.moe_runner_backend",
        "string",
        "MoE expert runner",
        "--moe-runner-backend",
        choices=MOE_RUNNERS,
    ),
    _k(
        "sglang.fp4_gemm_backend",
        "string",
        "FP4 dense GEMM backend",
        "--fp4-gemm-backend",
        choices=FP4_GEMM_BACKENDS,
    ),
    _k(
        "sglang.disable_flashinfer_cutlass_moe_fp4_allgather",
        "boolean",
        "skip the fi_cutlass MoE FP4 allgather",
        "--disable-flashinfer-cutlass-moe-fp4-allgather",
        kind="bool",
    ),
    # -- CUDA graphs
    _k(
        "sglang.disable_cuda_graph",
        "boolean",
        "eager mode (no CUDA graphs)",
        "--disable-cuda-graph",
        kind="bool",
    ),
    _k(
        "sglang.disable_piecewise_cuda_graph",
        "boolean",
        "full CUDA graphs only, no piecewise capture",
        "--disable-piecewise-cuda-graph",
        kind="bool",
    ),
    _k(
        "sglang.cuda_graph_max_bs",
        "integer",
        "largest batch captured in a CUDA graph",
        "--cuda-graph-max-bs",
        minimum=1,
    ),
    # -- API surface
    _k(
        "sglang.served_model_name",
        "string",
        "model name reported by the OpenAI API",
        "--served-model-name",
    ),
    _k(
        "sglang.reasoning_parser",
        "string",
        "reasoning (thinking) output parser",
        "--reasoning-parser",
    ),
    _k("sglang.tool_call_parser", "string", "tool-call output parser", "--tool-call-parser"),
    # -- speculative decoding (the `speculative` block)
    _k(
        "speculative.algorithm",
        "string",
        "speculative algorithm",
        "--speculative-algorithm",
        choices=SPEC_ALGORITHMS,
    ),
    _k(
        "speculative.draft_model_path",
        "string",
        "separate draft model (HF id)",
        "--speculative-draft-model-path",
    ),
    _k(
        "speculative.num_steps",
        "integer",
        "draft steps per verify",
        "--speculative-num-steps",
        minimum=1,
    ),
    _k(
        "speculative.eagle_topk",
        "integer",
        "EAGLE top-k branching",
        "--speculative-eagle-topk",
        minimum=1,
    ),
    _k(
        "speculative.num_draft_tokens",
        "integer",
        "draft tokens verified per step",
        "--speculative-num-draft-tokens",
        minimum=1,
    ),
    # -- environment-only knobs the seeds write like flags (see module docstring)
    _k(
        "sglang.disable_deep_gemm",
        "boolean",
        "disable the DeepGEMM JIT (NVFP4: it JITs forever)",
        env="SGLANG_ENABLE_JIT_DEEPGEMM",
        kind="env_bool",
        env_true="0",
        env_false="1",
    ),
    _k(
        "sglang.enable_spec_v2",
        "boolean",
        "speculative decoding v2 (overlap) path",
        env="SGLANG_ENABLE_SPEC_V2",
        kind="env_bool",
    ),
)

ENGINES: dict[str, tuple[Knob, ...]] = {"sglang": SGLANG}
"""engine name -> its knobs. ``engine: vllm``/``trtllm`` add a table here (issue 7)."""

ENGINE_SECTIONS: dict[str, tuple[str, ...]] = {"sglang": ("sglang", "speculative")}
"""Profile blocks whose keys an engine owns (each key must be a knob of that engine)."""

# Flags the renderer adds itself (deployment, not tuning); a profile may not set them.
SGLANG_RUNTIME_FLAGS: tuple[str, ...] = (
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    "--host",
    "--port",
)


@dataclass(frozen=True)
class EngineSpec:
    name: str
    knobs: tuple[Knob, ...]
    sections: tuple[str, ...]
    runtime_flags: tuple[str, ...] = field(default_factory=tuple)

    def knob(self, key: str) -> Knob | None:
        return next((k for k in self.knobs if k.key == key), None)

    def section_knobs(self, section: str) -> list[Knob]:
        return [k for k in self.knobs if k.section == section]

    def all_flags(self) -> set[str]:
        return {k.flag for k in self.knobs if k.flag} | set(self.runtime_flags)


def engine(name: str) -> EngineSpec:
    return EngineSpec(
        name=name,
        knobs=ENGINES[name],
        sections=ENGINE_SECTIONS[name],
        runtime_flags=SGLANG_RUNTIME_FLAGS if name == "sglang" else (),
    )
