"""The JSON Schema of a serving profile, generated from the engines' knob tables.

``model_profiles/schema.json`` is this function's output (the engine sections come from each
engine's knob table, ``sparkrack/serving/engines/``), checked in so editors can use it
(``# yaml-language-server: $schema=schema.json``); ``tests/serving/profile/test_profile_schema.py`` fails
when the file and the knob tables drift apart. Regenerate with ``python -m sparkrack.serving.profile.schema``.
Every object has ``additionalProperties: false``: a misspelled key is an error.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sparkrack.fabric.ncclenv import TRANSPORTS
from sparkrack.inputs import imageref
from sparkrack.serving.engines import ENGINES
from sparkrack.serving.profile.knobs import (
    ARCHITECTURE,
    ENV_NAME,
    HF_ID,
    IMAGE_REF,
    RELEASE,
    REVISION,
    WORD,
)
from sparkrack.sources import SOURCES

_INT = {"type": "integer", "minimum": 0}
_POS = {"type": "integer", "minimum": 1}
_NUM = {"type": "number", "minimum": 0}


def _obj(
    props: dict[str, Any], required: list[str] | None = None, desc: str = ""
) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
    if required:
        out["required"] = required
    if desc:
        out["description"] = desc
    return out


def _d(schema: dict[str, Any], desc: str) -> dict[str, Any]:
    return {**schema, "description": desc}


# One class of parameters for the capacity planner (sparkrack/planner/memory.py: WeightClass).
_WEIGHT_CLASS = _obj(
    {
        "name": {"type": "string"},
        "params_b": _d(_NUM, "billions of parameters"),
        "dtype": {"enum": ["fp32", "bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int4"]},
        "active_fraction": _d({"type": "number", "minimum": 0, "maximum": 1}, "read per token"),
        "replicated": _d({"type": "boolean"}, "held by every rank, not split over TP x PP"),
        "draft_only": _d({"type": "boolean"}, "loaded only with speculative decoding (MTP)"),
    },
    ["name", "params_b", "dtype"],
)


def build_schema() -> dict[str, Any]:
    topology = {
        "tp": _d(_POS, "tensor-parallel size"),
        "pp": _d(_POS, "pipeline-parallel size"),
        "ep": _d(_POS, "expert-parallel size"),
    }
    engine_sections = {name: eng.sections for name, eng in ENGINES.items()}
    sections: dict[str, Any] = {}
    for name in sorted(ENGINES):
        eng = ENGINES[name]
        for section in eng.sections:
            props = {k.name: k.schema() for k in eng.section_knobs(section)}
            required = ["algorithm"] if section == "speculative" else None
            sections[section] = _obj(
                props, required, f"{name} knobs; each maps to one flag/env of its engine table"
            )
    model_info = _obj(
        {
            "architecture": _d(
                {"type": "string", "pattern": ARCHITECTURE}, "config.json architectures[0]"
            ),
            "attention_heads": _d(_POS, "num_attention_heads"),
            "kv_heads": _d(_POS, "num_key_value_heads"),
            "head_dim": _d(_POS, "per-head dimension"),
            "hidden_size": _POS,
            "vocab_size": _POS,
            "max_position_embeddings": _POS,
            "layers": _obj(
                {
                    "total": _POS,
                    "attention": _d(_INT, "full-attention layers (grow KV)"),
                    "sliding_attention": _INT,
                    "linear_attention": _INT,
                    "mamba": _INT,
                    "moe": _INT,
                    "dense": _INT,
                },
                ["total"],
                "layer count by type",
            ),
            "params": _obj(
                {"total_b": _d(_NUM, "billions"), "active_b": _d(_NUM, "billions per token")},
                ["total_b"],
            ),
            "quantization": _d(
                {"type": "string"}, "checkpoint precision: nvfp4, nvfp4-mixed, bf16, fp8 ..."
            ),
            "experts": _obj(
                {"routed": _INT, "shared": _INT, "per_token": _INT, "latent_size": _INT},
                ["routed"],
                "MoE layout; latent_size marks LatentMoE",
            ),
            "bytes_per_param": _d(
                {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
                "bytes per parameter by dtype (capacity planner)",
            ),
            "weights_gb": _d(_NUM, "checkpoint size on disk, GB"),
            "weight_classes": _d(
                {"type": "array", "items": _WEIGHT_CLASS},
                "parameters by class and dtype (capacity planner, sparkrack/planner/memory.py)",
            ),
            "mamba": _obj(
                {
                    "state_size": _POS,
                    "num_heads": _POS,
                    "head_dim": _POS,
                    "n_groups": _POS,
                    "conv_kernel": _POS,
                    "conv_dim": _d(_POS, "conv channels if not heads*head_dim+2*n_groups*state"),
                    "state_bytes_per_request": _d(_NUM, "SSM + conv state per slot"),
                },
                desc="Mamba/SSM state (capacity planner)",
            ),
        },
        ["architecture", "attention_heads", "kv_heads", "layers", "params", "quantization"],
        "facts about the model (validation, capacity planning)",
    )
    figures = _obj({"n1": _NUM, "n4": _NUM, "n8": _NUM}, desc="tok/s at 1/4/8 concurrent")
    provenance = _obj(
        {
            "source": _d(
                {"enum": sorted(SOURCES)},
                "the published document the recipe comes from (sparkrack/sources.py)",
            ),
            "date": _d({"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}, "measured on"),
            "image": {"type": "string"},
            "measured": _obj(
                {**figures["properties"], "unit": {"enum": ["tok/s"]}, "note": {"type": "string"}},
                ["n1", "n4", "n8"],
            ),
            "sources": _d(
                {"type": "array", "items": {"type": "string"}},
                "where each other fact comes from (src:<slug>, repo/path@commit, file)",
            ),
        },
        ["source", "image"],
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://sparkrack.invalid/model_profiles/schema.json",
        "title": "sparkrack serving profile",
        "description": "One model, one recipe. Generated from the engines' knob tables by sparkrack/serving/profile/schema.py.",
        "type": "object",
        "additionalProperties": False,
        "required": ["model", "engine", "image", "topology", "model_info", "provenance"],
        "properties": {
            "description": {"type": "string"},
            "model": _d({"type": "string", "pattern": HF_ID}, "HF model id (owner/name)"),
            "engine": {"enum": sorted(ENGINES)},
            "image": _d(
                {
                    "type": "string",
                    "pattern": IMAGE_REF,
                    "format": "image-reference",
                    "maxLength": imageref.MAX_LENGTH,
                },
                "container image: repo:tag or repo@sha256:<digest>",
            ),
            "revision": _d(
                {"type": "string", "pattern": REVISION},
                "commit (40 hex digits) of the model repo the fetch step downloads and the "
                "engine loads; without it the fetch step resolves main at fetch time",
            ),
            "allow_moving_tag": _obj(
                {"reason": {"type": "string", "minLength": 10, "pattern": WORD}},
                ["reason"],
                "accept a moving image tag (latest, *nightly*): say why the image cannot be "
                "pinned by a release tag or a digest",
            ),
            "image_info": _obj(
                {
                    **{
                        name: _d(
                            {"type": "string", "pattern": RELEASE},
                            f"nearest upstream {name} release the image carries",
                        )
                        for name in sorted(ENGINES)
                    },
                    "cudnn": {"type": "boolean"},
                    "torch": _d(
                        {"type": "string", "pattern": RELEASE},
                        "PyTorch release the image carries (spells the flight-recorder variables)",
                    ),
                    "extras": {
                        "type": "array",
                        "items": {"type": "string", "pattern": r"^#[0-9]{1,7}$"},
                    },
                },
                desc="facts about an image its engine does not list (sparkrack/serving/engines/)",
            ),
            "topology": _obj(
                topology, ["tp"], "parallelism; the node count comes from the inventory"
            ),
            "transport": _d({"enum": list(TRANSPORTS)}, "NCCL transport (default roce)"),
            **sections,
            "env": _d(
                {
                    "type": "object",
                    "propertyNames": {"type": "string", "pattern": ENV_NAME},
                    "additionalProperties": {"type": "string", "pattern": WORD},
                },
                "extra environment (escape hatch; keys sparkrack sets are refused)",
            ),
            "extra_args": _d(
                {"type": "array", "items": {"type": "string", "pattern": WORD}},
                "extra CLI words appended verbatim (escape hatch; flags sparkrack owns are refused)",
            ),
            "model_info": model_info,
            "provenance": provenance,
            "patches": _d(
                {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "SM121 patch ids this recipe requires (sparkrack.patches.PATCH_IDS)",
            ),
        },
        "allOf": [
            {
                "if": {"properties": {"engine": {"const": name}}},
                "then": {
                    "properties": {
                        s: False
                        for other, secs in engine_sections.items()
                        if other != name
                        for s in secs
                        if s not in engine_sections[name]
                    }
                },
            }
            for name in sorted(ENGINES)
        ],
    }


def schema_text() -> str:
    return json.dumps(build_schema(), indent=2) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(schema_text())
