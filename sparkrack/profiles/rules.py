"""Validation rules: topology arithmetic and every trap the seeds document, each with an id.

A rule returns :class:`Problem` s ``<file>: <key>: <message> — fix: <fix> [<rule-id>]``.
Scopes follow the seeds precisely, so every shipped seed recipe passes while the failing
variant each seed reports is refused:

* flashinfer_cutlass MoE at EP>1 crashed on Qwen3.5 (seed 003) but serves NemotronH at EP=4
  (seed 000 §6, seed 002): the rule exempts ``NemotronHForCausalLM``.
* flashinfer_cutlass MoE + flashinfer attention crashed GLM-4.7 at decode (seed 003) while the
  NemotronH recipes run exactly that pair (seeds 000, 002): same exemption.
* Piecewise CUDA graphs broke every NVFP4 GLM-4.7 row (seed 003) but were stable for Qwen3.5
  at EP=4 (seed 003 EP=4 matrix, test 3): the rule exempts ``Qwen3_5MoeForConditionalGeneration``.
* ``cuda_graph_max_bs`` vs ``max_running_requests`` is checked when both are set (seed 003's
  own recipes leave max_running_requests at its default).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sparkrack.errors import Problem
from sparkrack.profiles.images import ImageFacts, version_tuple
from sparkrack.profiles.profile import image_facts
from sparkrack.profiles.registry import SGLANG_RUNTIME_FLAGS, engine

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

# Measured mem_fraction_static floors: (model id, ep) -> (floor, seed).
MEM_FRACTION_FLOORS: dict[tuple[str, int], tuple[float, str]] = {
    ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4", 4): (0.88, "seed 002"),
}

# Environment the renderer owns; a profile's `env` may not set these.
OWNED_ENV = (
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "NCCL_DEBUG",
    "NCCL_NET",
    "NCCL_IB_DISABLE",
    "HF_TOKEN",
    "HF_HOME",
    "POD_FABRIC_IFNAME",
)


@dataclass(frozen=True)
class Ctx:
    data: dict[str, Any]
    source: str
    nodes: int | None
    image: ImageFacts | None

    def sg(self, key: str, default: Any = None) -> Any:
        return (self.data.get("sglang") or {}).get(key, default)

    def spec(self, key: str, default: Any = None) -> Any:
        return (self.data.get("speculative") or {}).get(key, default)

    def info(self, key: str, default: Any = None) -> Any:
        return (self.data.get("model_info") or {}).get(key, default)

    @property
    def arch(self) -> str:
        return str(self.info("architecture", ""))

    @property
    def tp(self) -> int:
        return int((self.data.get("topology") or {}).get("tp", 1))

    @property
    def pp(self) -> int:
        return int((self.data.get("topology") or {}).get("pp", 1))

    @property
    def ep(self) -> int:
        return int((self.data.get("topology") or {}).get("ep", 1))

    @property
    def nvfp4(self) -> bool:
        return self.sg("quantization") in NVFP4

    @property
    def moe(self) -> bool:
        return int((self.info("experts") or {}).get("routed", 0)) > 0

    @property
    def speculative(self) -> bool:
        return bool(self.spec("algorithm"))

    def attention_backends(self) -> set[str | None]:
        return {self.sg("attention_backend")}

    def p(self, key: str, message: str, fix: str, rule: str) -> Problem:
        return Problem(self.source, key, message, fix, rule)


@dataclass(frozen=True)
class Rule:
    id: str
    seed: str
    summary: str
    check: Callable[[Ctx], Iterator[Problem]]


RULES: list[Rule] = []


def rule(
    rule_id: str, seed: str, summary: str
) -> Callable[[Callable[[Ctx], Iterator[Problem]]], Callable[[Ctx], Iterator[Problem]]]:
    def deco(fn: Callable[[Ctx], Iterator[Problem]]) -> Callable[[Ctx], Iterator[Problem]]:
        RULES.append(Rule(rule_id, seed, summary, fn))
        return fn

    return deco


# --- topology ------------------------------------------------------------------------------


@rule(
    "topology-nodes",
    "seeds 000-003 (one SGLang process per Spark)",
    "tp·pp must equal the Sparks in the inventory",
)
def _nodes(c: Ctx) -> Iterator[Problem]:
    if (
        c.nodes is not None
        and c.tp * c.pp != c.nodes
        and c.data.get("engine", "sglang") == "sglang"
    ):
        yield c.p(
            "topology.tp",
            f"tp·pp = {c.tp}·{c.pp} = {c.tp * c.pp} ranks, but the inventory has {c.nodes} Sparks",
            f"set tp·pp to {c.nodes} (one rank per Spark) or change the 'sparks' group",
            "topology-nodes",
        )


@rule(
    "topology-ep-divides-tp", "SGLang ServerArgs (ep_size must divide tp_size)", "ep must divide tp"
)
def _ep(c: Ctx) -> Iterator[Problem]:
    if c.tp % c.ep:
        yield c.p(
            "topology.ep",
            f"ep={c.ep} does not divide tp={c.tp}",
            f"use an ep from {[d for d in range(1, c.tp + 1) if c.tp % d == 0]}",
            "topology-ep-divides-tp",
        )
    if c.ep > 1 and not c.moe:
        yield c.p(
            "topology.ep",
            f"ep={c.ep} on a model without routed experts",
            "set ep: 1 (expert parallelism needs an MoE model)",
            "topology-ep-divides-tp",
        )


@rule(
    "topology-tp-heads",
    "tensor parallelism shards attention heads",
    "tp must divide the attention heads",
)
def _heads(c: Ctx) -> Iterator[Problem]:
    heads = int(c.info("attention_heads", 0) or 0)
    if heads and heads % c.tp:
        yield c.p(
            "topology.tp",
            f"tp={c.tp} does not divide the {heads} attention heads of {c.arch}",
            f"use a tp that divides {heads}",
            "topology-tp-heads",
        )


@rule(
    "topology-kv-heads",
    "tensor parallelism shards or replicates KV heads",
    "KV heads must shard or replicate evenly over tp",
)
def _kv(c: Ctx) -> Iterator[Problem]:
    kv = int(c.info("kv_heads", 0) or 0)
    heads = int(c.info("attention_heads", 0) or 0)
    if kv and heads and heads % kv:
        yield c.p(
            "model_info.kv_heads",
            f"{heads} attention heads are not a multiple of {kv} KV heads",
            "copy num_attention_heads/num_key_value_heads from the model's config.json",
            "topology-kv-heads",
        )
    if kv and kv % c.tp and c.tp % kv:
        yield c.p(
            "topology.tp",
            f"tp={c.tp} neither divides nor is a multiple of the {kv} KV heads",
            "use a tp that divides the KV heads or is a multiple of them",
            "topology-kv-heads",
        )


# --- seed traps ----------------------------------------------------------------------------


@rule(
    "nemotronh-triton-attention",
    "seed 000 §5, seed 002",
    "triton attention is hard-asserted off on NemotronH",
)
def _nemotron_triton(c: Ctx) -> Iterator[Problem]:
    if c.arch == NEMOTRON_H and c.sg("attention_backend") == "triton":
        yield c.p(
            "sglang.attention_backend",
            "triton attention is asserted off for NemotronHForCausalLM (its first layer is Mamba, not attention)",
            "use attention_backend: flashinfer",
            "nemotronh-triton-attention",
        )


@rule(
    "nvfp4-latentmoe-triton-moe",
    "seed 000 §5, seed 002 trap 2",
    "triton MoE crashes cutlass_moe_fp4 on the NVFP4 LatentMoE path",
)
def _latent_triton(c: Ctx) -> Iterator[Problem]:
    latent = int((c.info("experts") or {}).get("latent_size", 0) or 0)
    if c.nvfp4 and latent and c.sg("moe_runner_backend") == "triton":
        yield c.p(
            "sglang.moe_runner_backend",
            "triton is ignored on the NVFP4 modelopt path; the LatentMoE shape trips "
            "'AssertionError: mismatch in expected n' in cutlass_moe_fp4",
            "use moe_runner_backend: flashinfer_cutlass",
            "nvfp4-latentmoe-triton-moe",
        )


@rule(
    "fp4-gemm-cudnn-missing",
    "seed 000 §5, seed 002",
    "flashinfer_cudnn FP4 GEMM needs cuDNN in the image",
)
def _cudnn(c: Ctx) -> Iterator[Problem]:
    if c.sg("fp4_gemm_backend") == "flashinfer_cudnn" and (
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


@rule("mem-fraction-ep-floor", "seed 002 trap 1", "mem_fraction_static below the measured EP floor")
def _floor(c: Ctx) -> Iterator[Problem]:
    floor = MEM_FRACTION_FLOORS.get((str(c.data.get("model")), c.ep))
    if floor is None:
        return
    value = c.sg("mem_fraction_static")
    if value is None or float(value) < floor[0]:
        yield c.p(
            "sglang.mem_fraction_static",
            f"{value if value is not None else 'unset'} is below the floor {floor[0]} measured at "
            f"EP={c.ep} ({floor[1]}: 'Not enough memory' at KV profiling; the KV pool goes negative)",
            f"raise it to at least {floor[0]} (higher = more KV; it is a post-weight reserve)",
            "mem-fraction-ep-floor",
        )


@rule(
    "nvfp4-piecewise-cuda-graph",
    "seed 003 (GLM-4.7: 0/12 piecewise rows stable)",
    "piecewise CUDA graphs break NVFP4 (fp4_quantize has no fake-tensor impl)",
)
def _piecewise(c: Ctx) -> Iterator[Problem]:
    if (
        c.nvfp4
        and not c.sg("disable_piecewise_cuda_graph", False)
        and not c.sg("disable_cuda_graph", False)
        and c.arch not in PIECEWISE_NVFP4_STABLE
    ):
        yield c.p(
            "sglang.disable_piecewise_cuda_graph",
            "piecewise CUDA graph capture is on for an NVFP4 model: torch.compile traces FlashInfer's "
            "fp4_quantize and fails with 'Cannot access data pointer of FakeTensor'",
            "set disable_piecewise_cuda_graph: true",
            "nvfp4-piecewise-cuda-graph",
        )


@rule(
    "cutlass-fp4-eager",
    "seed 003 EP=4 finding 1, seed 002",
    "eager mode collapses output on the cutlass_moe_fp4 path",
)
def _eager(c: Ctx) -> Iterator[Problem]:
    if c.nvfp4 and c.moe and c.sg("disable_cuda_graph", False):
        yield c.p(
            "sglang.disable_cuda_graph",
            "eager mode on an NVFP4 MoE (every runner falls through cutlass_moe_fp4): output "
            "collapses onto a single repeated token after warm-up",
            "set disable_cuda_graph: false",
            "cutlass-fp4-eager",
        )


@rule(
    "cuda-graph-bs-below-running",
    "seed 003 EP=4 recommended config",
    "batches above cuda_graph_max_bs run eager",
)
def _graph_bs(c: Ctx) -> Iterator[Problem]:
    bs, running = c.sg("cuda_graph_max_bs"), c.sg("max_running_requests")
    if bs is not None and running is not None and int(bs) < int(running):
        yield c.p(
            "sglang.cuda_graph_max_bs",
            f"{bs} < max_running_requests {running}: decode batches above {bs} fall back to eager "
            "mode (the garbage regime on cutlass_moe_fp4)",
            f"raise cuda_graph_max_bs to {running} or cap max_running_requests at {bs}",
            "cuda-graph-bs-below-running",
        )


@rule(
    "spec-draft-tokens",
    "seed 001 §3",
    "speculative_num_draft_tokens must be at least num_steps + 1",
)
def _draft(c: Ctx) -> Iterator[Problem]:
    steps, draft = c.spec("num_steps"), c.spec("num_draft_tokens")
    if steps is not None and draft is not None and int(draft) < int(steps) + 1:
        yield c.p(
            "speculative.num_draft_tokens",
            f"{draft} < num_steps + 1 = {int(steps) + 1} (autoadjust does not fire)",
            f"set num_draft_tokens: {int(steps) + 1}",
            "spec-draft-tokens",
        )


@rule(
    "gemma4-flashinfer-attention",
    "seed 001 §4",
    "FlashInfer prefill crashes on Gemma-4 head_dim 256",
)
def _gemma(c: Ctx) -> Iterator[Problem]:
    if c.arch.startswith("Gemma4") and int(c.info("head_dim", 0) or 0) >= 256:
        backend = c.sg("attention_backend")
        if backend in (None, "flashinfer"):
            yield c.p(
                "sglang.attention_backend",
                f"{backend or 'unset (SGLang may pick flashinfer)'} on Gemma-4 head_dim "
                f"{c.info('head_dim')}: 'FlashInfer Internal Error: Invalid configuration' at the first decode",
                "set attention_backend: triton",
                "gemma4-flashinfer-attention",
            )


@rule(
    "gemma4-assistant-drafter-image",
    "seed 001 §1",
    "the -assistant drafter needs SGLang PR #24436 in the image",
)
def _assistant(c: Ctx) -> Iterator[Problem]:
    draft = str(c.spec("draft_model_path", "") or "")
    if draft.endswith("-assistant") and (c.image is None or "#24436" not in c.image.extras):
        yield c.p(
            "speculative.draft_model_path",
            f"{draft} (Gemma4AssistantForCausalLM) needs SGLang PR #24436 (FROZEN_KV_MTP); without it the "
            "load fails with \"No module or parameter named 'model.language_model'\"",
            "use an image carrying #24436 (e.g. xomoxcc/dgx-spark-sglang:0.5.11-gemma4-sm121) or list "
            "it in image_info.extras",
            "gemma4-assistant-drafter-image",
        )


@rule(
    "qwen35-mtp-radix-mamba",
    "seed 003 MTP addendum; SGLang 0.5.10 server_args.py",
    "Qwen3.5 MTP + radix cache needs extra_buffer and spec v2",
)
def _qwen_mtp(c: Ctx) -> Iterator[Problem]:
    if c.arch not in QWEN35_MAMBA_PATH or not c.speculative or c.sg("disable_radix_cache", False):
        return
    if c.sg("mamba_scheduler_strategy") != "extra_buffer":
        yield c.p(
            "sglang.mamba_scheduler_strategy",
            f"{c.sg('mamba_scheduler_strategy') or 'unset (auto = no_buffer)'}: 'ValueError: Speculative "
            f"decoding for {c.arch} is not compatible with radix cache when using "
            "--mamba-scheduler-strategy no_buffer'",
            "set mamba_scheduler_strategy: extra_buffer and enable_spec_v2: true",
            "qwen35-mtp-radix-mamba",
        )
    elif not c.sg("enable_spec_v2", False) and (
        c.image is None or version_tuple(c.image.sglang) < (0, 5, 11)
    ):
        yield c.p(
            "sglang.enable_spec_v2",
            "extra_buffer + speculative decoding needs SGLANG_ENABLE_SPEC_V2=1 (off by default in "
            "SGLang 0.5.10)",
            "set enable_spec_v2: true",
            "qwen35-mtp-radix-mamba",
        )


@rule(
    "nemotronh-mtp-image",
    "seed 000 §1/§7",
    "NemotronH MTP needs the June-2026 MTP fixes in the image",
)
def _nemotron_mtp(c: Ctx) -> Iterator[Problem]:
    if c.arch != NEMOTRON_H or not c.speculative:
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


@rule(
    "ficutlass-moe-ep-sm121",
    "seed 003 EP=4 finding 2 (NemotronH exempt: seed 000 §6, seed 002)",
    "flashinfer_cutlass MoE at EP>1 hits an illegal instruction on SM121",
)
def _fi_ep(c: Ctx) -> Iterator[Problem]:
    if (
        c.sg("moe_runner_backend") == "flashinfer_cutlass"
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


@rule(
    "ficutlass-moe-fi-attention",
    "seed 003 GLM-4.7 finding 3 (NemotronH exempt: seeds 000, 002)",
    "flashinfer_cutlass MoE + flashinfer attention crashes at decode on SM121",
)
def _fi_fi(c: Ctx) -> Iterator[Problem]:
    if (
        c.sg("moe_runner_backend") == "flashinfer_cutlass"
        and c.sg("attention_backend") == "flashinfer"
        and c.arch not in FI_CUTLASS_MOE_OK
    ):
        yield c.p(
            "sglang.attention_backend",
            f"flashinfer attention with flashinfer_cutlass MoE on {c.arch}: cudaErrorIllegalInstruction at decode",
            "use attention_backend: triton with this MoE runner, or moe_runner_backend: cutlass",
            "ficutlass-moe-fi-attention",
        )


# --- profile hygiene -----------------------------------------------------------------------


@rule(
    "image-facts",
    "sparkrack (rules need the SGLang version and cuDNN state)",
    "unknown images must state their facts",
)
def _image(c: Ctx) -> Iterator[Problem]:
    if c.image is None and c.data.get("engine", "sglang") == "sglang":
        yield c.p(
            "image",
            f"{c.data.get('image')} is not in sparkrack/profiles/images.py",
            "add image_info: {sglang: <version>, cudnn: true|false}",
            "image-facts",
        )


@rule(
    "flag-unavailable",
    "SGLang server_args.py 0.5.10-0.5.13",
    "a key whose flag the image's SGLang lacks",
)
def _flags(c: Ctx) -> Iterator[Problem]:
    if c.image is None:
        return
    have = version_tuple(c.image.sglang)
    for knob in engine(str(c.data.get("engine", "sglang"))).knobs:
        section, _, name = knob.key.partition(".")
        block = c.data.get(section)
        if isinstance(block, dict) and name in block and version_tuple(knob.since) > have:
            yield c.p(
                knob.key,
                f"{knob.flag or knob.env} exists from SGLang {knob.since}; the image carries {c.image.sglang}",
                "remove the key or use a newer image",
                "flag-unavailable",
            )


@rule(
    "extra-args-owned",
    "sparkrack (one registry)",
    "extra_args may not repeat a flag the registry or the renderer owns",
)
def _extra(c: Ctx) -> Iterator[Problem]:
    spec = engine(str(c.data.get("engine", "sglang")))
    owned = {k.flag: k.key for k in spec.knobs if k.flag}
    for word in c.data.get("extra_args") or []:
        flag = str(word).split("=", 1)[0]
        if flag in owned:
            yield c.p(
                "extra_args",
                f"{flag} is the profile key {owned[flag]}",
                f"set {owned[flag]} instead of passing {flag}",
                "extra-args-owned",
            )
        elif flag in SGLANG_RUNTIME_FLAGS:
            yield c.p(
                "extra_args",
                f"{flag} is set by sparkrack from the inventory and address plan",
                "remove it",
                "extra-args-owned",
            )


@rule(
    "env-owned",
    "sparkrack (NCCL/secret env comes from the address plan and the Secret)",
    "env may not set variables sparkrack renders",
)
def _env(c: Ctx) -> Iterator[Problem]:
    spec = engine(str(c.data.get("engine", "sglang")))
    registry_env = {k.env: k.key for k in spec.knobs if k.env}
    for key in c.data.get("env") or {}:
        if key in OWNED_ENV:
            yield c.p(
                f"env.{key}",
                "is rendered by sparkrack (address plan, transport, HF token Secret)",
                "remove it; set fabric/transport in the inventory or profile",
                "env-owned",
            )
        elif key in registry_env:
            yield c.p(
                f"env.{key}",
                f"is the profile key {registry_env[key]}",
                f"set {registry_env[key]} instead",
                "env-owned",
            )


@rule(
    "patch-unknown",
    "sparkrack.patches.PATCH_IDS",
    "required patches must exist in the patch catalog",
)
def _patches(c: Ctx) -> Iterator[Problem]:
    wanted = [str(p) for p in c.data.get("patches") or []]
    if not wanted:
        return
    try:
        from sparkrack.patches import PATCH_IDS
    except ImportError:  # pragma: no cover - the patch engine ships with sparkrack
        yield c.p(
            "patches",
            "the patch engine (sparkrack.patches) is not installed",
            "reinstall sparkrack",
            "patch-unknown",
        )
        return
    for pid in wanted:
        if pid not in PATCH_IDS:
            yield c.p(
                "patches",
                f"{pid!r} is not a known patch",
                f"use one of: {', '.join(sorted(PATCH_IDS))}",
                "patch-unknown",
            )


def check(data: dict[str, Any], source: str, nodes: int | None) -> list[Problem]:
    ctx = Ctx(data=data, source=source, nodes=nodes, image=image_facts(data))
    problems: list[Problem] = []
    for r in RULES:
        problems.extend(r.check(ctx))
    return problems


def rule_table() -> list[tuple[str, str, str]]:
    return [(r.id, r.seed, r.summary) for r in RULES]
