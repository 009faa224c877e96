"""vLLM on one Spark (src:super-guide): the knob table, the rules the seed names, its memory semantics and
the init container that fetches the reasoning-parser plugin.

The table is in the order of src:super-guide's ``docker run`` command, so the rendered argv reads like
the seed. Flags are spelled as the seed spells them (vLLM's argument parser accepts both
``--mamba_ssm_cache_dtype`` and ``--mamba-ssm-cache-dtype``). The container's command is
``vllm serve`` (the vllm/vllm-openai image's entrypoint), the argv below follows it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem, SparkrackError
from sparkrack.fabric import gidtable
from sparkrack.inputs.imageref import without_digest
from sparkrack.planner.memory import GB, RecurrentPool, Serving, per_sequence_pool
from sparkrack.serving import scripts
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines.base import (
    FLASHINFER_CACHE,
    INDUCTOR_CACHE,
    TRITON_CACHE,
    Engine,
    FileSet,
    JitCache,
    PodExtras,
    Rank,
    SingleSparkEngine,
    api_listeners,
    integer,
    long_context_problems,
    number,
    section,
)
from sparkrack.serving.engines.extra_args import ArgClass
from sparkrack.serving.engines.facts import AcceptRatio, Metric, MetricKind, Quantity
from sparkrack.serving.engines.listeners import Listener
from sparkrack.serving.engines.vllm_across import (
    ACROSS_KNOBS,
    ACROSS_LISTENERS,
    ACROSS_RESERVED,
    ACROSS_RULES,
    DATA_PARALLEL,
    SERVER,
    LaunchPlan,
    data_parallel_memory,
)
from sparkrack.serving.engines.vllm_routes import ROUTES
from sparkrack.serving.engines.vllm_speculative import SPECULATIVE_FIELDS, SPECULATIVE_REFUSED
from sparkrack.serving.objects.pod import hardened
from sparkrack.serving.profile.images import ImageFacts
from sparkrack.serving.profile.knobs import (
    ABS_PATH,
    HF_ID,
    IDENT,
    REVISION,
    Knob,
    RuntimeKnob,
    env,
    k,
    runtime,
)
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.profile.ruleset import Ctx, Rule, RuleSet

NAME = "vllm"
ENTRY = ("vllm", "serve")
PLUGIN_VOLUME = "engine-plugins"
# src:super-guide: "MTP + NVFP4 on DGX Spark requires a vLLM nightly build (cu130). The pinned
# release 0.17.1 does not support this combination on a single-GPU Spark configuration."
NIGHTLY_TAG = re.compile(r":cu130-nightly(?:-[0-9a-f]{7,40})?$")
KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16")
SSM_DTYPES = ("float32", "float16", "bfloat16", "auto")

KNOBS: tuple[Knob, ...] = (
    k("model", "string", "Hugging Face model id", "--model", pattern=HF_ID),
    k("revision", "string", "commit of the model repo", "--revision", pattern=REVISION),
    k(
        "vllm.served_model_name",
        "string",
        "model name reported by the OpenAI API",
        "--served-model-name",
        pattern=IDENT,
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
    k("vllm.dtype", "string", "activation/weight dtype", "--dtype", pattern=IDENT),
    k("vllm.kv_cache_dtype", "string", "KV cache data type", "--kv-cache-dtype", choices=KV_DTYPES),
    k(
        "topology.tp",
        "integer",
        "tensor-parallel size",
        "--tensor-parallel-size",
        minimum=1,
        aliases=("-tp",),
    ),
    k(
        "topology.pp",
        "integer",
        "pipeline-parallel size",
        "--pipeline-parallel-size",
        minimum=1,
        aliases=("-pp",),
    ),
    k(
        "vllm.data_parallel_size",
        "integer",
        "data-parallel size",
        "--data-parallel-size",
        minimum=1,
        aliases=("-dp",),
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
    k("vllm.moe_backend", "string", "MoE kernel backend", "--moe-backend", pattern=IDENT),
    k(
        "vllm.mamba_ssm_cache_dtype",
        "string",
        "Mamba SSM state cache dtype",
        "--mamba_ssm_cache_dtype",
        choices=SSM_DTYPES,
    ),
    k("vllm.quantization", "string", "weight quantization method", "--quantization", pattern=IDENT),
    k(
        "vllm.speculative_config",
        "object",
        "speculative decoding config (e.g. method mtp, num_speculative_tokens)",
        "--speculative_config",
        kind="json",
        # SpeculativeConfig loads its draft ``model`` with the target's trust_remote_code
        # (vllm/config/speculative.py).
        code="repo",
        code_field="model",
        fields=SPECULATIVE_FIELDS,
        refused_fields=SPECULATIVE_REFUSED,
    ),
    k(
        "vllm.reasoning_parser_plugin",
        "string",
        "reasoning-parser plugin file; fetched from the model repo into the pod at this path",
        "--reasoning-parser-plugin",
        pattern=ABS_PATH,
        # The server imports the file as a module (ReasoningParserManager.import_reasoning_parser).
        code="model-file",
    ),
    k(
        "vllm.reasoning_parser",
        "string",
        "reasoning (thinking) output parser",
        "--reasoning-parser",
        pattern=IDENT,
    ),
    k(
        "vllm.enable_auto_tool_choice",
        "boolean",
        "automatic tool choice",
        "--enable-auto-tool-choice",
        kind="bool",
    ),
    k(
        "vllm.tool_call_parser",
        "string",
        "tool-call output parser",
        "--tool-call-parser",
        pattern=IDENT,
    ),
    # -- environment (src:super-guide "Env Vars", in its order)
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
RULES = RuleSet()


def _v(c: Ctx, key: str) -> object:
    return c.block("vllm").get(key)


def _nvfp4(c: Ctx) -> bool:
    return _v(c, "quantization") == "fp4" or "nvfp4" in str(c.info("quantization", ""))


@RULES.add(
    "vllm-mtp-nvfp4-nightly",
    "src:super-guide (vLLM: MTP + NVFP4 needs the cu130 nightly; release 0.17.1 does not support it)",
    "vLLM MTP on an NVFP4 checkpoint needs vllm/vllm-openai:cu130-nightly",
)
def _mtp_nightly(c: Ctx) -> Iterator[Problem]:
    spec = _v(c, "speculative_config")
    method = spec.get("method") if isinstance(spec, dict) else None
    image = without_digest(str(c.data.get("image", "")))  # a pinned digest keeps its tag
    if method == "mtp" and _nvfp4(c) and not NIGHTLY_TAG.search(image):
        yield c.p(
            "image",
            f"MTP + NVFP4 on one Spark does not run on {image} (vLLM 0.17.1 lacks it)",
            "use image vllm/vllm-openai:cu130-nightly, or drop vllm.speculative_config",
            "vllm-mtp-nvfp4-nightly",
        )


@RULES.add(
    "vllm-long-context-env",
    "src:super-guide (--max-model-len 1M requires VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)",
    "max_model_len beyond the model config needs vllm.allow_long_max_model_len",
)
def _long_len(c: Ctx) -> Iterator[Problem]:
    yield from long_context_problems(
        c, NAME, "max_model_len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "vllm-long-context-env"
    )


@RULES.add(
    "vllm-flashinfer-moe-fp4",
    "src:super-guide (FlashInfer FP4 MoE kernels are Blackwell multi-GPU only; Marlin handles FP4 on Spark)",
    "vLLM FlashInfer FP4 MoE must stay off on a Spark",
)
def _fi_moe(c: Ctx) -> Iterator[Problem]:
    if _v(c, "use_flashinfer_moe_fp4") is True:
        yield c.p(
            "vllm.use_flashinfer_moe_fp4",
            "FlashInfer FP4 MoE kernels are Blackwell multi-GPU only",
            "set vllm.use_flashinfer_moe_fp4: false and vllm.moe_backend: marlin",
            "vllm-flashinfer-moe-fp4",
        )


@RULES.add(
    "vllm-mamba-ssm-float32",
    "src:super-guide (Mamba-2 SSM cache: float32 for all checkpoint precisions; only TRT-LLM has "
    "stochastic rounding)",
    "vLLM keeps the Mamba SSM cache in float32 on NemotronH",
)
def _ssm(c: Ctx) -> Iterator[Problem]:
    dtype = _v(c, "mamba_ssm_cache_dtype")
    if c.arch == "NemotronHForCausalLM" and dtype not in (None, "float32"):
        yield c.p(
            "vllm.mamba_ssm_cache_dtype",
            f"{dtype} SSM state without stochastic rounding loses accuracy on Mamba-2",
            "use float32 (or TensorRT-LLM with mamba_ssm_stochastic_rounding)",
            "vllm-mamba-ssm-float32",
        )


@dataclass(frozen=True)
class VLLMMemory:
    """``gpu_memory_utilization`` is a fraction of the device's *total* memory: the worker asks
    for ``total_memory x gpu_memory_utilization`` and refuses to start when the free memory it
    measures at start is smaller (vLLM's ``gpu_worker``: ``requested_memory``, "Free memory on
    device ... is less than desired GPU memory utilization"). On a GB10 the total is the whole
    unified memory, which the OS shares, so the fraction counts the OS headroom too. vLLM also
    refuses to start when one full-length sequence does not fit the KV pool."""

    name: str = NAME
    fraction_key: str = "gpu_memory_utilization"
    pool_fix: str = "raise the memory fraction or use more Sparks"
    context_key: str | None = "max_model_len"
    assumptions: tuple[str, ...] = (
        "vllm: KV = gpu_memory_utilization x total memory (a GB10's whole unified memory, the OS "
        "included) - weights - overhead, and it refuses to start unless that fraction of the total "
        "is free; one recurrent state per running sequence (max_num_seqs, default 256)",
    )

    def budget(
        self, fraction: float | None, usable: float, overhead: float, per_gpu: float, total: float
    ) -> tuple[float, float | None, float]:
        f = 0.9 if fraction is None else fraction  # vLLM's default
        budget = f * total - overhead
        return f, budget, budget - per_gpu

    def startup_refusal(self, fraction: float, usable: float, total: float) -> str | None:
        """Why vLLM would refuse to start: the fraction of the total is more than is free."""
        if fraction * total <= usable:
            return None
        return (
            f"{fraction:g} asks vLLM for {fraction:g} x {total / GB:g} GB = "
            f"{fraction * total / GB:.1f} GB: vLLM takes the fraction of the device's total "
            f"memory, which on a GB10 is the whole unified memory the OS shares; only "
            f"{usable / GB:g} GB are left after the OS headroom, so vLLM refuses to start "
            '("Free memory on device ... is less than desired GPU memory utilization")'
        )

    def recurrent(
        self, s: Serving, per_request: float, rest: float, notes: list[str]
    ) -> RecurrentPool:
        return per_sequence_pool(s, per_request, 256)


# --- images and metrics ------------------------------------------------------------------------

TORCH: dict[str, str] = {
    "0.18.0": "2.10.0",
    "0.19.0": "2.10.0",
    "0.33.0": "2.14.0",
}
"""The PyTorch each vLLM release the engine check pins requires: the ``Requires-Dist: torch==X`` of
its PyPI wheel (the wheel the engine check installs). An image built from a release carries its
pin; one that swapped PyTorch states its own in the profile's ``image_info.torch``. It decides the
flight recorder's variable names of the ranks across Sparks
(:func:`sparkrack.fabric.ncclenv.flight_recorder_env`)."""

IMAGES: dict[str, ImageFacts] = {
    "vllm/vllm-openai:cu130-nightly": ImageFacts(
        version="0.19.0",
        torch=TORCH["0.19.0"],
        cudnn=None,
        source=(
            "src:super-guide (MTP + NVFP4 needs the nightly after release 0.17.1; its speculative "
            "config passes moe_backend); 0.19.0 is the first PyPI release whose "
            "speculative config has moe_backend"
        ),
    ),
}
"""The vLLM images the seeds ran (reference without digest) and what sparkrack knows about them."""

LOGGERS = "vllm/v1/metrics/loggers.py"
SPEC_METRICS = "vllm/v1/spec_decode/metrics.py"
METRICS_VERSIONS = ("0.18.0", "0.19.0")


def _metric(name: str, kind: MetricKind, source: str = LOGGERS) -> Metric:
    return Metric(name, kind, NAME, source, METRICS_VERSIONS)


# /metrics on the API port by default.
METRICS = (
    _metric("vllm:generation_tokens", "counter"),
    _metric("vllm:prompt_tokens", "counter"),
    _metric("vllm:time_to_first_token_seconds", "histogram"),
    _metric("vllm:inter_token_latency_seconds", "histogram"),
    _metric("vllm:num_requests_running", "gauge"),
    _metric("vllm:num_requests_waiting", "gauge"),
    _metric("vllm:kv_cache_usage_perc", "gauge"),
    _metric("vllm:spec_decode_num_drafts", "counter", SPEC_METRICS),
    _metric("vllm:spec_decode_num_accepted_tokens", "counter", SPEC_METRICS),
)
RECORDED: dict[Quantity, str | AcceptRatio] = {
    Quantity.GENERATED: "vllm:generation_tokens",
    Quantity.RUNNING: "vllm:num_requests_running",
    Quantity.QUEUED: "vllm:num_requests_waiting",
    Quantity.TTFT: "vllm:time_to_first_token_seconds",
    Quantity.ITL: "vllm:inter_token_latency_seconds",
    Quantity.KV_USAGE: "vllm:kv_cache_usage_perc",
    Quantity.ACCEPT_LENGTH: AcceptRatio(
        accepted="vllm:spec_decode_num_accepted_tokens", drafts="vllm:spec_decode_num_drafts"
    ),
}


# extra_args (vllm/engine/arg_utils.py EngineArgs, vllm/entrypoints/openai/cli_args.py, 0.18-0.19)
ALLOWED_OPTIONS = MappingProxyType(
    {
        "--seed": True,
        "--max-num-batched-tokens": True,
        "--enable-prefix-caching": False,
        "--no-enable-prefix-caching": False,
        "--block-size": True,
        "--enforce-eager": False,
        "--disable-log-stats": False,
        "--uvicorn-log-level": True,
        "--disable-uvicorn-access-log": False,
        "--max-log-len": True,
    }
)
REFUSED_OPTIONS = MappingProxyType(
    {
        "--tool-parser-plugin": (ArgClass.CODE, "imports the file as a tool-parser module"),
        "--logits-processors": (ArgClass.CODE, "imports the named classes"),
        "--middleware": (ArgClass.CODE, "imports the named ASGI middleware"),
        "--worker-extension-cls": (ArgClass.CODE, "imports the named class into every worker"),
        "--tokenizer": (
            ArgClass.CODE,
            "loads the tokenizer, with the model's trust_remote_code, from a path or repo other "
            "than the model's",
        ),
        "--hf-config-path": (ArgClass.CODE, "loads the model config from another path or repo"),
        "--chat-template": (
            ArgClass.CODE,
            "renders prompts with a template from a path other than the model's",
        ),
        "--otlp-traces-endpoint": (ArgClass.EGRESS, "sends traces to that host"),
        "--enable-log-requests": (ArgClass.PRIVACY, "logs every request's prompt"),
        "--enable-log-outputs": (ArgClass.PRIVACY, "logs every request's output"),
        "--allowed-local-media-path": (
            ArgClass.PATH,
            "lets requests read files under that path of the pod",
        ),
    }
)


class VLLM(SingleSparkEngine):
    name = NAME
    entry = ENTRY
    knobs = KNOBS
    sections = ("vllm",)
    rules = RULES
    memory = VLLMMemory()
    upstream = NAME
    # VLLM_API_KEY (vllm/envs.py) turns on the API server's AuthenticationMiddleware, which checks
    # the bearer token of the paths under /v1 only (ROUTES): /invocations runs the same requests
    # without it and /scale_elastic_ep reconfigures the engine for anyone. vLLM has no admin key.
    # Only the gate keeps them from the gateway, the watchdog, the ranks and the node.
    gated = True
    routes = ROUTES
    key_env = MappingProxyType({"VLLM_API_KEY": contract.ENGINE_KEY_KEY})
    client_key_env = "VLLM_API_KEY"
    reserved_flags = MappingProxyType(
        {"--api-key": "sparkrack (the deployment's key Secret, as VLLM_API_KEY)"}
    )
    images = IMAGES
    metrics = METRICS
    recorded = RECORDED
    allowed_options = ALLOWED_OPTIONS
    refused_options = REFUSED_OPTIONS
    metrics_path = "/metrics"  # served by default on the API port (no flag)
    single_rank_listeners = api_listeners(SERVER, metrics_path, gated=True)
    multi_rank_listeners = ACROSS_LISTENERS
    # vLLM keeps its torch.compile artefacts under VLLM_CACHE_ROOT (vllm/envs.py,
    # get_default_cache_root: ~/.cache/vllm).
    jit_caches = (
        JitCache("vllm", "VLLM_CACHE_ROOT", "~/.cache/vllm", "vllm/envs.py"),
        FLASHINFER_CACHE,
        TRITON_CACHE,
        INDUCTOR_CACHE,
    )

    def for_profile(self, data: Mapping[str, Any]) -> Engine:
        """A profile whose data x tensor x pipeline size exceeds one GPU runs across Sparks."""
        topo = section(data, "topology")
        tp, pp = topo.get("tp", 1), topo.get("pp", 1)
        dp = section(data, "vllm").get("data_parallel_size", 1)
        sizes = (tp, pp, dp)
        if all(isinstance(n, int) and n > 0 for n in sizes) and tp * pp * dp > 1:
            return VLLMAcrossSparks(tp * pp * dp, dp)
        return self

    def rule_list(self) -> list[Rule]:
        return [*super().rule_list(), *ACROSS_RULES]

    def plugin_files(self, profile: Profile) -> dict[str, str]:
        """File name in the model repo -> absolute path the server reads it from."""
        path = section(profile.data, "vllm").get("reasoning_parser_plugin")
        return {posixpath.basename(str(path)): str(path)} if path else {}

    def extras(self, profile: Profile, ctx: ServingContext) -> PodExtras:
        """An init container copies the plugin files of the model repo, via the HF cache, into a
        volume the server mounts at the plugin path."""
        wanted = self.plugin_files(profile)
        if not wanted:
            return PodExtras()
        # Runs after the fetch step's marker wait: the file is in the node's cache already.
        script = (
            "import shutil, sys\n"
            "from huggingface_hub import hf_hub_download\n"
            "repo, revision = sys.argv[1], sys.argv[2]\n"
            "for name in sys.argv[3:]:\n"
            "    shutil.copy(hf_hub_download(repo, name, revision=revision), '/plugins/' + name)\n"
            "    print('copied', repo, revision, name)\n"
        )
        # Offline, like the server: no HF token.
        fetch = hardened(
            {
                "name": "fetch-plugins",
                "image": profile.image,
                "imagePullPolicy": "IfNotPresent",
                "command": [
                    "python3",
                    "-c",
                    script,
                    profile.model,
                    profile.revision or "main",
                    *sorted(wanted),
                ],
                "env": [
                    {"name": "HF_HOME", "value": contract.HF_CACHE_MOUNT},
                    {"name": "HF_HUB_OFFLINE", "value": "1"},
                ],
                "volumeMounts": [
                    {"name": "hf-cache", "mountPath": contract.HF_CACHE_MOUNT, "readOnly": True},
                    {"name": PLUGIN_VOLUME, "mountPath": "/plugins"},
                ],
            }
        )
        mounts = [
            {"name": PLUGIN_VOLUME, "mountPath": path, "subPath": name, "readOnly": True}
            for name, path in sorted(wanted.items())
        ]
        return PodExtras([fetch], [{"name": PLUGIN_VOLUME, "emptyDir": {}}], mounts)

    def serving(self, data: Mapping[str, Any]) -> Serving:
        topo, vl = section(data, "topology"), section(data, "vllm")
        spec = section(vl, "speculative_config")
        tokens = spec.get("num_speculative_tokens")
        dp = integer(vl.get("data_parallel_size")) or 1
        memory = self.memory
        if dp > 1:
            memory = replace(memory, assumptions=(*memory.assumptions, data_parallel_memory(dp)))
        return Serving(
            memory=memory,
            tp=int(topo.get("tp", 1)),
            pp=int(topo.get("pp", 1)),
            ep=int(topo.get("ep", 1)),
            memory_fraction=number(vl.get("gpu_memory_utilization")),
            kv_cache_dtype=KV_DTYPE_PLANNER.get(str(vl.get("kv_cache_dtype", "auto")), "auto"),
            context_length=integer(vl.get("max_model_len")),
            max_running_requests=integer(vl.get("max_num_seqs")),
            speculative_draft_tokens=None if tokens is None else int(tokens) + 1,
            mamba_ssm_dtype=str(vl.get("mamba_ssm_cache_dtype", "float32")),
        )


# vLLM KV dtype names -> the planner's KV_BYTES keys (``auto`` = the model's BF16).
KV_DTYPE_PLANNER = {"fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}


class VLLMAcrossSparks(VLLM):
    """vLLM on 2-4 Sparks, one rank StatefulSet each, without Ray: rank 0 runs ``vllm serve``
    with the API server, ranks 1.. run ``--headless`` with their ``--node-rank``; all meet at the
    head's fabric address (``--master-addr``, the address plan's) on ``serving_dist_port``. The
    NCCL group, the fabric env, the GID resolver and the group restart are SGLang's.

    With ``vllm.data_parallel_size`` dp > 1 the Sparks are dp groups of tp x pp, in rank order:
    node rank r runs DP rank r // (tp x pp). The head's front-end reaches the engines of the
    other DP ranks at ``--data-parallel-address`` (the head's fabric address) and
    ``--data-parallel-rpc-port``; ranks 1.. carry their ``--data-parallel-start-rank``."""

    knobs = (*KNOBS, *ACROSS_KNOBS)
    uses_fabric = True
    # Ranks 1.. run --headless and serve no HTTP: the group guard (files()) fails when the head
    # it saw healthy stops answering, so the group restarts together, as SGLang's. It probes
    # the head with VLLM_API_KEY; the head's own probes go through the gate on the API port.
    group_guard = True
    reserved_flags = MappingProxyType(
        {
            **VLLM.reserved_flags,
            **ACROSS_RESERVED,
        }
    )

    def __init__(self, sparks: int | None = None, dp: int = 1) -> None:
        self.sparks = sparks
        self.dp = dp

    def listeners(self, ctx: ServingContext) -> tuple[Listener, ...]:
        """The multi-rank declaration; the data-parallel sockets only with dp > 1."""
        rows = super().listeners(ctx)
        return tuple(r for r in rows if not r.when or (r.when == DATA_PARALLEL and self.dp > 1))

    def for_profile(self, data: Mapping[str, Any]) -> Engine:
        return ENGINE.for_profile(data)

    def ranks(self, ctx: ServingContext) -> list[Rank]:
        """One rank per Spark, the head (rank 0) first: the deployment's Sparks, which must be
        as many as the profile's dp x tp x pp; a profile alone takes the inventory's first
        dp x tp x pp."""
        group = ctx.group()
        want = self.sparks or len(group)
        sizes = "dp·tp·pp" if self.dp > 1 else "tp·pp"
        if ctx.sparks and len(group) != want:
            raise SparkrackError(
                Problem(
                    "serving_deployments",
                    "sparks",
                    f"the deployment lists {len(group)} Sparks ({', '.join(ctx.sparks)}), but "
                    f"its profile's {sizes} runs {want} vLLM ranks (one GPU each)",
                    f"list {want} Sparks for the deployment, or set the profile's {sizes} to "
                    f"{len(group)}",
                    "vllm-across-ranks",
                )
            )
        clash = LaunchPlan(want, self.dp, ctx.head_address, ctx.dist_port).port_clash(ctx.api_port)
        if clash is not None:
            raise SparkrackError(clash)
        return [Rank(i, node) for i, node in enumerate(group[:want])]

    def plan(self, ctx: ServingContext) -> LaunchPlan:
        """The launch the deployment's ranks form (their flags and what vLLM builds of them)."""
        return LaunchPlan(len(self.ranks(ctx)), self.dp, ctx.head_address, ctx.dist_port)

    def runtime_value(self, knob: RuntimeKnob, ctx: ServingContext, rank: Rank) -> str | None:
        if knob.runtime in LaunchPlan.FLAGS:
            return self.plan(ctx).flag(knob.runtime, rank.rank)
        return super().runtime_value(knob, ctx, rank)

    def rank_facts(self, ctx: ServingContext, rank: Rank) -> dict[str, str]:
        return self.plan(ctx).facts(rank.rank)

    def runtime_switch(self, knob: RuntimeKnob, rank: Rank) -> bool:
        return knob.runtime != "headless" or rank.rank > 0

    def container_command(
        self, profile: Profile, argv: list[str], rank: Rank
    ) -> tuple[list[str], list[str]]:
        """The GID resolver sets ``NCCL_IB_GID_INDEX`` from the rank's sysfs, then execs
        ``vllm serve`` (vLLM reads its key from ``VLLM_API_KEY`` itself)."""
        resolver = ["python3", "-I", f"{contract.LAUNCHER_MOUNT}/{GID_FILE}", "--"]
        return [*resolver, *argv[: len(self.entry)]], argv[len(self.entry) :]

    def files(self, profile: Profile) -> list[FileSet]:
        """The GID resolver, the group guard and the head's gate."""
        shipped = {
            GID_FILE: Path(gidtable.__file__).read_text(encoding="utf-8"),
            contract.GUARD_FILE: scripts.text(contract.GUARD_FILE),
            **self.gate_files(),
        }
        return [FileSet("launcher", contract.LAUNCHER_MOUNT, shipped, 0o555)]

    def problems(self, c: Ctx) -> Iterator[Problem]:
        for rule in ACROSS_RULES:
            yield from rule.check(c)
        yield from Engine.problems(self, c)

    def rule_list(self) -> list[Rule]:
        return [*ACROSS_RULES, *RULES]


GID_FILE = Path(gidtable.__file__).name
"""The GID resolver in the launcher ConfigMap (run before ``vllm serve``)."""

ENGINE = VLLM()
ACROSS = VLLMAcrossSparks()
