"""Hostile and broken profiles, as data: a shipped profile + one change + the rule id expected.

Every entry starts from the current file in ``model_profiles/`` (read when the entry is
built), so the corpus follows the shipped profiles instead of freezing copies of them. A
change is one of:

* ``set``: dotted keys (or tuples, for keys that are not strings) set to a value, or
  :data:`DELETE`d; the profile is then written back with ``yaml.safe_dump``;
* ``text``: a transform of the YAML text (loader cases: aliases, duplicate keys, nesting);
* ``raw``: a transform of the bytes (encodings).

``engine_layer=True`` marks refusals that the engine layer (real-parser flag resolution, an env
deny-list, identifier patterns in the schema) has not implemented yet: the test expects them
to fail until it does (``xfail(strict=True)``), and then drops the marker.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparkrack.serving.profile.rules import OWNED_ENV

PROFILE_DIR = Path(__file__).resolve().parent.parent / "model_profiles"

GLM = "glm-4.7-nvfp4"
GEMMA = "gemma-4-31b-it"
SUPER = "nemotron-3-super-120b-a12b-nvfp4"
ULTRA = "nemotron-3-ultra-550b-a55b-nvfp4"
QWEN = "qwen3.5-397b-a17b-nvfp4"
VLLM = "nemotron-3-super-120b-a12b-nvfp4-vllm"
VLLM4 = "nemotron-3-super-120b-a12b-nvfp4-vllm4"
VLLM2 = "nemotron-3-super-120b-a12b-nvfp4-vllm2"
TRTLLM = "nemotron-3-super-120b-a12b-nvfp4-trtllm"

Key = str | tuple[Any, ...]


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE: Any = _Delete()


@dataclass(frozen=True)
class From:
    """A value taken from another shipped profile when the entry is built."""

    profile: str
    key: str


@dataclass(frozen=True)
class Entry:
    id: str
    base: str
    rule: str
    set: tuple[tuple[Key, Any], ...] = ()
    text: Callable[[str], str] | None = None
    raw: Callable[[bytes], bytes] | None = None
    engine_layer: bool = False


def base_text(stem: str) -> str:
    return (PROFILE_DIR / f"{stem}.yml").read_text(encoding="utf-8")


def _path(key: Key) -> tuple[Any, ...]:
    return tuple(key.split(".")) if isinstance(key, str) else key


def _get(data: Any, key: Key) -> Any:
    for part in _path(key):
        data = data[part]
    return data


def _resolve(value: Any) -> Any:
    if isinstance(value, From):
        return _get(yaml.safe_load(base_text(value.profile)), value.key)
    return value


def mutate(data: dict[str, Any], changes: tuple[tuple[Key, Any], ...]) -> dict[str, Any]:
    for key, value in changes:
        *parents, last = _path(key)
        node = data
        for part in parents:
            node = node[part] if isinstance(node, list) else node.setdefault(part, {})
        if value is DELETE:
            del node[last]
        else:
            node[last] = _resolve(value)
    return data


def build(entry: Entry) -> bytes:
    """The bytes of the hostile file."""
    text = base_text(entry.base)
    if entry.set:
        data = mutate(yaml.safe_load(text), entry.set)
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
    if entry.text is not None:
        text = entry.text(text)
    raw = text.encode("utf-8")
    return entry.raw(raw) if entry.raw is not None else raw


def write(entry: Entry, directory: Path) -> Path:
    path = directory / f"{entry.id}.yml"
    path.write_bytes(build(entry))
    return path


def by_id(entry_id: str) -> Entry:
    (entry,) = [e for e in CORPUS if e.id == entry_id]
    return entry


# --- helpers for the table -------------------------------------------------------------------


def S(entry_id: str, base: str, rule: str, *changes: tuple[Key, Any], **kw: Any) -> Entry:
    return Entry(entry_id, base, rule, set=changes, **kw)


def T(entry_id: str, base: str, rule: str, fn: Callable[[str], str], **kw: Any) -> Entry:
    return Entry(entry_id, base, rule, text=fn, **kw)


def B(entry_id: str, base: str, rule: str, fn: Callable[[bytes], bytes]) -> Entry:
    return Entry(entry_id, base, rule, raw=fn)


def append(extra: str) -> Callable[[str], str]:
    return lambda text: text + "\n" + extra


def sub(pattern: str, repl: str) -> Callable[[str], str]:
    def apply(text: str) -> str:
        out, n = re.subn(pattern, repl, text, count=1, flags=re.MULTILINE)
        assert n == 1, f"{pattern!r} not in the base profile"
        return out

    return apply


def bomb(levels: int = 9, width: int = 9) -> str:
    """Billion laughs as one flow sequence: each element repeats the previous one ``width`` times."""
    parts = ["&l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        parts.append(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "[" + ", ".join(parts) + "]"


def deep_flow(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_block(depth: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "v\n"


def recode(encoding: str) -> Callable[[bytes], bytes]:
    return lambda raw: raw.decode("utf-8").encode(encoding)


def replace_bytes(old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    def apply(raw: bytes) -> bytes:
        assert old in raw
        return raw.replace(old, new, 1)

    return apply


DESC = b"description: "
SCHEMA = "schema"
OWNED = "extra-args-owned"
WORD_RULE = "extra-args-word"
CODE = "extra-args-code"
EGRESS = "extra-args-egress"
PATH = "extra-args-path"
PRIVACY = "extra-args-privacy"
NOT_ALLOWED = "extra-args-not-allowed"
REMOTE_CODE = "untrusted-remote-code"
ENV_OWNED = "env-owned"
ENV_DENIED = "env-denied"

# --- the corpus ------------------------------------------------------------------------------

LOADER: list[Entry] = [
    # Aliases: bombs, recursion, too many.
    T("alias-bomb-top-level", GLM, "yaml-alias", append(f"x_bomb: {bomb()}\n")),
    T(
        "alias-bomb-in-json-override",
        SUPER,
        "yaml-alias",
        sub(
            r"^  json_model_override_args:\n    max_position_embeddings: 524288$",
            f"  json_model_override_args: {{max_position_embeddings: 524288, x: {bomb()}}}",
        ),
    ),
    T("alias-bomb-wide", ULTRA, "yaml-alias", append(f"x_bomb: {bomb(4, 60)}\n")),
    T("alias-bomb-vllm", VLLM, "yaml-alias", append(f"x_bomb: {bomb(6, 12)}\n")),
    T("alias-recursive-sequence", GLM, "yaml-alias", append("x_loop: &r [1, *r]\n")),
    T("alias-recursive-mapping", GEMMA, "yaml-alias", append("x_loop: &r {a: {b: *r}}\n")),
    T(
        "alias-recursive-in-env",
        SUPER,
        "yaml-alias",
        sub(r"^env:$", "env: &e\n  LOOP: *e"),
    ),
    T(
        "alias-too-many",
        QWEN,
        "yaml-alias",
        append("x_a: &a 1\nx_b: [" + ", ".join(["*a"] * 100) + "]\n"),
    ),
    T(
        "alias-expanded-too-deep",
        TRTLLM,
        "yaml-depth",
        append(f"x_a: &d {deep_flow(20)}\nx_b: {deep_flow(20)[:20]}*d{deep_flow(20)[20:]}\n"),
    ),
    # Depth.
    T("nesting-5000-flow", GLM, "yaml-depth", append(f"x_deep: {deep_flow(5000)}\n")),
    T(
        "nesting-5000-in-sglang",
        SUPER,
        "yaml-depth",
        sub(
            r"^  json_model_override_args:\n    max_position_embeddings: 524288$",
            f"  json_model_override_args: {{x: {deep_flow(5000)}}}",
        ),
    ),
    T("nesting-100-block", GEMMA, "yaml-depth", append("x_deep:\n" + deep_block(100))),
    # Size.
    T("huge-file-comment", GLM, "yaml-size", append("#" + "x" * 2_000_000 + "\n")),
    S("huge-extra-args-list", GLM, "yaml-size", ("extra_args", ["--enable-metrics"] * 20_000)),
    S("huge-description", QWEN, "yaml-size", ("description", "x" * 600_000)),
    T(
        "huge-flow-mapping",
        VLLM,
        "yaml-size",
        append("x_many: {" + ", ".join(f"k{i}: {i}" for i in range(12_000)) + "}\n"),
    ),
    # Encoding.
    B("utf16-bom", GLM, "yaml-encoding", recode("utf-16")),
    B("utf16-le-no-bom", GEMMA, "yaml-encoding", recode("utf-16-le")),
    B("utf16-be-no-bom", SUPER, "yaml-encoding", recode("utf-16-be")),
    B("utf32", ULTRA, "yaml-encoding", recode("utf-32")),
    B("latin1-description", QWEN, "yaml-encoding", replace_bytes(DESC, DESC + b"caf\xe9 ")),
    B("cp1252-quotes", VLLM, "yaml-encoding", replace_bytes(DESC, DESC + b"\x93quoted\x94 ")),
    B("truncated-utf8", TRTLLM, "yaml-encoding", replace_bytes(DESC, DESC + b"\xc3( ")),
    B("utf8-surrogate", GLM, "yaml-encoding", replace_bytes(DESC, DESC + b"\xed\xa0\x80 ")),
    B("nul-byte", GEMMA, "yaml-encoding", replace_bytes(DESC, DESC + b"\x00")),
    # Numbers that are not numbers.
    T(
        "nan-mem-fraction",
        GLM,
        "yaml-non-finite",
        sub(r"mem_fraction_static: \S+", "mem_fraction_static: .nan"),
    ),
    T(
        "inf-mem-fraction",
        ULTRA,
        "yaml-non-finite",
        sub(r"mem_fraction_static: \S+", "mem_fraction_static: .inf"),
    ),
    T(
        "neg-inf-gpu-util",
        VLLM,
        "yaml-non-finite",
        sub(r"gpu_memory_utilization: \S+", "gpu_memory_utilization: -.inf"),
    ),
    T("nan-weights-gb", QWEN, "yaml-non-finite", sub(r"weights_gb: \S+", "weights_gb: .NaN")),
    T("nan-tagged-tp", GEMMA, "yaml-non-finite", sub(r"^  tp: \d+", "  tp: !!float nan")),
    T(
        "inf-exponent-context",
        SUPER,
        "yaml-non-finite",
        sub(r"^  context_length: \d+", "  context_length: 1.0e+999"),
    ),
    T("nan-in-weight-class", GLM, "yaml-non-finite", sub(r"params_b: 335\.96", "params_b: .nan")),
    # Duplicate keys.
    T("duplicate-model", GLM, "yaml-duplicate-key", append("model: attacker/other-model\n")),
    T("duplicate-tp", GEMMA, "yaml-duplicate-key", sub(r"^topology:$", "topology:\n  tp: 2")),
    T(
        "duplicate-sglang-block",
        ULTRA,
        "yaml-duplicate-key",
        append("sglang:\n  attention_backend: triton\n"),
    ),
    T(
        "duplicate-env-key",
        SUPER,
        "yaml-duplicate-key",
        sub(r"^env:$", "env:\n  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: '0'"),
    ),
    T("duplicate-image", VLLM, "yaml-duplicate-key", append("image: vllm/vllm-openai:v0.17.1\n")),
    T(
        "duplicate-yaml11-bool-keys",
        TRTLLM,
        "yaml-duplicate-key",
        append("x_flags:\n  yes: 1\n  true: 2\n"),
    ),
    # Syntax and other breakage.
    T("tab-indent", GLM, "yaml", sub(r"^  tp: ", "\ttp: ")),
    T("unclosed-flow", GEMMA, "yaml", append("extra_args: [--enable-metrics\n")),
    T("two-documents", QWEN, "yaml", append("---\nmodel: attacker/other\n")),
    T(
        "python-object-tag",
        SUPER,
        "yaml",
        append("x_cmd: !!python/object/apply:os.system ['id']\n"),
    ),
    T("control-character", ULTRA, "yaml", sub(r"^description: ", "description: \x07")),
    T("giant-integer", TRTLLM, "yaml", sub(r"^  tp: \d+", "  tp: " + "9" * 5000)),
    T("complex-key", GLM, "yaml-key", append("? [a, b]\n: 1\n")),
    T("empty-file", GEMMA, SCHEMA, lambda _text: ""),
    T("root-is-a-list", GLM, SCHEMA, lambda _text: "- model: nvidia/GLM-4.7-NVFP4\n"),
    T("root-is-a-string", VLLM, SCHEMA, lambda _text: "just a string\n"),
    T("binary-image", GLM, SCHEMA, sub(r"^image: .*$", "image: !!binary aGVsbG8=")),
    T("date-description", GEMMA, SCHEMA, sub(r"^description: .*$", "description: 2026-01-01")),
]

TYPES: list[Entry] = [
    S("tp-float", GLM, SCHEMA, ("topology.tp", 4.0)),
    S("tp-string", GLM, SCHEMA, ("topology.tp", "4")),
    S("tp-bool", GEMMA, SCHEMA, ("topology.tp", True)),
    S("tp-null", SUPER, SCHEMA, ("topology.tp", None)),
    S("tp-zero", ULTRA, SCHEMA, ("topology.tp", 0)),
    S("tp-negative", QWEN, SCHEMA, ("topology.tp", -4)),
    S("tp-list", GLM, SCHEMA, ("topology.tp", [4])),
    S("ep-float", ULTRA, SCHEMA, ("topology.ep", 4.0)),
    S("pp-string", GEMMA, SCHEMA, ("topology.pp", "1")),
    S("vllm-tp-float", VLLM, SCHEMA, ("topology.tp", 1.0)),
    S("trtllm-tp-bool", TRTLLM, SCHEMA, ("topology.tp", False)),
    S("context-length-float", GLM, SCHEMA, ("sglang.context_length", 202752.0)),
    S("graph-bs-float", GLM, SCHEMA, ("sglang.cuda_graph_max_bs", 8.0)),
    S("running-requests-null", QWEN, SCHEMA, ("sglang.max_running_requests", None)),
    S("mem-fraction-string", GLM, SCHEMA, ("sglang.mem_fraction_static", "0.6")),
    S("mem-fraction-bool", SUPER, SCHEMA, ("sglang.mem_fraction_static", True)),
    S("mem-fraction-above-1", ULTRA, SCHEMA, ("sglang.mem_fraction_static", 1.5)),
    S("num-steps-float", GLM, SCHEMA, ("speculative.num_steps", 3.0)),
    S("draft-tokens-string", SUPER, SCHEMA, ("speculative.num_draft_tokens", "4")),
    S("trust-remote-code-string", GLM, SCHEMA, ("sglang.trust_remote_code", "yes")),
    S("gpu-util-string", VLLM, SCHEMA, ("vllm.gpu_memory_utilization", "0.9")),
    S("max-num-seqs-float", VLLM, SCHEMA, ("vllm.max_num_seqs", 4.5)),
    S("max-model-len-string", VLLM, SCHEMA, ("vllm.max_model_len", "1000000")),
    S("model-null", GLM, SCHEMA, ("model", None)),
    S("model-int", GEMMA, SCHEMA, ("model", 42)),
    S("image-null", SUPER, SCHEMA, ("image", None)),
    S("image-list", QWEN, SCHEMA, ("image", ["a", "b"])),
    S("engine-null", GLM, SCHEMA, ("engine", None)),
    S("topology-null", GEMMA, SCHEMA, ("topology", None)),
    S("topology-list", GLM, SCHEMA, ("topology", [4, 1, 1])),
    S("sglang-list", GLM, SCHEMA, ("sglang", ["attention_backend", "triton"])),
    S("extra-args-string", GLM, SCHEMA, ("extra_args", "--enable-metrics")),
    S("extra-args-int-item", GLM, SCHEMA, ("extra_args", ["--max-total-tokens", 4096])),
    S("env-value-int", SUPER, SCHEMA, ("env.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", 1)),
    S("env-list", GLM, SCHEMA, ("env", ["A=1"])),
    S("patches-string", GLM, SCHEMA, ("patches", "cutlass-dsl-sm121-admissible-archs")),
    S("attention-heads-float", GLM, SCHEMA, ("model_info.attention_heads", 96.0)),
    S("kv-heads-string", QWEN, SCHEMA, ("model_info.kv_heads", "2")),
    S("json-override-string", SUPER, SCHEMA, ("sglang.json_model_override_args", "{}")),
]

UNKNOWN_KEYS: list[Entry] = [
    S("unknown-top-level", GLM, SCHEMA, ("x_extra", 1)),
    S("unknown-in-topology", GLM, SCHEMA, ("topology.dp", 2)),
    S("unknown-in-sglang", GLM, SCHEMA, ("sglang.enable_torch_compile", True)),
    S("unknown-in-speculative", SUPER, SCHEMA, ("speculative.topk", 1)),
    S("unknown-in-model-info", QWEN, SCHEMA, ("model_info.vocab", 151552)),
    S("unknown-in-layers", GLM, SCHEMA, ("model_info.layers.sparse", 1)),
    S("unknown-in-params", GLM, SCHEMA, ("model_info.params.embedding_b", 1)),
    S("unknown-in-experts", ULTRA, SCHEMA, ("model_info.experts.groups", 8)),
    S("unknown-in-weight-class", GLM, SCHEMA, (("model_info", "weight_classes", 0, "bits"), 4)),
    S("unknown-in-provenance", GEMMA, SCHEMA, ("provenance.author", "me")),
    S(
        "unknown-in-image-info",
        GLM,
        SCHEMA,
        ("image_info", {"sglang": "0.5.10", "cudnn": False, "cuda": "13"}),
    ),
    S("unknown-in-vllm", VLLM, SCHEMA, ("vllm.enforce_eager", True)),
    S("unknown-in-trtllm", TRTLLM, SCHEMA, ("trtllm.backend", "pytorch")),
    S("misspelled-topology", GEMMA, SCHEMA, ("topolgy.tp", 4)),
    S("misspelled-knob", GLM, SCHEMA, ("sglang.mem_fraction_statics", 0.6)),
    S("misspelled-attention-backend", SUPER, SCHEMA, ("sglang.attention_backed", "flashinfer")),
    S("misspelled-num-steps", GLM, SCHEMA, ("speculative.num_step", 3)),
    S("misspelled-architecture", GEMMA, SCHEMA, ("model_info.architectur", "X")),
    S("dash-extra-args", GLM, SCHEMA, ("extra-args", ["--enable-metrics"])),
    S("capitalised-model", QWEN, SCHEMA, ("Model", "nvidia/Qwen3.5-397B-A17B-NVFP4")),
    S("environment-not-env", SUPER, SCHEMA, ("environment", {"A": "1"})),
    S("misspelled-gpu-util", VLLM, SCHEMA, ("vllm.gpu_memory_utilisation", 0.9)),
    S("sglang-block-on-vllm", VLLM, SCHEMA, ("sglang", {"attention_backend": "triton"})),
    S("vllm-block-on-sglang", GLM, SCHEMA, ("vllm", {"max_num_seqs": 4})),
    S("engine-vllm-on-sglang-profile", GLM, SCHEMA, ("engine", "vllm")),
    S("engine-unknown", GLM, SCHEMA, ("engine", "llamacpp")),
    S("bad-enum-attention", GLM, SCHEMA, ("sglang.attention_backend", "flash")),
    S("bad-enum-moe-runner", ULTRA, SCHEMA, ("sglang.moe_runner_backend", "magic")),
    S("bad-enum-quantization", GLM, SCHEMA, ("sglang.quantization", "int3")),
    S("bad-enum-transport", QWEN, SCHEMA, ("transport", "tcp")),
    S("bad-enum-mamba-strategy", QWEN, SCHEMA, ("sglang.mamba_scheduler_strategy", "lru")),
    S("missing-model", GLM, SCHEMA, ("model", DELETE)),
    S("missing-image", GEMMA, SCHEMA, ("image", DELETE)),
    S("missing-topology", SUPER, SCHEMA, ("topology", DELETE)),
    S("missing-tp", ULTRA, SCHEMA, ("topology.tp", DELETE)),
    S("missing-model-info", QWEN, SCHEMA, ("model_info", DELETE)),
    S("missing-architecture", GLM, SCHEMA, ("model_info.architecture", DELETE)),
    S("model-not-a-repo-id", GLM, SCHEMA, ("model", "GLM-4.7-NVFP4")),
    S("image-empty-tag", GEMMA, SCHEMA, ("image", "scitrera/dgx-spark-sglang:")),
    S("image-info-bad-version", GLM, SCHEMA, ("image_info", {"sglang": "latest", "cudnn": False})),
]

# One entry per seed rule at least (the bad-profile fixtures, now base + change), plus variants.
RULES: list[Entry] = [
    S("spec-no-topk", GLM, "spec-eagle-topk", ("speculative.eagle_topk", DELETE)),
    S("tp-not-nodes", GEMMA, "topology-nodes", ("topology.tp", 2)),
    S("tp-pp-not-nodes", GLM, "topology-nodes", ("topology.tp", 8)),
    S("ep-not-divisor", ULTRA, "topology-ep-divides-tp", ("topology.ep", 3)),
    S("ep-on-dense-model", GEMMA, "topology-ep-divides-tp", ("topology.ep", 2)),
    S(
        "tp-heads",
        GLM,
        "topology-tp-heads",
        ("model_info.attention_heads", 6),
        ("model_info.kv_heads", 2),
    ),
    S(
        "kv-heads",
        GLM,
        "topology-kv-heads",
        ("model_info.attention_heads", 24),
        ("model_info.kv_heads", 6),
    ),
    S(
        "nemotronh-triton-attention",
        SUPER,
        "nemotronh-triton-attention",
        ("sglang.attention_backend", "triton"),
    ),
    S(
        "ultra-triton-attention",
        ULTRA,
        "nemotronh-triton-attention",
        ("sglang.attention_backend", "triton"),
    ),
    S(
        "ultra-triton-moe",
        ULTRA,
        "nvfp4-latentmoe-triton-moe",
        ("sglang.moe_runner_backend", "triton"),
    ),
    S(
        "super-cudnn",
        SUPER,
        "fp4-gemm-cudnn-missing",
        ("sglang.fp4_gemm_backend", "flashinfer_cudnn"),
    ),
    S("ultra-mfs-085", ULTRA, "mem-fraction-ep-floor", ("sglang.mem_fraction_static", 0.85)),
    S(
        "glm-piecewise",
        GLM,
        "nvfp4-piecewise-cuda-graph",
        ("sglang.disable_piecewise_cuda_graph", False),
    ),
    S("qwen-eager", QWEN, "cutlass-fp4-eager", ("sglang.disable_cuda_graph", True)),
    S("glm-graph-bs", GLM, "cuda-graph-bs-below-running", ("sglang.max_running_requests", 32)),
    S(
        "gemma-draft-tokens",
        GEMMA,
        "spec-draft-tokens",
        ("speculative.num_draft_tokens", 6),
        ("speculative.num_steps", 6),
    ),
    S("glm-draft-tokens", GLM, "spec-draft-tokens", ("speculative.num_draft_tokens", 2)),
    S(
        "gemma-flashinfer",
        GEMMA,
        "gemma4-flashinfer-attention",
        ("sglang.attention_backend", "flashinfer"),
    ),
    S(
        "gemma-no-24436",
        GEMMA,
        "gemma4-assistant-drafter-image",
        ("image", "scitrera/dgx-spark-sglang:0.5.12"),
    ),
    S(
        "qwen-mtp-no-buffer",
        QWEN,
        "qwen35-mtp-radix-mamba",
        ("sglang.mamba_scheduler_strategy", DELETE),
    ),
    S("qwen-mtp-no-spec-v2", QWEN, "qwen35-mtp-radix-mamba", ("sglang.enable_spec_v2", DELETE)),
    S(
        "super-mtp-upstream-image",
        SUPER,
        "nemotronh-mtp-image",
        ("image", "scitrera/dgx-spark-sglang:0.5.12"),
    ),
    S(
        "qwen-ficutlass-ep4",
        QWEN,
        "ficutlass-moe-ep-sm121",
        ("sglang.moe_runner_backend", "flashinfer_cutlass"),
        ("topology.ep", 4),
    ),
    S(
        "glm-ficutlass-fi-attn",
        GLM,
        "ficutlass-moe-fi-attention",
        ("sglang.moe_runner_backend", "flashinfer_cutlass"),
    ),
    # A tag of a repository the inventory trusts that sparkrack knows nothing about.
    S("unknown-image", GLM, "image-facts", ("image", "scitrera/dgx-spark-sglang:dev")),
    S(
        "old-image",
        GLM,
        "flag-unavailable",
        ("image", "scitrera/dgx-spark-sglang:0.5.9"),
        ("image_info", {"sglang": "0.5.9", "cudnn": False}),
    ),
    # Trust (the example inventory's serving_trusted_images / serving_remote_code_repos): the
    # profile may not choose the code that runs.
    S(
        "foreign-image-with-image-info",
        GLM,
        "untrusted-image",
        ("image", "registry.example/own/sglang:0.5.13"),
        ("image_info", {"sglang": "0.5.13", "cudnn": True}),
    ),
    S(
        "foreign-image-lookalike-prefix",
        GLM,
        "untrusted-image",
        ("image", "scitrera/dgx-spark-sglang-evil:0.5.10"),
        ("image_info", {"sglang": "0.5.10", "cudnn": True}),
    ),
    S("remote-code-flip", GEMMA, "untrusted-remote-code", ("sglang.trust_remote_code", True)),
    S("foreign-model", GLM, "untrusted-remote-code", ("model", "attacker/GLM-4.7-NVFP4")),
    # Code from profiles past trust_remote_code: a plugin file of a foreign model repo is
    # imported whatever trust_remote_code says; a draft model loads with the model's
    # trust_remote_code.
    S(
        "vllm-stranger-plugin",
        VLLM,
        REMOTE_CODE,
        ("model", "attacker/innocent-model"),
        ("vllm.trust_remote_code", False),
    ),
    S(
        "sglang-foreign-draft-remote-code",
        QWEN,
        REMOTE_CODE,
        ("speculative.draft_model_path", "attacker/drafter"),
    ),
    S(
        "vllm-foreign-draft-remote-code",
        VLLM,
        REMOTE_CODE,
        ("vllm.speculative_config.model", "attacker/drafter"),
    ),
    # vLLM's SpeculativeConfig: the fields that name a path, a loader or the draft's code are
    # refused; the draft model is a repo id, never a path.
    S(
        "vllm-draft-load-config",
        VLLM,
        SCHEMA,
        ("vllm.speculative_config.draft_load_config", {"download_dir": "/root"}),
    ),
    S("vllm-draft-code-revision", VLLM, SCHEMA, ("vllm.speculative_config.code_revision", "main")),
    S(
        "vllm-draft-model-config",
        VLLM,
        SCHEMA,
        ("vllm.speculative_config.draft_model_config", {"trust_remote_code": True}),
    ),
    S("vllm-draft-tokenizer", VLLM, SCHEMA, ("vllm.speculative_config.tokenizer", "attacker/t")),
    S("vllm-draft-model-path", VLLM, SCHEMA, ("vllm.speculative_config.model", "/root/draft")),
    S(
        "vllm-draft-quantization-path",
        VLLM,
        SCHEMA,
        ("vllm.speculative_config.quantization", "/tmp/plugin.py"),
    ),
    S(
        "vllm-draft-token-tree-code",
        VLLM,
        SCHEMA,
        ("vllm.speculative_config.speculative_token_tree", "__import__('os')"),
    ),
    S(
        "patch-unknown",
        GLM,
        "patch-unknown",
        ("patches", ["cutlass-dsl-sm121-admissible-archs", "no-such-patch"]),
    ),
    S("patch-path-traversal", SUPER, "patch-unknown", ("patches", ["../../etc/passwd"])),
    S("glm-mfs-040", GLM, "plan-no-kv-pool", ("sglang.mem_fraction_static", 0.4)),
    S(
        "vllm-context-beyond-kv",
        VLLM,
        "plan-context-exceeds-kv",
        ("vllm.gpu_memory_utilization", 0.64),
    ),
    S(
        "vllm-fraction-beyond-free",
        VLLM,
        "plan-fraction-exceeds-free",
        ("vllm.gpu_memory_utilization", 0.95),
    ),
    S(
        "vllm-qwen-397b-one-spark",
        VLLM,
        "plan-weights-exceed-memory",
        ("model", "nvidia/Qwen3.5-397B-A17B-NVFP4"),
        ("model_info", From(QWEN, "model_info")),
        ("vllm.max_model_len", DELETE),
        ("vllm.speculative_config", DELETE),
    ),
    S(
        "trtllm-long-len-no-env",
        TRTLLM,
        "trtllm-long-context-env",
        ("trtllm.allow_long_max_model_len", False),
    ),
    S(
        "trtllm-mtp-no-layers",
        TRTLLM,
        "trtllm-mtp-layers",
        ("trtllm_config.speculative_config.num_nextn_predict_layers", 0),
    ),
    S(
        "trtllm-ssm-fp16-no-rounding",
        TRTLLM,
        "trtllm-ssm-fp16-stochastic-rounding",
        ("trtllm_config.kv_cache_config.mamba_ssm_stochastic_rounding", False),
    ),
    S(
        "vllm-release-mtp-nvfp4",
        VLLM,
        "vllm-mtp-nvfp4-nightly",
        ("image", "vllm/vllm-openai:v0.17.1"),
    ),
    S(
        "vllm-long-len-no-env",
        VLLM,
        "vllm-long-context-env",
        ("vllm.allow_long_max_model_len", False),
    ),
    S(
        "vllm-flashinfer-moe-fp4",
        VLLM,
        "vllm-flashinfer-moe-fp4",
        ("vllm.use_flashinfer_moe_fp4", True),
    ),
    S(
        "vllm-ssm-float16",
        VLLM,
        "vllm-mamba-ssm-float32",
        ("vllm.mamba_ssm_cache_dtype", "float16"),
    ),
    # tp x pp > 1 runs vLLM across Sparks, one rank per Spark: no more ranks than Sparks (4 here).
    S("vllm-tp8", VLLM, "vllm-across-ranks", ("topology.tp", 8)),
    S("vllm-across-ep2", VLLM4, "vllm-across-ranks", ("topology.ep", 2)),
    S("vllm2-pp4", VLLM2, "vllm-across-ranks", ("topology.pp", 4)),
    # dp x tp x pp counts the ranks with data parallel: 2 x 4 = 8 on 4 Sparks.
    S("vllm-across-dp2", VLLM4, "vllm-across-ranks", ("vllm.data_parallel_size", 2)),
    # Data parallel across Sparks is rendered for MoE models only: the same model without experts.
    S(
        "vllm-across-dp2-dense",
        VLLM2,
        "vllm-across-data-parallel",
        ("topology.tp", 1),
        ("vllm.data_parallel_size", 2),
        ("model_info.experts", DELETE),
        ("model_info.layers.moe", DELETE),
    ),
    # Ray across Sparks: the refusal names the multiprocessing executor's flags instead.
    S(
        "vllm-across-ray",
        VLLM4,
        "extra-args-owned",
        ("extra_args", ["--distributed-executor-backend", "ray"]),
    ),
    S(
        "vllm-across-old-release",
        VLLM4,
        "vllm-across-release",
        ("image", "vllm/vllm-openai:v0.10.0"),
        ("image_info", {"vllm": "0.10.0"}),
        ("allow_moving_tag", DELETE),
        ("vllm.speculative_config", DELETE),
    ),
    S(
        "vllm-across-unknown-release",
        VLLM4,
        "vllm-across-release",
        ("image", "vllm/vllm-openai:v0.20.0"),
        ("allow_moving_tag", DELETE),
        ("vllm.speculative_config", DELETE),
    ),
    # The generic topology-tp-heads rule holds vLLM across Sparks too.
    S("vllm-across-heads", VLLM4, "topology-tp-heads", ("model_info.attention_heads", 30)),
    S("trtllm-tp4", TRTLLM, "single-node-topology", ("topology.tp", 4)),
]


def _extra(entry_id: str, base: str, args: list[str], rule: str = OWNED, **kw: Any) -> Entry:
    return S(entry_id, base, rule, ("extra_args", args), **kw)


EXTRA_ARGS: list[Entry] = [
    _extra("extra-args-node-rank", GLM, ["--node-rank=1"]),
    _extra("extra-args-tp", GLM, ["--tp-size", "4"]),
    _extra("extra-args-nnodes", GEMMA, ["--nnodes", "8"]),
    _extra("extra-args-dist-init", SUPER, ["--dist-init-addr=10.0.0.9:5000"]),
    _extra("extra-args-host", ULTRA, ["--host", "0.0.0.0"]),
    _extra("extra-args-port", QWEN, ["--port=1"]),
    _extra("extra-args-model-path", GLM, ["--model-path", "attacker/model"]),
    _extra("extra-args-ep-size", ULTRA, ["--ep-size=2"]),
    _extra("extra-args-pp-size", GLM, ["--pp-size", "2"]),
    _extra("extra-args-mem-fraction", SUPER, ["--mem-fraction-static=0.5"]),
    _extra("extra-args-attention-backend", SUPER, ["--attention-backend", "triton"]),
    _extra("extra-args-served-name", GLM, ["--served-model-name", "x"]),
    _extra("extra-args-spec-algorithm", QWEN, ["--speculative-algorithm", "EAGLE"]),
    _extra("extra-args-after-harmless", GLM, ["--enable-metrics", "--tp-size=2"]),
    _extra("vllm-extra-args-tp", VLLM, ["--tensor-parallel-size", "2"]),
    _extra("vllm-extra-args-model", VLLM, ["--model=attacker/model"]),
    _extra("vllm-extra-args-max-model-len", VLLM, ["--max-model-len", "8"]),
    _extra("trtllm-extra-args-tp", TRTLLM, ["--tp_size", "2"]),
    _extra("trtllm-extra-args-options", TRTLLM, ["--extra_llm_api_options=/tmp/x.yaml"]),
    # The engine layer resolves extra_args through the engine's real parser.
    _extra("extra-args-abbrev-node-rank", GLM, ["--node-r", "2"]),
    _extra("extra-args-alias-tensor-parallel", GLM, ["--tensor-parallel-size", "2"]),
    _extra("extra-args-abbrev-expert-parallel", ULTRA, ["--expert-parallel-s=4"]),
    _extra("extra-args-abbrev-model", GLM, ["--model", "x/y"]),
    _extra("extra-args-config-file", SUPER, ["--config", "f.yaml"]),
    _extra("vllm-extra-args-underscore-tp", VLLM, ["--tensor_parallel_size", "2"]),
    _extra("extra-args-alias-nccl-init-addr", GLM, ["--nccl-init-addr", "10.0.0.9:5000"]),
    _extra("extra-args-alias-ep", ULTRA, ["--ep", "2"]),
    _extra("extra-args-alias-draft-model", GEMMA, ["--speculative-draft-model", "x/y"]),
    # Words that only a shell or a template engine reads; an option and its value in one word.
    _extra("extra-args-word-with-space", SUPER, ["--dist-init-addr 10.0.0.9:5000"], WORD_RULE),
    _extra("extra-args-semicolon", GLM, ["--enable-metrics;id"], WORD_RULE),
    _extra("extra-args-backticks", QWEN, ["--log-level", "`id`"], WORD_RULE),
    _extra("extra-args-jinja", GLM, ["--log-level", "{{ lookup('env', 'HF_TOKEN') }}"], WORD_RULE),
    _extra("extra-args-command-substitution", ULTRA, ["--log-level=$(cat /etc/passwd)"], WORD_RULE),
    _extra("extra-args-variable", GEMMA, ["--log-level", "${HF_TOKEN}"], WORD_RULE),
    _extra("vllm-extra-args-and-and", VLLM, ["--seed", "x&&id"], WORD_RULE),
    # An allow-list per engine: what is not on it is refused, by class when the engine's source
    # says what the option does (code, egress, path, privacy).
    _extra("extra-args-custom-logit-processor", GLM, ["--enable-custom-logit-processor"], CODE),
    _extra("extra-args-custom-logit-abbrev", ULTRA, ["--enable-custom-logit"], CODE),
    _extra("extra-args-tokenizer-path", GLM, ["--tokenizer-path", "attacker/tokenizer"], CODE),
    _extra("extra-args-chat-template", QWEN, ["--chat-template=/tmp/t.jinja"], CODE),
    _extra("extra-args-custom-weight-loader", SUPER, ["--custom-weight-loader", "a.b"], CODE),
    _extra("extra-args-unknown-plugin-name", GEMMA, ["--speculative-draft-plugin", "x"], CODE),
    _extra("extra-args-log-requests", SUPER, ["--log-requests"], PRIVACY),
    _extra("extra-args-log-requests-level", GLM, ["--log-requests-level", "3"], PRIVACY),
    _extra("extra-args-crash-dump", ULTRA, ["--crash-dump-folder", "/tmp"], PRIVACY),
    _extra("extra-args-otlp", QWEN, ["--otlp-traces-endpoint", "collector:4317"], EGRESS),
    _extra("extra-args-enable-trace", GLM, ["--enable-trace"], EGRESS),
    _extra("extra-args-allowed-option-url", GLM, ["--log-level", "http://x.example"], EGRESS),
    _extra("extra-args-allowed-option-host-port", SUPER, ["--log-level=10.0.0.9:80"], EGRESS),
    _extra("extra-args-allowed-option-path", GEMMA, ["--log-level=/etc/shadow"], PATH),
    _extra("extra-args-file-storage", GLM, ["--file-storage-path", "/tmp/x"], PATH),
    _extra("extra-args-unknown", GEMMA, ["--load-format", "dummy"], NOT_ALLOWED),
    _extra("extra-args-short-option", QWEN, ["-v"], NOT_ALLOWED),
    _extra("vllm-extra-args-tool-parser-plugin", VLLM, ["--tool-parser-plugin", "/a.py"], CODE),
    _extra("vllm-extra-args-logits-processors", VLLM, ["--logits-processors=a.B"], CODE),
    _extra("vllm-extra-args-middleware", VLLM, ["--middleware", "a.b"], CODE),
    _extra("vllm-extra-args-tokenizer", VLLM, ["--tokenizer", "attacker/tok"], CODE),
    _extra("vllm-extra-args-log-requests", VLLM, ["--enable-log-requests"], PRIVACY),
    _extra("vllm-extra-args-otlp", VLLM, ["--otlp-traces-endpoint", "h:4317"], EGRESS),
    _extra("vllm-extra-args-media-path", VLLM, ["--allowed-local-media-path", "/"], PATH),
    _extra("vllm-extra-args-unknown", VLLM, ["--api-server-count", "2"], NOT_ALLOWED),
    _extra("trtllm-extra-args-module-dirs", TRTLLM, ["--custom_module_dirs", "/x"], CODE),
    _extra("trtllm-extra-args-otlp", TRTLLM, ["--otlp_traces_endpoint=h:4317"], EGRESS),
    _extra("trtllm-extra-args-unknown", TRTLLM, ["--backend", "pytorch"], NOT_ALLOWED),
]

ENV: list[Entry] = [
    *(
        S(f"env-{k.lower().replace('_', '-')}", GLM, ENV_OWNED, (f"env.{k}", "x"))
        for k in OWNED_ENV
    ),
    S("env-registry-deepgemm", GLM, ENV_OWNED, ("env.SGLANG_ENABLE_JIT_DEEPGEMM", "0")),
    S("env-registry-spec-v2", QWEN, ENV_OWNED, ("env.SGLANG_ENABLE_SPEC_V2", "1")),
    S("env-hf-token-on-super", SUPER, ENV_OWNED, ("env.HF_TOKEN", "hf_x")),
    S("env-hf-hub-online", GLM, ENV_OWNED, ("env.HF_HUB_OFFLINE", "0")),
    S("env-jit-cache-redirect", SUPER, ENV_OWNED, ("env.TRITON_CACHE_DIR", "/tmp/stale")),
    # The variables that choose where SGLang binds the ranks' message-queue broadcaster: any of
    # them would move it off the rank's fabric address, onto the cluster network.
    S("env-bind-host-ip-cluster", GLM, ENV_OWNED, ("env.SGLANG_HOST_IP", "10.42.0.7")),
    S("env-bind-host-ip-plain", SUPER, ENV_OWNED, ("env.HOST_IP", "0.0.0.0")),
    S("env-bind-nic-eth0", GLM, ENV_OWNED, ("env.SGLANG_LOCAL_IP_NIC", "eth0")),
    # The engine layer keeps a deny-list of secret, endpoint and fabric variables.
    *(
        S(
            f"env-denied-{k.lower().replace('_', '-')}",
            GLM,
            ENV_DENIED,
            (f"env.{k}", v),
        )
        for k, v in (
            ("HF_ENDPOINT", "https://attacker.example"),
            ("HUGGING_FACE_HUB_TOKEN", "hf_x"),
            ("NCCL_CONF_FILE", "/tmp/nccl.conf"),
            ("LD_PRELOAD", "/tmp/x.so"),
            ("PYTHONPATH", "/tmp/x"),
            ("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True"),
            ("VLLM_USE_MODELSCOPE", "True"),
        )
    ),
]

# Identifiers that reach argv or manifests get patterns in the schema (engine layer).
_IDENTIFIERS: list[tuple[str, str, Key, Any]] = [
    ("env-integer-key", GLM, ("env", 1), "x"),
    ("env-null-key", GLM, ("env", None), "x"),
    ("image-with-space", GLM, "image", "scitrera/dgx-spark-sglang:0.5.10 --privileged"),
    ("image-with-newline", GEMMA, "image", "scitrera/dgx-spark-sglang:0.5.12-gemma4\n"),
    ("image-leading-dash", SUPER, "image", "--entrypoint=/bin/sh"),
    ("model-dot-dot", GLM, "model", "nvidia/.."),
    ("model-trailing-newline", QWEN, "model", "nvidia/Qwen3.5-397B-A17B-NVFP4\n"),
    ("architecture-dash-dash", GLM, "model_info.architecture", "--"),
    ("served-name-var-expansion", GLM, "sglang.served_model_name", "$(HF_TOKEN)"),
    ("vllm-served-name-var-expansion", VLLM, "vllm.served_model_name", "x-$(HF_TOKEN)"),
    ("served-name-control-chars", GLM, "sglang.served_model_name", "a\x1b[2Jb\r"),
    ("revision-branch-name", GLM, "revision", "main"),
    ("revision-short-sha", QWEN, "revision", "0123456"),
    ("revision-option-injection", GEMMA, "revision", "--trust-remote-code"),
    ("allow-moving-tag-bare-bool", VLLM, "allow_moving_tag", True),
    ("allow-moving-tag-no-reason", VLLM, "allow_moving_tag", {"because": "nightly"}),
]
# A moving tag without allow_moving_tag, and a pinned revision TRT-LLM cannot load.
CONTEXT: list[Entry] = [
    S(
        "context-beyond-model",
        GLM,
        "sglang-context-beyond-model",
        ("sglang.context_length", 202753),
    ),
    S(
        "context-beyond-override",
        SUPER,
        "sglang-context-beyond-model",
        ("sglang.context_length", 1048576),
        ("env", {}),
    ),
]
DIGEST_HEX = "0123456789abcdef" * 4
IMAGES: list[Entry] = [
    S("image-name-too-long", GLM, SCHEMA, ("image", "a" * 256 + ":1")),
    S("image-tag-too-long", GLM, SCHEMA, ("image", "scitrera/dgx-spark-sglang:" + "1" * 129)),
    S("image-digest-short", GEMMA, SCHEMA, ("image", "scitrera/x:1@sha256:abc")),
    S("image-digest-md5", SUPER, SCHEMA, ("image", f"scitrera/x:1@md5:{DIGEST_HEX[:32]}")),
    S("image-digest-upper", QWEN, SCHEMA, ("image", f"scitrera/x:1@sha256:{DIGEST_HEX.upper()}")),
    S("image-upper-case-name", GLM, SCHEMA, ("image", "Scitrera/dgx-spark-sglang:0.5.10")),
    S("image-option-in-tag", ULTRA, SCHEMA, ("image", "scitrera/x:--privileged")),
    S("image-empty", TRTLLM, SCHEMA, ("image", "")),
    S(
        "moving-tag-upper-case",
        GLM,
        "image-moving-tag",
        ("image", "scitrera/dgx-spark-sglang:Latest"),
        ("image_info", {"sglang": "0.5.10", "cudnn": False}),
    ),
    S(
        "moving-tag-nightly-upper",
        GLM,
        "image-moving-tag",
        ("image", "scitrera/dgx-spark-sglang:0.5.10-NIGHTLY"),
        ("image_info", {"sglang": "0.5.10", "cudnn": False}),
    ),
    S(
        "moving-tag-implicit-latest",
        GLM,
        "image-moving-tag",
        ("image", "scitrera/dgx-spark-sglang"),
        ("image_info", {"sglang": "0.5.10", "cudnn": False}),
    ),
]
SWITCH: list[Entry] = [
    S("moving-tag-refused", VLLM, "image-moving-tag", ("allow_moving_tag", DELETE)),
    S(
        "latest-tag-refused",
        GLM,
        "image-moving-tag",
        ("image", "scitrera/dgx-spark-sglang:latest"),
        ("image_info", {"sglang": "0.5.10", "cudnn": True}),
    ),
    S(
        "trtllm-pinned-revision",
        TRTLLM,
        "trtllm-revision",
        ("revision", "0123456789abcdef0123456789abcdef01234567"),
    ),
]
IDENTIFIERS: list[Entry] = [
    S(entry_id, base, SCHEMA, (key, value)) for entry_id, base, key, value in _IDENTIFIERS
]

CORPUS: list[Entry] = [
    *LOADER,
    *TYPES,
    *UNKNOWN_KEYS,
    *RULES,
    *EXTRA_ARGS,
    *ENV,
    *IDENTIFIERS,
    *CONTEXT,
    *IMAGES,
    *SWITCH,
]
