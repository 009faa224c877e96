"""SGLang's tables: the images the seeds ran, the metrics it reports, and the knob table.

The knob table holds every profile key of the ``sglang`` and ``speculative`` blocks and the
deployment flags, in the seeds' flag order, checked against ``python/sglang/srt/server_args.py``
of the PyPI wheels 0.5.10-0.5.13 (``tests/serving/engines/test_profile_flags.py`` re-reads every
flag from the wheels). Two keys the seeds write like flags are environment variables in SGLang,
not ServerArgs: ``disable_deep_gemm`` (src:ultra-post prints ``--disable-deep-gemm``, which
``server_args.py`` does not define and ``parse_args`` would reject) is
``SGLANG_ENABLE_JIT_DEEPGEMM=0``, and ``enable_spec_v2`` (src:gemma-mtp-post, src:roce-post Qwen3.5) is
``SGLANG_ENABLE_SPEC_V2=1`` (``sglang/srt/environ.py``).

The rest of what sparkrack knows about SGLang is :mod:`.sglang`.
"""

from __future__ import annotations

from typing import Any

from sparkrack.serving.engines.facts import AcceptRatio, Metric, MetricKind, Quantity
from sparkrack.serving.profile.images import ImageFacts
from sparkrack.serving.profile.knobs import HF_ID, IDENT, REVISION, Knob, RuntimeKnob, Type, runtime

NAME = "sglang"
OLDEST = "0.5.10"
"""Oldest SGLang release whose flags sparkrack checked; every flag exists from it on."""

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


def k(key: str, type_: Type, help_: str, flag: str | None = None, **kw: Any) -> Knob:
    return Knob(key=key, type=type_, help=help_, flag=flag, since=OLDEST, **kw)


KNOBS: tuple[Knob, ...] = (
    # -- what is served, and how it is split (model/topology come from the profile's top level)
    k("model", "string", "Hugging Face model id", "--model-path", pattern=HF_ID),
    k("revision", "string", "commit of the model repo", "--revision", pattern=REVISION),
    k(
        "sglang.trust_remote_code",
        "boolean",
        "run the model repo's code",
        "--trust-remote-code",
        kind="bool",
    ),
    k(
        "sglang.quantization",
        "string",
        "weight quantization method",
        "--quantization",
        choices=QUANTIZATIONS,
    ),
    k(
        "topology.tp",
        "integer",
        "tensor-parallel size",
        "--tp-size",
        minimum=1,
        aliases=("--tensor-parallel-size",),
    ),
    k(
        "topology.pp",
        "integer",
        "pipeline-parallel size",
        "--pp-size",
        minimum=1,
        aliases=("--pipeline-parallel-size",),
    ),
    k(
        "topology.ep",
        "integer",
        "expert-parallel size",
        "--ep-size",
        minimum=1,
        aliases=("--expert-parallel-size",),
    ),
    # -- memory, context, scheduling
    k("sglang.context_length", "integer", "maximum context length", "--context-length", minimum=1),
    k(
        "sglang.json_model_override_args",
        "object",
        "overrides of the model's config.json",
        "--json-model-override-args",
        kind="json",
    ),
    k(
        "sglang.mem_fraction_static",
        "number",
        "fraction of GPU memory for weights + KV pool",
        "--mem-fraction-static",
        minimum=0.05,
        maximum=0.99,
    ),
    k(
        "sglang.max_running_requests",
        "integer",
        "concurrent request cap",
        "--max-running-requests",
        minimum=1,
    ),
    k(
        "sglang.max_mamba_cache_size",
        "integer",
        "Mamba state pool slots (hybrid models)",
        "--max-mamba-cache-size",
        minimum=1,
    ),
    k(
        "sglang.mamba_scheduler_strategy",
        "string",
        "Mamba/radix-cache scheduling strategy",
        "--mamba-scheduler-strategy",
        choices=MAMBA_STRATEGIES,
    ),
    k(
        "sglang.chunked_prefill_size",
        "integer",
        "prefill chunk size in tokens",
        "--chunked-prefill-size",
    ),
    k(
        "sglang.disable_radix_cache",
        "boolean",
        "turn the prefix (radix) cache off",
        "--disable-radix-cache",
        kind="bool",
    ),
    # -- kernels
    k(
        "sglang.kv_cache_dtype",
        "string",
        "KV cache data type",
        "--kv-cache-dtype",
        choices=KV_CACHE_DTYPES,
    ),
    k(
        "sglang.attention_backend",
        "string",
        "attention kernel backend",
        "--attention-backend",
        choices=ATTENTION_BACKENDS,
    ),
    k(
        "sglang.moe_runner_backend",
        "string",
        "MoE expert runner",
        "--moe-runner-backend",
        choices=MOE_RUNNERS,
    ),
    k(
        "sglang.fp4_gemm_backend",
        "string",
        "FP4 dense GEMM backend",
        "--fp4-gemm-backend",
        choices=FP4_GEMM_BACKENDS,
    ),
    k(
        "sglang.disable_flashinfer_cutlass_moe_fp4_allgather",
        "boolean",
        "skip the fi_cutlass MoE FP4 allgather",
        "--disable-flashinfer-cutlass-moe-fp4-allgather",
        kind="bool",
    ),
    # -- CUDA graphs
    k(
        "sglang.disable_cuda_graph",
        "boolean",
        "eager mode (no CUDA graphs)",
        "--disable-cuda-graph",
        kind="bool",
    ),
    k(
        "sglang.disable_piecewise_cuda_graph",
        "boolean",
        "full CUDA graphs only, no piecewise capture",
        "--disable-piecewise-cuda-graph",
        kind="bool",
    ),
    k(
        "sglang.cuda_graph_max_bs",
        "integer",
        "largest batch captured in a CUDA graph",
        "--cuda-graph-max-bs",
        minimum=1,
    ),
    # -- API surface
    k(
        "sglang.served_model_name",
        "string",
        "model name reported by the OpenAI API",
        "--served-model-name",
        pattern=IDENT,
    ),
    k(
        "sglang.reasoning_parser",
        "string",
        "reasoning (thinking) output parser",
        "--reasoning-parser",
        pattern=IDENT,
    ),
    k(
        "sglang.tool_call_parser",
        "string",
        "tool-call output parser",
        "--tool-call-parser",
        pattern=IDENT,
    ),
    # -- speculative decoding (the `speculative` block)
    k(
        "speculative.algorithm",
        "string",
        "speculative algorithm",
        "--speculative-algorithm",
        choices=SPEC_ALGORITHMS,
    ),
    k(
        "speculative.draft_model_path",
        "string",
        "separate draft model (HF id)",
        "--speculative-draft-model-path",
        pattern=HF_ID,
        # ModelConfig.from_server_args loads the draft with the server's trust_remote_code.
        code="repo",
    ),
    k(
        "speculative.num_steps",
        "integer",
        "draft steps per verify",
        "--speculative-num-steps",
        minimum=1,
    ),
    k(
        "speculative.eagle_topk",
        "integer",
        "EAGLE top-k branching",
        "--speculative-eagle-topk",
        minimum=1,
    ),
    k(
        "speculative.num_draft_tokens",
        "integer",
        "draft tokens verified per step",
        "--speculative-num-draft-tokens",
        minimum=1,
    ),
    # -- environment-only knobs the seeds write like flags (see module docstring)
    k(
        "sglang.disable_deep_gemm",
        "boolean",
        "disable the DeepGEMM JIT (NVFP4: it JITs forever)",
        env="SGLANG_ENABLE_JIT_DEEPGEMM",
        kind="env_bool",
        env_true="0",
        env_false="1",
    ),
    k(
        "sglang.enable_spec_v2",
        "boolean",
        "speculative decoding v2 (overlap) path",
        env="SGLANG_ENABLE_SPEC_V2",
        kind="env_bool",
    ),
    # -- deployment: one process per Spark of the group (from the address plan)
    runtime("--nnodes", "nnodes"),
    runtime("--node-rank", "node_rank"),
    # SGLang's parser: add_argument("--dist-init-addr", "--nccl-init-addr", ...).
    runtime("--dist-init-addr", "dist_init_addr", aliases=("--nccl-init-addr",)),
    runtime("--host", "host"),
    runtime("--port", "port"),
    # -- observability: the Prometheus endpoint /metrics on the API port (always on)
    RuntimeKnob(
        key="runtime.metrics",
        type="boolean",
        help="metrics",
        flag="--enable-metrics",
        kind="bool",
        runtime="metrics",
    ),
)


TORCH: dict[str, str] = {
    "0.5.10": "2.9.1",
    "0.5.11": "2.11.0",
    "0.5.12": "2.11.0",
    "0.5.13": "2.11.0",
}
"""The PyTorch each SGLang release pins: ``torch==X`` in the ``dependencies`` of that release's
``python/pyproject.toml`` (the ``Requires-Dist: torch==X`` of its PyPI wheel, the wheel the engine
check installs). An image built from a release carries its pin; one that swapped PyTorch states
its own in the profile's ``image_info.torch``. It decides the flight recorder's variable names
(:func:`sparkrack.fabric.ncclenv.flight_recorder_env`)."""

IMAGES: dict[str, ImageFacts] = {
    "xomoxcc/dgx-spark-sglang:0.5.13-dev-nemotronh-mtp-sm121": ImageFacts(
        version="0.5.13",
        torch=TORCH["0.5.13"],
        cudnn=False,
        source="src:super-mtp-post §1/§5/§7 (fi_cudnn: 'cuDNN is not available')",
        extras=("#24955", "#28102", "#27184", "#27998", "#21138"),
    ),
    "scitrera/dgx-spark-sglang:0.5.12": ImageFacts(
        version="0.5.12",
        torch=TORCH["0.5.12"],
        cudnn=False,
        source=(
            "src:ultra-post (image; cuDNN startup crash of the Super sibling on the same tag); "
            "vroomfondel/dgxarley roles/k8s_dgx/model_profiles/"
            "nvidia-nvidia-nemotron-3-ultra-550b-a55b-nvfp4.yml ('cuDNN wheel missing')"
        ),
    ),
    "scitrera/dgx-spark-sglang:0.5.10": ImageFacts(
        version="0.5.10",
        torch=TORCH["0.5.10"],
        cudnn=True,
        source="src:roce-post (EP=4 matrix: fi_cudnn rows 33/34/36 stable)",
    ),
    "xomoxcc/dgx-spark-sglang:0.5.11-gemma4-sm121": ImageFacts(
        version="0.5.11",
        torch=TORCH["0.5.11"],
        cudnn=None,
        source="src:gemma-mtp-post (v0.5.11 + PR #24436 cherry-pick)",
        extras=("#24436",),
    ),
}
"""The SGLang images the seeds ran (reference without digest) and what sparkrack knows about them."""

METRICS_SOURCE = "sglang/srt/observability/metrics_collector.py"
METRICS_VERSIONS = ("0.5.10", "0.5.11", "0.5.12", "0.5.13")
"""The SGLang releases of the images above (each one's wheel declares every metric below)."""


def _metric(name: str, kind: MetricKind) -> Metric:
    return Metric(name, kind, NAME, METRICS_SOURCE, METRICS_VERSIONS)


# Served with --enable-metrics (the runtime.metrics row of the table).
METRICS = (
    _metric("sglang:generation_tokens_total", "counter"),
    _metric("sglang:prompt_tokens_total", "counter"),
    _metric("sglang:time_to_first_token_seconds", "histogram"),
    _metric("sglang:inter_token_latency_seconds", "histogram"),
    _metric("sglang:num_running_reqs", "gauge"),
    _metric("sglang:num_queue_reqs", "gauge"),
    _metric("sglang:token_usage", "gauge"),
    _metric("sglang:mamba_usage", "gauge"),
    _metric("sglang:spec_accept_length", "gauge"),
    _metric("sglang:gen_throughput", "gauge"),
)
RECORDED: dict[Quantity, str | AcceptRatio] = {
    Quantity.GENERATED: "sglang:generation_tokens_total",
    Quantity.RUNNING: "sglang:num_running_reqs",
    Quantity.QUEUED: "sglang:num_queue_reqs",
    Quantity.TTFT: "sglang:time_to_first_token_seconds",
    Quantity.ITL: "sglang:inter_token_latency_seconds",
    Quantity.KV_USAGE: "sglang:token_usage",
    Quantity.MAMBA_USAGE: "sglang:mamba_usage",
    # The acceptance length of the scheduler's last logging window, one series per TP/DP rank.
    Quantity.ACCEPT_LENGTH: "sglang:spec_accept_length",
}
