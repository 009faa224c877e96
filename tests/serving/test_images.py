"""Image references: digests accepted everywhere, moving tags warned about, facts by engine."""

from __future__ import annotations

import copy

import pytest

from sparkrack.serving import load_profile, profile_warnings, validate_profile
from sparkrack.serving.images import image_facts, is_moving_tag

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("image", "moving"),
    [
        ("vllm/vllm-openai:cu130-nightly", True),
        ("vllm/vllm-openai:nightly-2026-11-01", True),
        ("ghcr.io/x/y:latest", True),
        ("scitrera/dgx-spark-sglang:0.5.12", False),
        (f"vllm/vllm-openai:cu130-nightly@{DIGEST}", False),
        (f"vllm/vllm-openai@{DIGEST}", False),
    ],
)
def test_moving_tags(image: str, moving: bool) -> None:
    assert is_moving_tag(image) is moving


def test_a_moving_tag_warns_and_a_digest_does_not() -> None:
    data = copy.deepcopy(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm").data)
    assert validate_profile(data, "v.yml", nodes=1) == []
    [warning] = profile_warnings(data, "v.yml")
    assert (warning.key, warning.rule) == ("image", "image-moving-tag")
    data["image"] = f"vllm/vllm-openai:cu130-nightly@{DIGEST}"
    assert validate_profile(data, "v.yml", nodes=1) == []
    assert profile_warnings(data, "v.yml") == []
    # The pinned digest of a known tag keeps that tag's facts (the engine release it carries).
    facts = image_facts(data)
    assert facts is not None and facts.engine == "vllm"


def test_a_digest_only_image_states_its_facts() -> None:
    data = copy.deepcopy(load_profile("glm-4.7-nvfp4").data)
    data["image"] = f"scitrera/dgx-spark-sglang@{DIGEST}"
    assert [p.rule for p in validate_profile(data, "g.yml", nodes=4)] == ["image-facts"]
    data["image_info"] = {"sglang": "0.5.10", "cudnn": True}
    assert validate_profile(data, "g.yml", nodes=4) == []


def test_facts_of_one_engine_never_apply_to_another() -> None:
    data = copy.deepcopy(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm").data)
    data["image"] = "scitrera/dgx-spark-sglang:0.5.12"  # an SGLang image named by a vLLM profile
    assert image_facts(data) is None
