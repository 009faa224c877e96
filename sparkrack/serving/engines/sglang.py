"""SGLang: one process per Spark of the deployment, one NCCL group over the fabric (src:super-mtp-post, src:gemma-mtp-post, src:ultra-post, src:roce-post).

This module and its knob table (:mod:`.sglang_table`: the profile keys and the deployment flags,
checked against the PyPI wheels 0.5.10-0.5.13, the releases the seeds' images carry) are
everything sparkrack knows about SGLang: the seed traps as rules, the Mamba-pool memory
semantics, the images the seeds ran, the metrics and log lines it reports, and the pod's launcher
(SM121 patches, then the server) and group-restart probes.

Rule scopes follow the seeds precisely, so every shipped recipe passes while the failing variant
each seed reports is refused:

* flashinfer_cutlass MoE at EP>1 crashed on Qwen3.5 (src:roce-post) but serves NemotronH at EP=4
  (src:super-mtp-post §6, src:ultra-post): the rule exempts ``NemotronHForCausalLM``.
* flashinfer_cutlass MoE + flashinfer attention crashed GLM-4.7 at decode (src:roce-post) while the
  NemotronH recipes run exactly that pair (src:super-mtp-post, src:ultra-post): same exemption.
* Piecewise CUDA graphs broke every NVFP4 GLM-4.7 row (src:roce-post) but were stable for Qwen3.5
  at EP=4 (src:roce-post EP=4 matrix, test 3): the rule exempts ``Qwen3_5MoeForConditionalGeneration``.
* ``cuda_graph_max_bs`` vs ``max_running_requests`` is checked when both are set (src:roce-post's
  own recipes leave max_running_requests at its default).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem
from sparkrack.fabric import gidtable
from sparkrack.patches import configmap_files, container_entrypoint
from sparkrack.planner.memory import RecurrentPool, Serving
from sparkrack.serving import scripts
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines.base import (
    CUTE_DSL_CACHE,
    DEEPGEMM_CACHE,
    FLASHINFER_CACHE,
    INDUCTOR_CACHE,
    TRITON_CACHE,
    Engine,
    FileSet,
    Rank,
    api_listeners,
    integer,
    number,
    section,
)
from sparkrack.serving.engines.extra_args import ArgClass
from sparkrack.serving.engines.listeners import (
    GLOO,
    NCCL_BOOTSTRAP,
    Bind,
    Listener,
    Peer,
    PortOf,
)
from sparkrack.serving.engines.sglang_table import IMAGES, KNOBS, METRICS, NAME, RECORDED
from sparkrack.serving.profile.images import version_tuple
from sparkrack.serving.profile.knobs import RuntimeKnob
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.profile.ruleset import Ctx, RuleSet

GID_FILE = Path(gidtable.__file__).name
"""The GID resolver in the launcher ConfigMap (run before the launcher)."""

ENTRY = ("python3", "-m", "sglang.launch_server")

NVFP4 = ("modelopt_fp4", "modelopt_mixed")
NEMOTRON_H = "NemotronHForCausalLM"
QWEN35_MAMBA_PATH = (
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3NextForCausalLM",
)
PIECEWISE_NVFP4_STABLE = ("Qwen3_5MoeForConditionalGeneration",)
FI_CUTLASS_MOE_OK = (NEMOTRON_H,)
NEMOTRONH_MTP_IMAGE_PRS = ("#21138", "#27998")
# Algorithms whose draft tree ServerArgs sizes from num_steps, eagle_topk and num_draft_tokens.
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")

# Measured mem_fraction_static floors: (model id, ep) -> (floor, seed).
MEM_FRACTION_FLOORS: dict[tuple[str, int], tuple[float, str]] = {
    ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4", 4): (0.88, "src:ultra-post"),
}


def _sg(c: Ctx, key: str, default: Any = None) -> Any:
    return c.block("sglang").get(key, default)


def _spec(c: Ctx, key: str, default: Any = None) -> Any:
    return c.block("speculative").get(key, default)


def _nvfp4(c: Ctx) -> bool:
    return _sg(c, "quantization") in NVFP4


def _speculative(c: Ctx) -> bool:
    return bool(_spec(c, "algorithm"))


RULES = RuleSet()


@RULES.add(
    "topology-nodes",
    "src:super-mtp-post, src:gemma-mtp-post, src:ultra-post, src:roce-post (one SGLang process per Spark)",
    "tp·pp must equal the Sparks in the inventory",
)
def _nodes(c: Ctx) -> Iterator[Problem]:
    if c.nodes is not None and c.tp * c.pp != c.nodes:
        yield c.p(
            "topology.tp",
            f"tp·pp = {c.tp}·{c.pp} = {c.tp * c.pp} ranks, but the inventory has {c.nodes} Sparks",
            f"set tp·pp to {c.nodes} (one rank per Spark) or change the 'sparks' group",
            "topology-nodes",
        )


# --- seed traps ----------------------------------------------------------------------------


LONG_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


@RULES.add(
    "sglang-context-beyond-model",
    "SGLang ModelConfig (a context_length beyond the config's max_position_embeddings is refused "
    f"unless {LONG_CONTEXT_ENV} is set); src:super-mtp-post §5 lifts the cap with the override",
    "context_length within the model's max_position_embeddings (or the cap lifted explicitly)",
)
def _context(c: Ctx) -> Iterator[Problem]:
    length = _sg(c, "context_length")
    override = (_sg(c, "json_model_override_args") or {}).get("max_position_embeddings")
    cap = override if isinstance(override, int) else c.info("max_position_embeddings")
    allowed = str((c.data.get("env") or {}).get(LONG_CONTEXT_ENV, "")) in ("1", "true", "True")
    if isinstance(length, int) and isinstance(cap, int) and length > cap and not allowed:
        source = "json_model_override_args" if isinstance(override, int) else "model_info"
        yield c.p(
            "sglang.context_length",
            f"{length} is beyond the model's max_position_embeddings {cap} ({source}): SGLang "
            "refuses it at start-up, after the weights are loaded",
            f"use at most {cap}, or lift the cap on purpose: sglang.json_model_override_args: "
            f"{{max_position_embeddings: {length}}} and env {LONG_CONTEXT_ENV}: '1' (src:super-mtp-post §5)",
            "sglang-context-beyond-model",
        )


@RULES.add(
    "nemotronh-triton-attention",
    "src:super-mtp-post §5, src:ultra-post",
    "triton attention is hard-asserted off on NemotronH",
)
def _nemotron_triton(c: Ctx) -> Iterator[Problem]:
    if c.arch == NEMOTRON_H and _sg(c, "attention_backend") == "triton":
        yield c.p(
            "sglang.attention_backend",
            "triton attention is asserted off for NemotronHForCausalLM (its first layer is Mamba, not attention)",
            "use attention_backend: flashinfer",
            "nemotronh-triton-attention",
        )


@RULES.add(
    "nvfp4-latentmoe-triton-moe",
    "src:super-mtp-post §5, src:ultra-post trap 2",
    "triton MoE crashes cutlass_moe_fp4 on the NVFP4 LatentMoE path",
)
def _latent_triton(c: Ctx) -> Iterator[Problem]:
    latent = int((c.info("experts") or {}).get("latent_size", 0) or 0)
    if _nvfp4(c) and latent and _sg(c, "moe_runner_backend") == "triton":
        yield c.p(
            "sglang.moe_runner_backend",
            "triton is ignored on the NVFP4 modelopt path; the LatentMoE shape trips "
            "'AssertionError: mismatch in expected n' in cutlass_moe_fp4",
            "use moe_runner_backend: flashinfer_cutlass",
            "nvfp4-latentmoe-triton-moe",
        )


@RULES.add(
    "fp4-gemm-cudnn-missing",
    "src:super-mtp-post §5, src:ultra-post",
    "flashinfer_cudnn FP4 GEMM needs cuDNN in the image",
)
def _cudnn(c: Ctx) -> Iterator[Problem]:
    if _sg(c, "fp4_gemm_backend") == "flashinfer_cudnn" and (
        c.image is None or c.image.cudnn is not True
    ):
        state = "unknown" if c.image is None or c.image.cudnn is None else "missing"
        yield c.p(
            "sglang.fp4_gemm_backend",
            f"flashinfer_cudnn on {c.data.get('image')} (cuDNN {state}): startup fails with "
            "'RuntimeError: cuDNN is not available'",
            "use fp4_gemm_backend: flashinfer_cutlass, or an image known to carry nvidia-cudnn-cu12",
            "fp4-gemm-cudnn-missing",
        )


@RULES.add(
    "mem-fraction-ep-floor",
    "src:ultra-post trap 1",
    "mem_fraction_static below the measured EP floor",
)
def _floor(c: Ctx) -> Iterator[Problem]:
    floor = MEM_FRACTION_FLOORS.get((str(c.data.get("model")), c.ep))
    if floor is None:
        return
    value = _sg(c, "mem_fraction_static")
    if value is None or float(value) < floor[0]:
        yield c.p(
            "sglang.mem_fraction_static",
            f"{value if value is not None else 'unset'} is below the floor {floor[0]} measured at "
            f"EP={c.ep} ({floor[1]}: 'Not enough memory' at KV profiling; the KV pool goes negative)",
            f"raise it to at least {floor[0]} (higher = more KV; it is a post-weight reserve)",
            "mem-fraction-ep-floor",
        )


@RULES.add(
    "nvfp4-piecewise-cuda-graph",
    "src:roce-post (GLM-4.7: 0/12 piecewise rows stable)",
    "piecewise CUDA graphs break NVFP4 (fp4_quantize has no fake-tensor impl)",
)
def _piecewise(c: Ctx) -> Iterator[Problem]:
    if (
        _nvfp4(c)
        and not _sg(c, "disable_piecewise_cuda_graph", False)
        and not _sg(c, "disable_cuda_graph", False)
        and c.arch not in PIECEWISE_NVFP4_STABLE
    ):
        yield c.p(
            "sglang.disable_piecewise_cuda_graph",
            "piecewise CUDA graph capture is on for an NVFP4 model: torch.compile traces FlashInfer's "
            "fp4_quantize and fails with 'Cannot access data pointer of FakeTensor'",
            "set disable_piecewise_cuda_graph: true",
            "nvfp4-piecewise-cuda-graph",
        )


@RULES.add(
    "cutlass-fp4-eager",
    "src:roce-post EP=4 finding 1, src:ultra-post",
    "eager mode collapses output on the cutlass_moe_fp4 path",
)
def _eager(c: Ctx) -> Iterator[Problem]:
    if _nvfp4(c) and c.moe and _sg(c, "disable_cuda_graph", False):
        yield c.p(
            "sglang.disable_cuda_graph",
            "eager mode on an NVFP4 MoE (every runner falls through cutlass_moe_fp4): output "
            "collapses onto a single repeated token after warm-up",
            "set disable_cuda_graph: false",
            "cutlass-fp4-eager",
        )


@RULES.add(
    "cuda-graph-bs-below-running",
    "src:roce-post EP=4 recommended config",
    "batches above cuda_graph_max_bs run eager",
)
def _graph_bs(c: Ctx) -> Iterator[Problem]:
    bs, running = _sg(c, "cuda_graph_max_bs"), _sg(c, "max_running_requests")
    if bs is not None and running is not None and int(bs) < int(running):
        yield c.p(
            "sglang.cuda_graph_max_bs",
            f"{bs} < max_running_requests {running}: decode batches above {bs} fall back to eager "
            "mode (the garbage regime on cutlass_moe_fp4)",
            f"raise cuda_graph_max_bs to {running} or cap max_running_requests at {bs}",
            "cuda-graph-bs-below-running",
        )


@RULES.add(
    "spec-draft-tokens",
    "src:gemma-mtp-post §3",
    "speculative_num_draft_tokens must be at least num_steps + 1",
)
def _draft(c: Ctx) -> Iterator[Problem]:
    steps, draft = _spec(c, "num_steps"), _spec(c, "num_draft_tokens")
    if steps is not None and draft is not None and int(draft) < int(steps) + 1:
        yield c.p(
            "speculative.num_draft_tokens",
            f"{draft} < num_steps + 1 = {int(steps) + 1} (autoadjust does not fire)",
            f"set num_draft_tokens: {int(steps) + 1}",
            "spec-draft-tokens",
        )


@RULES.add(
    "gemma4-flashinfer-attention",
    "src:gemma-mtp-post §4",
    "FlashInfer prefill crashes on Gemma-4 head_dim 256",
)
def _gemma(c: Ctx) -> Iterator[Problem]:
    if c.arch.startswith("Gemma4") and int(c.info("head_dim", 0) or 0) >= 256:
        backend = _sg(c, "attention_backend")
        if backend in (None, "flashinfer"):
            yield c.p(
                "sglang.attention_backend",
                f"{backend or 'unset (SGLang may pick flashinfer)'} on Gemma-4 head_dim "
                f"{c.info('head_dim')}: 'FlashInfer Internal Error: Invalid configuration' at the first decode",
                "set attention_backend: triton",
                "gemma4-flashinfer-attention",
            )


@RULES.add(
    "gemma4-assistant-drafter-image",
    "src:gemma-mtp-post §1",
    "the -assistant drafter needs SGLang PR #24436 in the image",
)
def _assistant(c: Ctx) -> Iterator[Problem]:
    draft = str(_spec(c, "draft_model_path", "") or "")
    if draft.endswith("-assistant") and (c.image is None or "#24436" not in c.image.extras):
        yield c.p(
            "speculative.draft_model_path",
            f"{draft} (Gemma4AssistantForCausalLM) needs SGLang PR #24436 (FROZEN_KV_MTP); without it the "
            "load fails with \"No module or parameter named 'model.language_model'\"",
            "use an image carrying #24436 (e.g. xomoxcc/dgx-spark-sglang:0.5.11-gemma4-sm121) or list "
            "it in image_info.extras",
            "gemma4-assistant-drafter-image",
        )


@RULES.add(
    "qwen35-mtp-radix-mamba",
    "src:roce-post MTP addendum; SGLang 0.5.10 server_args.py",
    "Qwen3.5 MTP + radix cache needs extra_buffer and spec v2",
)
def _qwen_mtp(c: Ctx) -> Iterator[Problem]:
    if (
        c.arch not in QWEN35_MAMBA_PATH
        or not _speculative(c)
        or _sg(c, "disable_radix_cache", False)
    ):
        return
    if _sg(c, "mamba_scheduler_strategy") != "extra_buffer":
        yield c.p(
            "sglang.mamba_scheduler_strategy",
            f"{_sg(c, 'mamba_scheduler_strategy') or 'unset (auto = no_buffer)'}: 'ValueError: Speculative "
            f"decoding for {c.arch} is not compatible with radix cache when using "
            "--mamba-scheduler-strategy no_buffer'",
            "set mamba_scheduler_strategy: extra_buffer and enable_spec_v2: true",
            "qwen35-mtp-radix-mamba",
        )
    elif not _sg(c, "enable_spec_v2", False) and (
        c.image is None or version_tuple(c.image.version) < (0, 5, 11)
    ):
        yield c.p(
            "sglang.enable_spec_v2",
            "extra_buffer + speculative decoding needs SGLANG_ENABLE_SPEC_V2=1 (off by default in "
            "SGLang 0.5.10)",
            "set enable_spec_v2: true",
            "qwen35-mtp-radix-mamba",
        )


@RULES.add(
    "nemotronh-mtp-image",
    "src:super-mtp-post §1/§7",
    "NemotronH MTP needs the June-2026 MTP fixes in the image",
)
def _nemotron_mtp(c: Ctx) -> Iterator[Problem]:
    if c.arch != NEMOTRON_H or not _speculative(c):
        return
    missing = [pr for pr in NEMOTRONH_MTP_IMAGE_PRS if c.image is None or pr not in c.image.extras]
    if missing:
        yield c.p(
            "speculative.algorithm",
            f"MTP on NemotronH with {c.data.get('image')}, which lacks {', '.join(missing)}: it boots "
            "but MTP no-ops (accept_len ≈ 1) or needs --disable-radix-cache",
            "use xomoxcc/dgx-spark-sglang:0.5.13-dev-nemotronh-mtp-sm121 (or list the PRs in "
            "image_info.extras), or drop the speculative block",
            "nemotronh-mtp-image",
        )


@RULES.add(
    "ficutlass-moe-ep-sm121",
    "src:roce-post EP=4 finding 2 (NemotronH exempt: src:super-mtp-post §6, src:ultra-post)",
    "flashinfer_cutlass MoE at EP>1 hits an illegal instruction on SM121",
)
def _fi_ep(c: Ctx) -> Iterator[Problem]:
    if (
        _sg(c, "moe_runner_backend") == "flashinfer_cutlass"
        and c.ep > 1
        and c.arch not in FI_CUTLASS_MOE_OK
    ):
        yield c.p(
            "sglang.moe_runner_backend",
            f"flashinfer_cutlass MoE at ep={c.ep} on {c.arch}: 'CUDA error: an illegal instruction' "
            "kills a random rank at n>=4 on SM121",
            "use moe_runner_backend: triton or cutlass at EP>1, or ep: 1",
            "ficutlass-moe-ep-sm121",
        )


@RULES.add(
    "ficutlass-moe-fi-attention",
    "src:roce-post GLM-4.7 finding 3 (NemotronH exempt: src:super-mtp-post, src:ultra-post)",
    "flashinfer_cutlass MoE + flashinfer attention crashes at decode on SM121",
)
def _fi_fi(c: Ctx) -> Iterator[Problem]:
    if (
        _sg(c, "moe_runner_backend") == "flashinfer_cutlass"
        and _sg(c, "attention_backend") == "flashinfer"
        and c.arch not in FI_CUTLASS_MOE_OK
    ):
        yield c.p(
            "sglang.attention_backend",
            f"flashinfer attention with flashinfer_cutlass MoE on {c.arch}: cudaErrorIllegalInstruction at decode",
            "use attention_backend: triton with this MoE runner, or moe_runner_backend: cutlass",
            "ficutlass-moe-fi-attention",
        )


@RULES.add(
    "image-facts",
    "sparkrack (rules need the SGLang version and cuDNN state)",
    "unknown images must state their facts",
)
def _image(c: Ctx) -> Iterator[Problem]:
    if c.image is None:
        yield c.p(
            "image",
            f"{c.data.get('image')} is not in sparkrack/serving/engines/sglang.py (IMAGES)",
            "add image_info: {sglang: <nearest upstream release>, cudnn: true|false}",
            "image-facts",
        )


@RULES.add(
    "flag-unavailable",
    "SGLang server_args.py 0.5.10-0.5.13",
    "a key whose flag the image's SGLang lacks",
)
def _flags(c: Ctx) -> Iterator[Problem]:
    if c.image is None:
        return
    have = version_tuple(c.image.version)
    for knob in KNOBS:
        section, _, name = knob.key.partition(".")
        block = c.data.get(section)
        if (
            knob.since
            and isinstance(block, dict)
            and name in block
            and version_tuple(knob.since) > have
        ):
            yield c.p(
                knob.key,
                f"{knob.flag or knob.env} exists from SGLang {knob.since}; the image carries {c.image.version}",
                "remove the key or use a newer image",
                "flag-unavailable",
            )


@RULES.add(
    "spec-eagle-topk",
    "SGLang ServerArgs._handle_speculative_decoding 0.5.10-0.5.15; src:super-mtp-post §2 passes top-k 1",
    "a speculative SGLang profile that sizes its draft names eagle_topk",
)
def _topk(c: Ctx) -> Iterator[Problem]:
    sized = _spec(c, "num_steps") is not None or _spec(c, "num_draft_tokens") is not None
    if _spec(c, "algorithm") in EAGLE_FAMILY and sized and _spec(c, "eagle_topk") is None:
        yield c.p(
            "speculative.eagle_topk",
            "unset while num_steps/num_draft_tokens are set: SGLang fills top-k in only when "
            "all three are unset, and its start-up check then fails with \"TypeError: '>' not "
            "supported between instances of 'NoneType' and 'int'\"",
            "set speculative.eagle_topk: 1 (the top-k the source posts' runs pass)",
            "spec-eagle-topk",
        )


# --- memory semantics ------------------------------------------------------------------------
# max_running_requests is clamped to max_mamba_cache_size // ratio. The ratio is 3 with the radix
# cache on (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO), 1 with it disabled, and grows by 2 slots
# per request when speculative decoding (or the extra_buffer strategy) needs the extra ping-pong /
# intermediate states: src:super-mtp-post measured 96 slots -> ~32 parallel without MTP, ~19 with MTP.
MAMBA_SLOTS_PER_REQUEST = 3
MAMBA_EXTRA_SLOTS_SPECULATIVE = 2
# ServerArgs.mamba_full_memory_ratio (0.9): without max_mamba_cache_size the Mamba pool gets
# ratio / (1 + ratio) of what is left after the weights.
MAMBA_FULL_MEMORY_RATIO = 0.9
DEFAULT_MEM_FRACTION = 0.9  # SGLang picks ~0.9 on large GPUs


def mamba_ratio(s: Serving) -> int:
    """Mamba pool slots one running request holds."""
    if s.disable_radix_cache:
        return 1
    extra = s.speculative_draft_tokens is not None or s.mamba_scheduler_strategy == "extra_buffer"
    return MAMBA_SLOTS_PER_REQUEST + (MAMBA_EXTRA_SLOTS_SPECULATIVE if extra else 0)


@dataclass(frozen=True)
class SGLangMemory:
    """``mem_fraction_static`` is a budget of the memory free at start-up that weights, KV and the
    Mamba pool share (not a vLLM-style fraction of the total)."""

    name: str = NAME
    fraction_key: str = "mem_fraction_static"
    pool_fix: str = "raise mem_fraction_static (SGLang: it is the budget weights AND KV share)"
    context_key: str | None = None
    assumptions: tuple[str, ...] = (
        "sglang: weights + KV + Mamba pool = mem_fraction_static x usable memory - runtime overhead",
        f"sglang Mamba slots per running request: {MAMBA_SLOTS_PER_REQUEST} (radix cache on), "
        f"+{MAMBA_EXTRA_SLOTS_SPECULATIVE} with speculative decoding or extra_buffer "
        "(src:super-mtp-post: 96 -> ~19 with MTP), 1 with the radix cache disabled",
    )

    def budget(
        self, fraction: float | None, usable: float, overhead: float, per_gpu: float, total: float
    ) -> tuple[float, float | None, float]:
        f = DEFAULT_MEM_FRACTION if fraction is None else fraction
        budget = f * usable - overhead
        return f, budget, budget - per_gpu

    def startup_refusal(self, fraction: float, usable: float, total: float) -> str | None:
        return None

    def recurrent(
        self, s: Serving, per_request: float, rest: float, notes: list[str]
    ) -> RecurrentPool:
        ratio = mamba_ratio(s)
        max_running = s.max_running_requests
        spec_state: float | None = None
        if s.speculative_draft_tokens is not None:
            # Intermediate states for max_running_requests x draft tokens.
            reqs = max_running
            if reqs is None:
                reqs = (s.max_mamba_cache_size or 0) // ratio
                notes.append(
                    "max_running_requests not set: speculative intermediate states counted "
                    + (f"for {reqs} requests" if reqs else "as 0 (set it to plan them)")
                )
            spec_state = per_request * reqs * s.speculative_draft_tokens
            rest -= spec_state
        if s.max_mamba_cache_size is not None:
            slots = s.max_mamba_cache_size
        elif s.disable_radix_cache and max_running is not None:
            slots = max_running
        else:
            share = max(rest, 0.0) * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)
            slots = int(share // per_request)
            notes.append(
                f"max_mamba_cache_size not set: SGLang auto-fits {slots} slots "
                f"(mamba_full_memory_ratio {MAMBA_FULL_MEMORY_RATIO})"
            )
        cap = slots // ratio
        max_running = cap if max_running is None else min(max_running, cap)
        return RecurrentPool(slots, slots * per_request, ratio, spec_state, max_running)


# The scheduler's decode log line, e.g. ``Decode batch. #running-req: 8, #token: 9120, token
# usage: 0.01, accept len: 2.71, accept rate: 0.57, cuda graph: True, gen throughput (token/s):
# 199.7, #queue-req: 0``; an idle batch (no running request) reports nothing.
LOG_ACCEPT_LEN = re.compile(r"accept len:\s*([0-9]+(?:\.[0-9]+)?)")
LOG_RUNNING = re.compile(r"#running-req:\s*(\d+)")


# --- listeners (SGLang 0.5.10-0.5.13, python/sglang/srt/...) ----------------------------------

SERVER = "entrypoints/http_server.py (launch_server: --host, --port)"
DIST_INIT = Listener(
    "dist-init (torch TCPStore)",
    "head",
    Bind.ALL,
    PortOf.DIST,
    (Peer.RANKS,),
    "model_executor/model_runner.py (init_torch_distributed: tcp://<--dist-init-addr>)",
    reach=Bind.FABRIC,
)
BROADCASTER = Listener(
    "message-queue broadcaster (ZeroMQ XPUB)",
    "head",
    Bind.FABRIC,
    PortOf.RANDOM,
    (Peer.RANKS,),
    "distributed/device_communicators/shm_broadcast.py (MessageQueue remote socket at "
    "get_local_ip_auto(); on by SGLANG_USE_MESSAGE_QUEUE_BROADCASTER)",
    chosen_by=("SGLANG_HOST_IP", "HOST_IP", "SGLANG_LOCAL_IP_NIC"),
    fallback=Bind.CLUSTER,
)
LOCAL_BROADCASTER = Listener(
    "message-queue broadcaster, local readers",
    "head",
    Bind.LOOPBACK,
    PortOf.RANDOM,
    (Peer.POD,),
    "distributed/device_communicators/shm_broadcast.py (MessageQueue local socket)",
)
MULTI_RANK = (
    *api_listeners(SERVER, "/metrics", gated=True),
    DIST_INIT,
    NCCL_BOOTSTRAP,
    GLOO,
    BROADCASTER,
)
SINGLE_RANK = (
    *api_listeners(SERVER, "/metrics", gated=True),
    Listener(
        DIST_INIT.name, "head", Bind.ALL, PortOf.DIST, (Peer.POD,), DIST_INIT.source, Bind.FABRIC
    ),
    LOCAL_BROADCASTER,
)


# --- extra_args (server_args.py 0.5.10-0.5.13, add_cli_args) ----------------------------------

ALLOWED_OPTIONS = MappingProxyType(
    {
        # logging of the server's own state (never of requests)
        "--log-level": True,
        "--log-level-http": True,
        "--decode-log-interval": True,
        "--show-time-cost": False,
        "--enable-cache-report": False,
        # scheduling and batching
        "--random-seed": True,
        "--max-prefill-tokens": True,
        "--max-total-tokens": True,
        "--max-queued-requests": True,
        "--schedule-policy": True,
        "--schedule-conservativeness": True,
        "--stream-interval": True,
        "--num-continuous-decode-steps": True,
        "--enable-mixed-chunk": False,
        "--disable-overlap-schedule": False,
        "--disable-custom-all-reduce": False,
        "--watchdog-timeout": True,
        "--skip-server-warmup": False,
        "--sleep-on-idle": False,
        "--enable-deterministic-inference": False,
    }
)
REFUSED_OPTIONS = MappingProxyType(
    {
        "--enable-custom-logit-processor": (
            ArgClass.CODE,
            "each request may then carry a dill-serialized logit processor that the server "
            "deserializes and runs",
        ),
        "--custom-weight-loader": (ArgClass.CODE, "imports the named Python functions"),
        "--tokenizer-path": (
            ArgClass.CODE,
            "loads the tokenizer, with the model's trust_remote_code, from a path or repo other "
            "than the model's",
        ),
        "--chat-template": (
            ArgClass.CODE,
            "renders prompts with a template from a path or repo other than the model's",
        ),
        "--completion-template": (
            ArgClass.CODE,
            "renders completions with a template from a path other than the model's",
        ),
        "--enable-lora": (ArgClass.CODE, "loads adapters named by requests or paths"),
        "--lora-paths": (ArgClass.CODE, "loads adapters from other paths or repos"),
        "--hicache-storage-backend-extra-config": (
            ArgClass.CODE,
            "configures a storage backend, which may name a module to import",
        ),
        "--otlp-traces-endpoint": (ArgClass.EGRESS, "sends traces to that host"),
        "--enable-trace": (ArgClass.EGRESS, "sends request traces to an OTLP endpoint"),
        "--tool-server": (ArgClass.EGRESS, "connects to tool servers"),
        "--log-requests": (ArgClass.PRIVACY, "logs every request's prompt and output"),
        "--log-requests-level": (ArgClass.PRIVACY, "sets how much of each request is logged"),
        "--enable-request-time-stats-logging": (ArgClass.PRIVACY, "logs per-request records"),
        "--crash-dump-folder": (
            ArgClass.PRIVACY,
            "writes the last requests (prompts included) to a folder on a crash",
        ),
        "--file-storage-path": (ArgClass.PATH, "writes files to a path sparkrack does not mount"),
        "--download-dir": (ArgClass.PATH, "downloads weights to another path"),
        "--export-metrics-to-file": (ArgClass.PRIVACY, "writes per-request metrics to files"),
    }
)


# --- the engine ------------------------------------------------------------------------------


class SGLang(Engine):
    name = NAME
    entry = ENTRY
    knobs = KNOBS
    sections = ("sglang", "speculative")
    rules = RULES
    memory = SGLangMemory()
    uses_fabric = True
    # /server_info and /get_server_info answer dataclasses.asdict(server_args), both keys
    # included, to the engine key (NORMAL level); /load_lora_adapter_from_tensors unpickles its
    # body for the engine key too; and without --admin-api-key the engine key opens every
    # ADMIN_OPTIONAL route (utils/auth.py, entrypoints/http_server.py, 0.5.10-0.5.13). Only the
    # gate's allow-list keeps them from the gateway, the watchdog and the ranks.
    gated = True
    # The head's liveness asks for a generated token, not only a live HTTP server.
    liveness_path = "/health_generate"
    # Workers serve no HTTP: the group guard (launcher_files()) fails when the head restarted,
    # so the whole group restarts together. It probes the head with the engine key only.
    group_guard = True
    upstream = NAME
    jit_caches = (FLASHINFER_CACHE, TRITON_CACHE, INDUCTOR_CACHE, CUTE_DSL_CACHE, DEEPGEMM_CACHE)
    images = IMAGES
    metrics = METRICS
    recorded = RECORDED
    # --api-key guards every route but /health* and /metrics* (sglang/srt/utils/auth.py,
    # decide_request_auth, 0.5.10-0.5.13); --admin-api-key alone opens the admin routes
    # (update_weights_from_*, flush_cache, ...: ADMIN_OPTIONAL), which then refuse the engine key.
    key_env = MappingProxyType(
        {
            contract.ENGINE_KEY_ENV: contract.ENGINE_KEY_KEY,
            contract.ADMIN_KEY_ENV: contract.ADMIN_KEY_KEY,
        }
    )
    client_key_env = contract.ENGINE_KEY_ENV
    # SGLang reads its keys from argv only (ServerArgs.api_key/admin_api_key; no variable). The
    # launcher hands them over inside the server's interpreter (KEY_BOOTSTRAP): Kubernetes would
    # expand $(VAR) in args into /proc/<pid>/cmdline, which every user of the Spark can read.
    key_flags = MappingProxyType(
        {contract.ENGINE_KEY_ENV: "--api-key", contract.ADMIN_KEY_ENV: "--admin-api-key"}
    )
    reserved_flags = MappingProxyType(
        {
            "--api-key": "sparkrack (the deployment's key Secret, handed over by the launcher)",
            "--admin-api-key": "sparkrack (the deployment's key Secret, head rank only)",
        }
    )
    multi_rank_listeners = MULTI_RANK
    single_rank_listeners = SINGLE_RANK
    allowed_options = ALLOWED_OPTIONS
    refused_options = REFUSED_OPTIONS
    # sglang/srt/model_executor/model_runner.py, 0.5.10-0.5.13: the module constant
    # UNBALANCED_MODEL_LOADING_TIMEOUT_S = 480 bounds dist.monitored_barrier after the weights
    # load ("TP rank X could finish the model loading, but there are other ranks that didn't
    # finish loading"); no release of these reads a variable for it (environ.py has none).
    loading_barrier_s = 480.0
    loading_barrier_env = None

    def log_accept_length(self, line: str) -> float | None:
        """The ``accept len`` of one decode-batch log line (None for idle or other lines)."""
        match = LOG_ACCEPT_LEN.search(line)
        if not match:
            return None
        running = LOG_RUNNING.search(line)
        if running and int(running.group(1)) == 0:
            return None
        return float(match.group(1))

    def ranks(self, ctx: ServingContext) -> list[Rank]:
        """One process per Spark of the deployment, the head (rank 0) first."""
        return [Rank(i, node) for i, node in enumerate(ctx.group())]

    def runtime_value(self, knob: RuntimeKnob, ctx: ServingContext, rank: Rank) -> str | None:
        if knob.runtime == "nnodes":
            return str(len(self.ranks(ctx)))
        if knob.runtime == "node_rank":
            return str(rank.rank)
        if knob.runtime == "dist_init_addr":
            return f"{ctx.head_address}:{ctx.dist_port}"
        return super().runtime_value(knob, ctx, rank)

    def rank_key_env(self, rank: int) -> dict[str, str]:
        """The head holds both keys; a worker serves no HTTP and holds the engine key only (its
        group guard probes the head with it), never the admin key."""
        keys = dict(self.key_env)
        if rank > 0:
            keys.pop(contract.ADMIN_KEY_ENV, None)
        return keys

    def container_command(
        self, profile: Profile, argv: list[str], rank: Rank
    ) -> tuple[list[str], list[str]]:
        """The GID resolver sets ``NCCL_IB_GID_INDEX`` from the rank's sysfs, then execs the
        launcher, which applies the profile's SM121 patches, execs the server argv and hands it
        the rank's keys in its interpreter (``--key-env``)."""
        resolver = ["python3", "-I", f"{contract.LAUNCHER_MOUNT}/{GID_FILE}", "--"]
        launcher = list(container_entrypoint(profile.patches, profile.architecture))
        keys = [f"{var}={self.key_flags[var]}" for var in self.rank_key_env(rank.rank)]
        # container_entrypoint ends in the "--" before the server argv: the keys go before it.
        keyed = [*launcher[:-1], *(w for k in keys for w in ("--key-env", k)), launcher[-1]]
        return [*resolver, *keyed], argv

    def files(self, profile: Profile) -> list[FileSet]:
        return [FileSet("launcher", contract.LAUNCHER_MOUNT, launcher_files(), 0o555)]

    def serving(self, data: Mapping[str, Any]) -> Serving:
        topo, sg, spec = (
            section(data, "topology"),
            section(data, "sglang"),
            section(data, "speculative"),
        )
        draft = spec.get("num_draft_tokens") if spec.get("algorithm") else None
        return Serving(
            memory=self.memory,
            tp=int(topo.get("tp", 1)),
            pp=int(topo.get("pp", 1)),
            ep=int(topo.get("ep", 1)),
            memory_fraction=number(sg.get("mem_fraction_static")),
            kv_cache_dtype=str(sg.get("kv_cache_dtype", "auto")),
            context_length=integer(sg.get("context_length")),
            max_running_requests=integer(sg.get("max_running_requests")),
            max_mamba_cache_size=integer(sg.get("max_mamba_cache_size")),
            speculative_draft_tokens=integer(draft),
            disable_radix_cache=bool(sg.get("disable_radix_cache", False)),
            mamba_scheduler_strategy=sg.get("mamba_scheduler_strategy"),
            mamba_ssm_dtype=str(sg.get("mamba_ssm_dtype", "float32")),
        )


def launcher_files() -> dict[str, str]:
    """The launcher ConfigMap: the patch engine + launcher, the group guard, the smoke client,
    the head's gate and the GID resolver."""
    files = dict(configmap_files())
    shipped = {
        name: scripts.text(name)
        for name in (contract.GUARD_FILE, contract.SMOKE_FILE, contract.GATE_FILE)
    }
    shipped[GID_FILE] = Path(gidtable.__file__).read_text(encoding="utf-8")
    for name, text in shipped.items():
        if name in files:  # pragma: no cover - the patch engine must not ship these names
            raise ValueError(f"{name} is already in sparkrack.patches.configmap_files()")
        files[name] = text
    return files


ENGINE = SGLang()
