"""Capacity and roofline planner: will a serving profile fit on GB10 Sparks, and how fast can it be?

Pure functions over a profile's ``model_info`` and its topology/serving knobs:

* weights per GPU from parameter classes (``model_info.weights``: params × bytes per parameter of
  the class's dtype, split over the TP×PP ranks unless the class is replicated);
* the KV-cache pool the engine will carve out at the profile's memory fraction and KV dtype —
  modelled on each engine's own rule (SGLang's ``mem_fraction_static`` is a budget of the memory
  free at start-up that weights, KV and the Mamba pool share); each engine module owns its rule
  as a :class:`MemoryModel`;
* the Mamba (recurrent-state) pool and the ``max_running_requests`` it allows;
* whether everything fits in the Spark's 128 GB of unified memory with headroom for the OS;
* a decode roofline: memory bandwidth / bytes read per decoded token — an upper bound that
  ``bench`` can quote as "x % of the physical limit".

Every number the planner does not read from the profile is a named constant below and is listed
by :meth:`CapacityPlan.assumptions`; ``sparkrack plan`` prints them with the table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sparkrack.errors import Problem

GB = 1_000_000_000

# --- hardware (NVIDIA DGX Spark / GB10; src:super-guide: "128 GB of unified memory") ---------------
GB10_MEMORY_GB = 128.0
# LPDDR5x bandwidth of one GB10 (NVIDIA's DGX Spark specification: 273 GB/s).
GB10_BANDWIDTH_GBPS = 273.0
# Unified memory: the OS, K3s/containerd and the server's own CPU side live in the same 128 GB.
DEFAULT_OS_HEADROOM_GB = 8.0
# CUDA context, NCCL communicators and torch workspace allocated before the KV pool is sized.
DEFAULT_RUNTIME_OVERHEAD_GB = 3.0

# --- bytes per parameter of each weight dtype ------------------------------------------------
# NVFP4: 4-bit E2M1 values plus one FP8 (E4M3) scale per 16 values = 0.5 + 1/16 byte.
# MXFP4: 4-bit values plus one E8M0 scale per 32 values. Per-tensor scales are ignored.
WEIGHT_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "nvfp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
    "int4": 0.5,
}

# --- KV-cache element size per engine dtype name (``auto`` = the model's BF16) ----------------
KV_BYTES: dict[str, float] = {
    "auto": 2.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    # FP4 KV: half a byte per element plus one FP8 scale per 16 elements (SGLang's fp4_e2m1).
    "fp4_e2m1": 0.5 + 1 / 16,
}

# --- recurrent (Mamba / linear-attention) state -----------------------------------------------
# SGLang keeps the conv state in BF16 and the SSM state in SGLANG_MAMBA_SSM_DTYPE (float32 default).
STATE_BYTES: dict[str, float] = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
CONV_STATE_BYTES = 2.0
RULE_WEIGHTS = "plan-weights-exceed-memory"
RULE_POOL = "plan-no-kv-pool"
RULE_CONTEXT = "plan-context-exceeds-kv"
RULE_STARTUP = "plan-fraction-exceeds-free"


@dataclass(frozen=True)
class WeightClass:
    """One class of parameters stored in one dtype (e.g. routed experts in NVFP4)."""

    name: str
    params_b: float
    dtype: str
    # Share of the class read per decoded token (routed experts: top_k / n_experts; an input
    # embedding table: ~0, one row). 1.0 = every parameter is read for every token.
    active_fraction: float = 1.0
    # Held in full by every rank instead of being split over TP×PP.
    replicated: bool = False
    # Loaded only when speculative decoding is on (a built-in MTP/NextN layer).
    draft_only: bool = False
    # The profile's model_info.bytes_per_param for this dtype, else WEIGHT_BYTES.
    bytes_per_param: float | None = None

    @property
    def bytes(self) -> float:
        per = self.bytes_per_param if self.bytes_per_param is not None else WEIGHT_BYTES[self.dtype]
        return self.params_b * 1e9 * per


@dataclass(frozen=True)
class RecurrentState:
    """Per-layer recurrent state of Mamba2 / Gated-DeltaNet layers (SGLang's mamba2_cache_params).

    conv state: ``conv_dim / tp × (conv_kernel - 1)`` BF16 elements;
    SSM state: ``heads / tp × head_dim × state_size`` elements of the SSM dtype.
    """

    layers: int
    conv_dim: int
    conv_kernel: int
    heads: int
    head_dim: int
    state_size: int

    def bytes_per_request(self, tp: int, ssm_dtype: str) -> float:
        conv = self.conv_dim / tp * (self.conv_kernel - 1) * CONV_STATE_BYTES
        ssm = self.heads / tp * self.head_dim * self.state_size * STATE_BYTES[ssm_dtype]
        return (conv + ssm) * self.layers


@dataclass(frozen=True)
class ModelInfo:
    sliding_attention_layers: int
    quantization: str | None
    params_total_b: float | None
    params_active_b: float | None
    weights: tuple[WeightClass, ...]
    weights_gb: float | None
    attention_layers: int | None
    kv_heads: int | None
    head_dim: int | None
    v_head_dim: int | None
    recurrent: RecurrentState | None

    @property
    def has_kv(self) -> bool:
        return None not in (self.attention_layers, self.kv_heads, self.head_dim)


@dataclass(frozen=True)
class Serving:
    """The topology and engine knobs the planner needs, whatever engine the profile uses."""

    memory: MemoryModel
    """The engine's memory semantics (its module in sparkrack/serving/engines/ owns them)."""
    tp: int = 1
    pp: int = 1
    ep: int = 1
    # sglang: mem_fraction_static; vllm: gpu_memory_utilization; trtllm: free_gpu_memory_fraction.
    memory_fraction: float | None = None
    kv_cache_dtype: str = "auto"
    context_length: int | None = None
    max_running_requests: int | None = None
    max_mamba_cache_size: int | None = None
    # Draft tokens verified per step when speculative decoding is on, else None.
    speculative_draft_tokens: int | None = None
    disable_radix_cache: bool = False
    mamba_scheduler_strategy: str | None = None
    mamba_ssm_dtype: str = "float32"

    @property
    def engine(self) -> str:
        return self.memory.name


@dataclass(frozen=True)
class RecurrentPool:
    """What an engine carves out for recurrent (Mamba) state, and the concurrency it allows."""

    slots: int
    pool_bytes: float
    slots_per_request: int
    spec_state_bytes: float | None
    max_running: int | None


class MemoryModel(Protocol):
    """How one engine turns its memory fraction into a KV pool and a recurrent-state pool."""

    @property
    def name(self) -> str: ...

    @property
    def fraction_key(self) -> str:
        """The profile key of the memory fraction, as refusals name it."""
        ...

    @property
    def pool_fix(self) -> str:
        """How to fix "no memory left for the KV cache" on this engine."""
        ...

    @property
    def context_key(self) -> str | None:
        """The context-length key when the engine refuses to start unless one full-length
        sequence fits the KV pool; None when it starts anyway."""
        ...

    @property
    def assumptions(self) -> tuple[str, ...]: ...

    def budget(
        self, fraction: float | None, usable: float, overhead: float, per_gpu: float, total: float
    ) -> tuple[float, float | None, float]:
        """(fraction in force, static budget or None, bytes left for KV + state) per GPU;
        ``usable`` is ``total`` less the OS headroom."""
        ...

    def startup_refusal(self, fraction: float, usable: float, total: float) -> str | None:
        """Why the engine refuses to start with ``fraction`` on a Spark, None when it starts."""
        ...

    def recurrent(
        self, s: Serving, per_request: float, rest: float, notes: list[str]
    ) -> RecurrentPool: ...


def per_sequence_pool(s: Serving, per_request: float, default_sequences: int) -> RecurrentPool:
    """One recurrent state per running sequence (vLLM, TensorRT-LLM)."""
    seqs = s.max_running_requests if s.max_running_requests is not None else default_sequences
    return RecurrentPool(seqs, seqs * per_request, 1, None, s.max_running_requests)


@dataclass(frozen=True)
class Hardware:
    memory_gb: float = GB10_MEMORY_GB
    bandwidth_gbps: float = GB10_BANDWIDTH_GBPS
    os_headroom_gb: float = DEFAULT_OS_HEADROOM_GB
    runtime_overhead_gb: float = DEFAULT_RUNTIME_OVERHEAD_GB

    @property
    def usable_gb(self) -> float:
        return self.memory_gb - self.os_headroom_gb


@dataclass(frozen=True)
class CapacityPlan:
    name: str
    engine: str
    tp: int
    pp: int
    ep: int
    hardware: Hardware
    engine_assumptions: tuple[str, ...]
    weights_total_gb: float
    weights_per_gpu_gb: float
    active_bytes_per_token_gb: float
    memory_fraction: float | None
    static_budget_gb: float | None
    kv_pool_gb: float
    kv_bytes_per_token: float | None  # per GPU, one token of context
    kv_tokens: int | None
    context_length: int | None
    mamba_bytes_per_request: float | None  # per GPU
    mamba_slots: int | None
    mamba_pool_gb: float | None
    mamba_slots_per_request: int | None
    spec_state_gb: float | None
    max_running_requests: int | None
    notes: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = field(default=())

    @property
    def used_per_gpu_gb(self) -> float:
        used = self.weights_per_gpu_gb + self.hardware.runtime_overhead_gb
        for part in (self.kv_pool_gb, self.mamba_pool_gb, self.spec_state_gb):
            used += max(part or 0.0, 0.0)
        return used

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def bandwidth_gbps(self) -> float:
        """Bandwidth one decode step can draw on: TP ranks read in parallel, PP stages in turn."""
        return self.hardware.bandwidth_gbps * self.tp

    def bytes_per_token_gb(self, context_tokens: int = 0) -> float:
        """Bytes read from memory (all ranks) to decode one token with ``context_tokens`` of KV."""
        kv = (self.kv_bytes_per_token or 0.0) * self.tp * self.pp * context_tokens
        state = (self.mamba_bytes_per_request or 0.0) * self.tp * self.pp
        return self.active_bytes_per_token_gb + (kv + state) / GB

    def roofline_tokens_per_s(self, context_tokens: int = 0) -> float:
        """Upper bound on single-stream decode tokens/s (per decode step, no speculation)."""
        return self.bandwidth_gbps / self.bytes_per_token_gb(context_tokens)

    def percent_of_limit(self, measured_tokens_per_s: float, context_tokens: int = 0) -> float:
        return 100.0 * measured_tokens_per_s / self.roofline_tokens_per_s(context_tokens)

    def assumptions(self) -> list[str]:
        hw = self.hardware
        lines = [
            f"GB10: {hw.memory_gb:g} GB unified memory, {hw.bandwidth_gbps:g} GB/s per Spark; "
            f"{hw.os_headroom_gb:g} GB kept for OS/K3s/host processes -> {hw.usable_gb:g} GB usable",
            f"runtime overhead before the KV pool is sized (CUDA context, NCCL, workspace): "
            f"{hw.runtime_overhead_gb:g} GB per GPU; EP dispatch buffers are NOT modelled",
            "weight bytes/param: nvfp4 0.5625 (4-bit + FP8 scale per 16), fp8 1, bf16 2; "
            "per-tensor scales ignored",
            "every weight class is split evenly over TP x PP ranks (experts: EP splits experts, "
            "TP/EP splits each one -> 1/TP per rank either way) unless marked replicated",
            "KV per token per GPU = attention layers/PP x max(1, kv_heads // TP) x "
            "(head_dim + v_head_dim) x KV dtype bytes",
            *self.engine_assumptions,
            "roofline: bandwidth x TP ranks / (active weight bytes + KV of the context + "
            "recurrent state) per decode step of the target model (draft/MTP layers excluded); "
            "nothing subtracted (no NCCL, no kernel efficiency) — an upper bound; speculative "
            "decoding multiplies it by accept_len",
        ]
        return lines


# ------------------------------------------------------------------ parsing profile data


def _num(value: Any, default: float | None = None) -> float | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def model_info_from_dict(data: Mapping[str, Any]) -> ModelInfo:
    """Read a profile's ``model_info`` block (model_profiles/schema.json).

    Uses the profiles' own keys (``kv_heads``, ``head_dim``, ``layers.attention``,
    ``layers.mamba``/``layers.linear_attention``, ``params``, ``mamba``, ``bytes_per_param``,
    ``weights_gb``) plus the planner's ``weight_classes`` and ``mamba.conv_dim``.
    """
    overrides = data.get("bytes_per_param") or {}
    weights = tuple(
        WeightClass(
            name=str(w["name"]),
            params_b=float(w["params_b"]),
            dtype=str(w["dtype"]),
            active_fraction=float(w.get("active_fraction", 1.0)),
            replicated=bool(w.get("replicated", False)),
            draft_only=bool(w.get("draft_only", False)),
            bytes_per_param=_num(overrides.get(str(w["dtype"]))),
        )
        for w in data.get("weight_classes") or []
    )
    layers = data.get("layers") or {}
    params = data.get("params") or {}
    mamba = data.get("mamba") or {}
    recurrent_layers = int(layers.get("mamba", 0)) + int(layers.get("linear_attention", 0))
    recurrent: RecurrentState | None = None
    if recurrent_layers and {"num_heads", "head_dim", "state_size"} <= set(mamba):
        heads, head_dim, state = (int(mamba[k]) for k in ("num_heads", "head_dim", "state_size"))
        # Mamba2: conv over x, B and C = heads*head_dim + 2*n_groups*state (SGLang's conv_dim);
        # Gated DeltaNet states its own conv_dim (q, k and v channels).
        conv_dim = int(
            mamba.get("conv_dim", heads * head_dim + 2 * int(mamba.get("n_groups", 1)) * state)
        )
        recurrent = RecurrentState(
            layers=recurrent_layers,
            conv_dim=conv_dim,
            conv_kernel=int(mamba.get("conv_kernel", 4)),
            heads=heads,
            head_dim=head_dim,
            state_size=state,
        )
    return ModelInfo(
        sliding_attention_layers=int(layers.get("sliding_attention", 0)),
        quantization=None if data.get("quantization") is None else str(data["quantization"]),
        params_total_b=_num(params.get("total_b")),
        params_active_b=_num(params.get("active_b")),
        weights=weights,
        weights_gb=_num(data.get("weights_gb")),
        attention_layers=_int(layers.get("attention")),
        kv_heads=_int(data.get("kv_heads")),
        head_dim=_int(data.get("head_dim")),
        v_head_dim=None,
        recurrent=recurrent,
    )


# ------------------------------------------------------------------ the computation


def _weights(model: ModelInfo, notes: list[str]) -> tuple[float, float, float]:
    """(total bytes, replicated bytes, active bytes per token) from the weight classes."""
    if model.weights:
        total = sum(w.bytes for w in model.weights)
        replicated = sum(w.bytes for w in model.weights if w.replicated)
        # The bound is the target model's decode step: draft (MTP) layers are part of what
        # speculative decoding spends to multiply it by accept_len, not of the step itself.
        active = sum(w.bytes * w.active_fraction for w in model.weights if not w.draft_only)
        return total, replicated, active
    if model.weights_gb is not None and model.params_total_b:
        notes.append(
            "no model_info.weight_classes: weights = weights_gb (checkpoint size), read per "
            "token in proportion params.active_b / params.total_b"
        )
        active_b = model.params_active_b or model.params_total_b
        total = model.weights_gb * GB
        return total, 0.0, total * active_b / model.params_total_b
    if model.params_total_b is None:
        raise ValueError("model_info needs weight_classes, weights_gb or params.total_b")
    dtype = lowest_dtype(model.quantization)
    notes.append(
        f"no model_info.weight_classes or weights_gb: every parameter counted at {dtype} "
        f"(quantization {model.quantization!r}) — a lower bound for mixed checkpoints"
    )
    per = WEIGHT_BYTES[dtype]
    active_b = model.params_active_b if model.params_active_b is not None else model.params_total_b
    return model.params_total_b * 1e9 * per, 0.0, active_b * 1e9 * per


def lowest_dtype(quantization: str | None) -> str:
    """The smallest weight dtype a ``model_info.quantization`` label allows (nvfp4-mixed -> nvfp4)."""
    label = (quantization or "bf16").lower()
    return next((d for d in ("nvfp4", "mxfp4", "int4", "fp8") if d in label), "bf16")


def _kv_bytes_per_token(model: ModelInfo, s: Serving) -> float | None:
    if not model.has_kv:
        return None
    assert model.attention_layers is not None and model.kv_heads is not None
    assert model.head_dim is not None
    if s.kv_cache_dtype not in KV_BYTES:
        raise ValueError(f"unknown KV cache dtype {s.kv_cache_dtype!r}")
    heads = max(1, model.kv_heads // s.tp)
    v_dim = model.v_head_dim if model.v_head_dim is not None else model.head_dim
    layers = math.ceil(model.attention_layers / s.pp)
    return layers * heads * (model.head_dim + v_dim) * KV_BYTES[s.kv_cache_dtype]


def _weights_problem(
    total: float,
    replicated: float,
    per_gpu: float,
    s: Serving,
    hw: Hardware,
    source: str,
    nodes: int | None,
) -> Problem:
    """The weights do not fit one GPU at this topology: the overhead shown, and the smallest
    tp·pp that fits as the value to set (the inventory blamed when it has too few Sparks)."""
    usable, overhead = hw.usable_gb * GB, hw.runtime_overhead_gb * GB
    room = usable - overhead - replicated
    needed = math.ceil((total - replicated) / room) if room > 0 else None
    message = (
        f"weights need {per_gpu / GB:.1f} GB per GPU at tp={s.tp} pp={s.pp}, plus "
        f"{hw.runtime_overhead_gb:g} GB of runtime overhead: {(per_gpu + overhead) / GB:.1f} GB, "
        f"more than the {hw.usable_gb:g} GB a Spark can give after {hw.os_headroom_gb:g} GB of "
        "OS headroom"
    )
    if needed is None:
        fix = "pick a smaller quantization: the weights every rank holds do not fit one Spark"
        return Problem(source, "topology.tp", message, fix, RULE_WEIGHTS)
    tp = 1 << (needed - 1).bit_length()  # the next power of two: what attention heads divide
    if nodes is not None and nodes < needed:
        message += f"; it has {nodes} Spark(s), the model needs at least {needed}"
        fix = (
            f"run it on {tp} Sparks (the inventory's sparks group, or the deployment's sparks) "
            f"with topology.tp: {tp}, or pick a smaller quantization"
        )
    else:
        fix = (
            f"topology.tp: {tp} fits (tp·pp of at least {needed}), on as many Sparks; or pick "
            "a smaller quantization"
        )
    return Problem(source, "topology.tp", message, fix, RULE_WEIGHTS)


def _fitting_fraction(
    mem: Any,
    fraction: float,
    usable: float,
    overhead: float,
    per_gpu: float,
    state: float,
    total: float,
) -> tuple[float, float] | None:
    """The smallest memory fraction above ``fraction`` (in steps of 0.01, up to 0.98) that
    leaves memory for the KV cache after the weights and ``state``: (fraction, bytes left)."""
    step = math.floor(fraction * 100) + 1
    for hundredths in range(step, 99):
        candidate = hundredths / 100
        _, _, rest = mem.budget(candidate, usable, overhead, per_gpu, total)
        if mem.startup_refusal(candidate, usable, total) is not None:
            return None
        if rest - state > 1 * GB:
            return candidate, rest - state
    return None


def plan(
    model: ModelInfo,
    serving: Serving,
    *,
    name: str = "",
    source: str = "",
    hardware: Hardware | None = None,
    nodes: int | None = None,
) -> CapacityPlan:
    """Plan one profile. ``source`` names the file in refusals; ``nodes`` checks tp×pp."""
    hw = hardware or Hardware()
    s = serving
    notes: list[str] = []
    problems: list[Problem] = []
    ranks = s.tp * s.pp
    speculative = s.speculative_draft_tokens is not None
    model = replace(
        model, weights=tuple(w for w in model.weights if speculative or not w.draft_only)
    )
    total, replicated, active = _weights(model, notes)
    per_gpu = (total - replicated) / ranks + replicated
    # Replicated classes are read by every TP rank of a decode step.
    active_all_ranks = active + sum(
        w.bytes * w.active_fraction * (s.tp - 1)
        for w in model.weights
        if w.replicated and not w.draft_only
    )
    if nodes is not None and ranks != nodes:
        notes.append(f"tp x pp = {ranks} but the inventory has {nodes} Sparks")

    usable = hw.usable_gb * GB
    overhead = hw.runtime_overhead_gb * GB
    if per_gpu + overhead > usable:
        problems.append(_weights_problem(total, replicated, per_gpu, s, hw, source, nodes))

    kv_per_token = _kv_bytes_per_token(model, s)
    if kv_per_token is None:
        notes.append("KV not planned: model_info lacks kv_heads, head_dim or layers.attention")
    if model.sliding_attention_layers:
        notes.append(
            f"{model.sliding_attention_layers} sliding-window layers not modelled: KV tokens "
            "count the full-attention layers only (SGLang sizes the SWA pool separately)"
        )
    mamba_per_req = (
        model.recurrent.bytes_per_request(s.tp, s.mamba_ssm_dtype) if model.recurrent else None
    )
    mem = s.memory
    device = hw.memory_gb * GB
    fraction, budget, rest = mem.budget(s.memory_fraction, usable, overhead, per_gpu, device)
    refusal = mem.startup_refusal(fraction, usable, device)
    if refusal is not None:
        most = math.floor(usable / device * 100) / 100
        problems.append(
            Problem(
                source,
                mem.fraction_key,
                refusal,
                f"{mem.fraction_key}: at most {most:.2f} (the free share of the total)",
                RULE_STARTUP,
            )
        )

    spec_state: float | None = None
    slots: int | None = None
    mamba_pool: float | None = None
    ratio: int | None = None
    max_running = s.max_running_requests
    if mamba_per_req is not None:
        pool = mem.recurrent(s, mamba_per_req, rest, notes)
        slots, mamba_pool, ratio = pool.slots, pool.pool_bytes, pool.slots_per_request
        spec_state, max_running = pool.spec_state_bytes, pool.max_running
        rest -= pool.pool_bytes + (pool.spec_state_bytes or 0.0)

    kv_tokens: int | None = None
    if kv_per_token is not None:
        kv_tokens = int(max(rest, 0.0) // kv_per_token)
    if problems:
        pass  # the weights alone do not fit: a KV verdict would only repeat it
    elif rest <= 0:
        state = (mamba_pool or 0.0) + (spec_state or 0.0)
        fit = _fitting_fraction(mem, fraction, usable, overhead, per_gpu, state, device)
        fix = mem.pool_fix
        if fit is not None:
            fix = f"{mem.fraction_key}: {fit[0]:.2f} leaves {fit[1] / GB:.1f} GB for it; {fix}"
        problems.append(
            Problem(
                source,
                mem.fraction_key,
                f"no memory left for the KV cache: {fraction:g} leaves "
                f"{rest / GB:.1f} GB per GPU after {per_gpu / GB:.1f} GB of weights"
                + (f", {mamba_pool / GB:.1f} GB of Mamba state" if mamba_pool else "")
                + f" and {hw.runtime_overhead_gb:g} GB of runtime overhead",
                fix,
                RULE_POOL,
            )
        )
    elif (
        kv_tokens is not None
        and s.context_length is not None
        and mem.context_key is not None
        and kv_tokens < s.context_length
    ):
        # vLLM and TRT-LLM refuse to start when one full-length sequence does not fit.
        fits = kv_tokens // 1024 * 1024 if kv_tokens >= 1024 else kv_tokens
        problems.append(
            Problem(
                source,
                mem.context_key,
                f"the KV pool holds ~{kv_tokens} tokens, less than one {s.context_length}-token "
                f"sequence ({max(rest, 0.0) / GB:.1f} GB of KV after {per_gpu / GB:.1f} GB of "
                f"weights and {hw.runtime_overhead_gb:g} GB of runtime overhead)",
                f"{mem.context_key}: {fits} fits; or use an FP8 KV cache or raise the memory "
                "fraction",
                RULE_CONTEXT,
            )
        )
    return CapacityPlan(
        name=name,
        engine=s.engine,
        tp=s.tp,
        pp=s.pp,
        ep=s.ep,
        hardware=hw,
        engine_assumptions=mem.assumptions,
        weights_total_gb=total / GB,
        weights_per_gpu_gb=per_gpu / GB,
        active_bytes_per_token_gb=active_all_ranks / GB,
        memory_fraction=fraction,
        static_budget_gb=None if budget is None else budget / GB,
        kv_pool_gb=max(rest, 0.0) / GB,
        kv_bytes_per_token=kv_per_token,
        kv_tokens=kv_tokens,
        context_length=s.context_length,
        mamba_bytes_per_request=mamba_per_req,
        mamba_slots=slots,
        mamba_pool_gb=None if mamba_pool is None else mamba_pool / GB,
        mamba_slots_per_request=ratio,
        spec_state_gb=None if spec_state is None else spec_state / GB,
        max_running_requests=max_running,
        notes=tuple(notes),
        problems=tuple(problems),
    )
