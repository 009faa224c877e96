"""TensorRT-LLM on one Spark (src:super-guide): ``trtllm-serve`` flags, ``extra-llm-api-config.yml`` keys,
and the rules the seed names.

Profile blocks: ``trtllm`` (CLI flags + environment) and ``trtllm_config`` (the keys of
``extra-llm-api-config.yml``, each with its exact nested schema). The renderer writes
``trtllm_config`` into a ConfigMap and passes its path with ``--extra_llm_api_options``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from sparkrack.errors import Problem
from sparkrack.planner.memory import RecurrentPool, Serving, per_sequence_pool
from sparkrack.serving.engines.base import (
    CUTE_DSL_CACHE,
    DEEPGEMM_CACHE,
    FLASHINFER_CACHE,
    INDUCTOR_CACHE,
    TRITON_CACHE,
    SingleSparkEngine,
    api_listeners,
    integer,
    long_context_problems,
    number,
    section,
)
from sparkrack.serving.engines.extra_args import ArgClass
from sparkrack.serving.engines.facts import Route
from sparkrack.serving.profile.images import ImageFacts
from sparkrack.serving.profile.knobs import IDENT, Knob, PositionalKnob, cfg, env, k, runtime
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.profile.ruleset import Ctx, RuleSet

NAME = "trtllm"
ENTRY = ("trtllm-serve",)
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
        pattern=IDENT,
    ),
    k("trtllm.tool_parser", "string", "tool-call output parser", "--tool_parser", pattern=IDENT),
    runtime("--extra_llm_api_options", "config"),
    k("trtllm.max_seq_len", "integer", "maximum sequence length", "--max_seq_len", minimum=1),
    env(
        "trtllm.allow_long_max_model_len",
        "boolean",
        "allow max_seq_len beyond the model config",
        "TLLM_ALLOW_LONG_MAX_MODEL_LEN",
    ),
    # -- extra-llm-api-config.yml (src:super-guide order)
    cfg("trtllm_config.kv_cache_config", "object", "KV/SSM cache", KV_CACHE_CONFIG),
    cfg("trtllm_config.moe_config", "object", "MoE backend", MOE_CONFIG),
    cfg("trtllm_config.cuda_graph_config", "object", "CUDA graphs", CUDA_GRAPH_CONFIG),
    cfg("trtllm_config.enable_attention_dp", "boolean", "attention data parallelism"),
    cfg("trtllm_config.enable_chunked_prefill", "boolean", "chunked prefill"),
    cfg("trtllm_config.stream_interval", "integer", "tokens per streamed chunk"),
    cfg("trtllm_config.print_iter_log", "boolean", "per-iteration log lines"),
    cfg("trtllm_config.speculative_config", "object", "speculative decoding", SPECULATIVE_CONFIG),
)
RULES = RuleSet()


def _kv(c: Ctx) -> dict[str, Any]:
    return dict(c.block("trtllm_config").get("kv_cache_config") or {})


@RULES.add(
    "trtllm-revision",
    "trtllm-serve options (docs of 0.18-1.1): MODEL is a name or a path, no revision option",
    "trtllm-serve cannot load a pinned revision of a Hugging Face id",
)
def _revision(c: Ctx) -> Iterator[Problem]:
    if c.data.get("revision") is not None:
        yield c.p(
            "revision",
            "trtllm-serve takes the model as a name or a path and has no revision option: "
            "offline (HF_HUB_OFFLINE=1) it loads the commit main points at, not this one",
            "remove revision (the fetch step then pins the commit main resolves to at fetch "
            "time), or serve this model with engine: vllm or sglang",
            "trtllm-revision",
        )


@RULES.add(
    "trtllm-long-context-env",
    "src:super-guide (TLLM_ALLOW_LONG_MAX_MODEL_LEN=1 for --max_seq_len 1048576)",
    "max_seq_len beyond the model config needs trtllm.allow_long_max_model_len",
)
def _long_len(c: Ctx) -> Iterator[Problem]:
    yield from long_context_problems(
        c, NAME, "max_seq_len", "TLLM_ALLOW_LONG_MAX_MODEL_LEN", "trtllm-long-context-env"
    )


@RULES.add(
    "trtllm-ssm-fp16-stochastic-rounding",
    "src:super-guide (FP16 SSM cache only with stochastic rounding, 5 Philox rounds)",
    "a float16 Mamba SSM cache needs mamba_ssm_stochastic_rounding",
)
def _ssm(c: Ctx) -> Iterator[Problem]:
    kv = _kv(c)
    if (
        kv.get("mamba_ssm_cache_dtype") == "float16"
        and kv.get("mamba_ssm_stochastic_rounding") is not True
    ):
        yield c.p(
            "trtllm_config.kv_cache_config.mamba_ssm_stochastic_rounding",
            "a float16 SSM cache without stochastic rounding loses precision",
            "set mamba_ssm_stochastic_rounding: true (seed: mamba_ssm_philox_rounds: 5) "
            "or mamba_ssm_cache_dtype: float32",
            "trtllm-ssm-fp16-stochastic-rounding",
        )


@RULES.add(
    "trtllm-mtp-layers",
    "src:super-guide (speculative_config: decoding_type MTP, num_nextn_predict_layers 3)",
    "MTP needs num_nextn_predict_layers >= 1",
)
def _mtp(c: Ctx) -> Iterator[Problem]:
    spec = (c.data.get("trtllm_config") or {}).get("speculative_config") or {}
    if spec.get("decoding_type") == "MTP" and int(spec.get("num_nextn_predict_layers", 0)) < 1:
        yield c.p(
            "trtllm_config.speculative_config.num_nextn_predict_layers",
            "MTP without draft layers does nothing",
            "set num_nextn_predict_layers (src:super-guide: 3)",
            "trtllm-mtp-layers",
        )


@dataclass(frozen=True)
class TRTLLMMemory:
    """``free_gpu_memory_fraction`` is a fraction of the memory left after the weights; TRT-LLM
    refuses to start when one full-length sequence does not fit the KV pool."""

    name: str = NAME
    fraction_key: str = "free_gpu_memory_fraction"
    pool_fix: str = "raise the memory fraction or use more Sparks"
    context_key: str | None = "max_seq_len"
    assumptions: tuple[str, ...] = (
        "trtllm: KV = free_gpu_memory_fraction x (usable - weights - overhead); one recurrent "
        "state per running sequence",
    )

    def budget(
        self, fraction: float | None, usable: float, overhead: float, per_gpu: float, total: float
    ) -> tuple[float, float | None, float]:
        f = 0.9 if fraction is None else fraction  # TRT-LLM's default
        return f, None, f * (usable - per_gpu - overhead)

    def startup_refusal(self, fraction: float, usable: float, total: float) -> str | None:
        return None

    def recurrent(
        self, s: Serving, per_request: float, rest: float, notes: list[str]
    ) -> RecurrentPool:
        return per_sequence_pool(s, per_request, 256)


# TRT-LLM KV dtype names -> the planner's KV_BYTES keys (``auto`` = the model's BF16).
KV_DTYPE_PLANNER = {"fp8": "fp8"}


IMAGES: dict[str, ImageFacts] = {
    "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc9": ImageFacts(
        version="1.3.0rc9",
        cudnn=None,
        source="src:super-guide (TensorRT-LLM image)",
    ),
}
"""The TensorRT-LLM images the seeds ran (reference without digest) and what sparkrack knows."""

# --- the engine check: trtllm-serve's release is not on PyPI, its source is the table ------------

METRICS_SWITCH: Mapping[str, Any] = MappingProxyType({"return_perf_metrics": True})
"""The LLM API argument without which trtllm-serve mounts no Prometheus endpoint. Not a knob:
a profile cannot turn it off (sparkrack owns the scrape)."""

TABLE = "trtllm-1.3.0rc9.json"
"""``trtllm-serve`` options and ``extra-llm-api-config.yml`` keys of the image's release, taken
from its source (``sparkrack/data/enginecheck/``)."""


@cache
def source_table() -> dict[str, Any]:
    data = resources.files("sparkrack") / "data" / "enginecheck" / TABLE
    table: dict[str, Any] = json.loads(data.read_text(encoding="utf-8"))
    return table


def table_check(argv: Sequence[str], config: Mapping[str, Any]) -> list[str]:
    """Problems of a ``trtllm-serve`` argv and its extra-llm-api-config against the source table.

    ``argv`` holds the words after ``trtllm-serve``; an empty list means no problem.
    """
    table = source_table()
    where = f"TRT-LLM {table['version']} ({table['source']})"
    options: dict[str, Any] = table["serve_options"]
    problems = []
    words = list(argv)
    i = 0
    positional = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            positional += 1
            if positional > 1:
                problems.append(f"{ENTRY[0]}: unexpected argument {word!r} ({where})")
            continue
        name, _, inline = word.partition("=")
        spec = options.get(name)
        if spec is None:
            problems.append(f"{ENTRY[0]}: no such option {name} ({where})")
            if not inline and i < len(words) and not words[i].startswith("--"):
                i += 1  # its value
            continue
        if spec["flag"]:
            continue
        value = inline if inline else (words[i] if i < len(words) else None)
        if not inline:
            i += 1
        if value is None:
            problems.append(f"{ENTRY[0]}: {name} needs a value")
        elif spec.get("choices") and value not in spec["choices"]:
            choices = ", ".join(spec["choices"])
            problems.append(f"{ENTRY[0]}: {name} {value!r} is not one of {choices} ({where})")
    problems += unknown_keys(config, table["llm_api_keys"], CONFIG_FILE.removesuffix(".yml"), where)
    return problems


def unknown_keys(
    config: Mapping[str, Any], known: Mapping[str, Any], path: str, where: str
) -> list[str]:
    problems = []
    for key, value in config.items():
        if key not in known:
            problems.append(f"{path}: unknown key {key!r} ({where})")
            continue
        nested = known[key]
        if isinstance(nested, dict) and isinstance(value, Mapping):
            problems += unknown_keys(value, nested, f"{path}.{key}", where)
    return problems


# extra_args: trtllm-serve's options of the image's release (sparkrack/data/enginecheck/).
ALLOWED_OPTIONS = MappingProxyType(
    {
        "--log_level": True,
        "--num_postprocess_workers": True,
        "--max_beam_width": True,
        "--fail_fast_on_attention_window_too_large": False,
    }
)
REFUSED_OPTIONS = MappingProxyType(
    {
        "--tokenizer": (
            ArgClass.CODE,
            "loads the tokenizer from a path or repo other than the model's",
        ),
        "--custom_tokenizer": (ArgClass.CODE, "imports a tokenizer class by name"),
        "--custom_module_dirs": (ArgClass.CODE, "imports Python modules from those directories"),
        "--chat_template": (ArgClass.CODE, "renders prompts with a template from another path"),
        "--otlp_traces_endpoint": (ArgClass.EGRESS, "sends traces to that host"),
        "--disagg_cluster_uri": (ArgClass.EGRESS, "connects to a disaggregation cluster"),
        "--metadata_server_config_file": (ArgClass.EGRESS, "connects to a metadata server"),
        "--media_io_kwargs": (ArgClass.PATH, "configures how media is read"),
    }
)

# --- HTTP routes past the OpenAI API ---------------------------------------------------------
# tensorrt_llm/serve/openai_server.py (OpenAIServer.register_routes), read from NVIDIA/
# TensorRT-LLM's public source (the stored snapshot, commit 00057725d9a6). The routes of the
# pinned 1.3.0rc9 itself are not verified: PyPI holds only a 10 KB sdist of it whose build
# backend (wheel_stub) fetches the wheel from NVIDIA's own index, which CI cannot reach.
# trtllm-serve has no API key: every route answers whoever reaches the port.
OPENAI_SERVER = "tensorrt_llm/serve/openai_server.py (OpenAIServer.register_routes)"
ROUTES: tuple[Route, ...] = (
    Route(
        "/update_weights",
        "none",
        'always ("RL-only")',
        "replaces the model's weights",
        OPENAI_SERVER,
    ),
    Route(
        "/release_memory",
        "none",
        'always ("RL-only")',
        "frees the weights and KV cache",
        OPENAI_SERVER,
    ),
    Route("/resume_memory", "none", 'always ("RL-only")', "reloads them", OPENAI_SERVER),
    Route("/server_info", "none", "always", "the server's settings", OPENAI_SERVER),
    Route("/kv_cache_events", "none", "always", "drains the KV cache event queue", OPENAI_SERVER),
    Route(
        "/steady_clock_offset",
        "none",
        "always",
        "POST sets the clock offset of every perf metric",
        OPENAI_SERVER,
    ),
    Route("/perf_metrics", "none", "always", "drains every request's timing record", OPENAI_SERVER),
    Route("/version", "none", "always", "the release", OPENAI_SERVER),
)
"""TensorRT-LLM's routes the gate refuses. Through the gate anyone the NetworkPolicy admits
reaches the OpenAI API under /v1 (``/v1/kv_cache_hints`` among it), /health, /health_generate,
the iteration statistics on /metrics and :attr:`TRTLLM.metrics_path`."""


class TRTLLM(SingleSparkEngine):
    name = NAME
    entry = ENTRY
    knobs = KNOBS
    sections = ("trtllm", "trtllm_config")
    rules = RULES
    memory = TRTLLMMemory()
    config_file = CONFIG_FILE
    # trtllm-serve 1.3.0rc9 takes no API key: none of its serve options
    # (sparkrack/data/enginecheck/trtllm-1.3.0rc9.json) names one. Its port is fenced by the
    # serving namespace's NetworkPolicy (the gateway, monitoring and its own pod), and its
    # other routes (ROUTES: /update_weights, /release_memory, ...) by the gate.
    gated = True
    routes = ROUTES
    key_env = MappingProxyType({})
    client_key_env = None
    allowed_options = ALLOWED_OPTIONS
    refused_options = REFUSED_OPTIONS
    # trtllm-serve's /metrics answers iteration statistics as JSON. Its Prometheus text format
    # is on /prometheus/metrics (tensorrt_llm/serve/openai_server.py, OpenAIServer
    # register_routes -> mount_metrics: a prometheus_client ASGI app mounted there), and only
    # when the LLM API argument return_perf_metrics is true, which config() sets. No rule reads
    # a series of it by name yet (metrics = ()): it is scraped so that it is not invisible.
    metrics_path = "/prometheus/metrics"
    single_rank_listeners = api_listeners(
        "tensorrt_llm/serve/openai_server.py (trtllm-serve --host, --port)", metrics_path, True
    )
    # The PyTorch flow's kernels: FlashInfer, Triton, inductor, and the CuTe-DSL and DeepGEMM MoE
    # backends of moe_config.backend. TensorRT-LLM's own kernel caches, if any, are not verified
    # against 1.3.0rc9 and are not listed.
    jit_caches = (FLASHINFER_CACHE, TRITON_CACHE, INDUCTOR_CACHE, CUTE_DSL_CACHE, DEEPGEMM_CACHE)
    images = IMAGES

    def table_problems(self, argv: Sequence[str], profile: Profile) -> list[str]:
        return table_check(argv, self.config(profile.data))

    def config(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The ``extra-llm-api-config.yml`` mapping, keys in the table's (= the seed's) order,
        then :data:`METRICS_SWITCH` (what mounts :attr:`metrics_path`)."""
        block = section(data, "trtllm_config")
        keys = [knob.name for knob in KNOBS if knob.section == "trtllm_config"]
        return {**{key: block[key] for key in keys if key in block}, **METRICS_SWITCH}

    def serving(self, data: Mapping[str, Any]) -> Serving:
        topo, tr = section(data, "topology"), section(data, "trtllm")
        cfg_block = section(data, "trtllm_config")
        kv = section(cfg_block, "kv_cache_config")
        layers = section(cfg_block, "speculative_config").get("num_nextn_predict_layers")
        return Serving(
            memory=self.memory,
            tp=int(topo.get("tp", 1)),
            pp=int(topo.get("pp", 1)),
            ep=int(topo.get("ep", 1)),
            memory_fraction=number(kv.get("free_gpu_memory_fraction")),
            kv_cache_dtype=KV_DTYPE_PLANNER.get(str(kv.get("dtype", "auto")), "auto"),
            context_length=integer(tr.get("max_seq_len")),
            max_running_requests=integer(tr.get("max_batch_size")),
            speculative_draft_tokens=None if layers is None else int(layers) + 1,
            mamba_ssm_dtype=str(kv.get("mamba_ssm_cache_dtype", "float32")),
        )


ENGINE = TRTLLM()
