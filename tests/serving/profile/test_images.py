"""Image references: digests accepted everywhere, moving tags refused unless accepted with a
reason, facts by engine; model revisions pinned or warned about."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sparkrack.errors import Problem
from sparkrack.inputs.imageref import pin_state
from sparkrack.serving import engine_of, load_profile, profile_warnings, validate_profile
from sparkrack.serving.profile.images import image_slug

DIGEST = "sha256:" + "0123456789abcdef" * 4


REVISION = "0123456789abcdef0123456789abcdef01234567"


def moving(data: dict[str, Any]) -> list[Problem]:
    return [w for w in profile_warnings(data, "v.yml") if w.rule == "image-moving-tag"]


def test_a_moving_tag_is_refused_without_allow_moving_tag() -> None:
    data = copy.deepcopy(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm").data)
    del data["allow_moving_tag"]
    [problem] = validate_profile(data, "v.yml", nodes=1)
    assert (problem.file, problem.key, problem.rule) == ("v.yml", "image", "image-moving-tag")
    assert "allow_moving_tag" in problem.fix and "@sha256:" in problem.fix
    data = copy.deepcopy(load_profile("glm-4.7-nvfp4").data)
    data["image"] = "scitrera/dgx-spark-sglang:latest"
    data["image_info"] = {"sglang": "0.5.10", "cudnn": True}
    assert [p.rule for p in validate_profile(data, "g.yml", nodes=4)] == ["image-moving-tag"]


def test_allow_moving_tag_accepts_it_with_a_warning_naming_the_reason() -> None:
    data = copy.deepcopy(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm").data)
    assert validate_profile(data, "v.yml", nodes=1) == []
    [warning] = moving(data)
    assert warning.key == "image" and data["allow_moving_tag"]["reason"] in warning.message


def test_allow_moving_tag_needs_a_reason() -> None:
    data = copy.deepcopy(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm").data)
    for bad, key in (
        (True, "allow_moving_tag"),
        ({}, "allow_moving_tag"),
        ({"reason": "x"}, "allow_moving_tag.reason"),
    ):
        data["allow_moving_tag"] = bad
        problems = validate_profile(data, "v.yml", nodes=1)
        assert [(p.key, p.rule) for p in problems] == [(key, "schema")], bad


def test_a_digest_is_never_moving_and_keeps_its_tags_facts() -> None:
    data = copy.deepcopy(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm").data)
    del data["allow_moving_tag"]
    data["image"] = f"vllm/vllm-openai:cu130-nightly@{DIGEST}"
    assert validate_profile(data, "v.yml", nodes=1) == []
    assert moving(data) == []
    # allow_moving_tag on a pinned image accepts nothing: said, not refused.
    data["allow_moving_tag"] = {"reason": "left over from the nightly"}
    assert [w.key for w in moving(data)] == ["allow_moving_tag"]
    # The pinned digest of a known tag keeps that tag's facts (the engine release it carries).
    facts = engine_of(data).image_facts(data)
    assert facts is not None and facts.version == "0.19.0"


def test_a_digest_only_image_states_its_facts() -> None:
    data = copy.deepcopy(load_profile("glm-4.7-nvfp4").data)
    data["image"] = f"scitrera/dgx-spark-sglang@{DIGEST}"
    assert [p.rule for p in validate_profile(data, "g.yml", nodes=4)] == ["image-facts"]
    data["image_info"] = {"sglang": "0.5.10", "cudnn": True}
    assert validate_profile(data, "g.yml", nodes=4) == []


def test_facts_of_one_engine_never_apply_to_another() -> None:
    data = copy.deepcopy(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm").data)
    data["image"] = "scitrera/dgx-spark-sglang:0.5.12"  # an SGLang image named by a vLLM profile
    assert engine_of(data).image_facts(data) is None


def test_an_unpinned_revision_warns_and_a_pinned_one_reaches_the_engine() -> None:
    from sparkrack.inputs.inventory import load_inventory
    from sparkrack.serving import context_from_vars, render_argv

    ctx = context_from_vars(load_inventory("inventories/example").plan(), {})
    for name in ("glm-4.7-nvfp4", "nemotron-3-super-120b-a12b-nvfp4-vllm"):
        profile = load_profile(name)
        data = copy.deepcopy(profile.data)
        [warning] = [w for w in profile_warnings(data, "p.yml") if w.rule == "revision-unpinned"]
        assert (warning.file, warning.key) == ("p.yml", "revision")
        assert "--revision" not in render_argv(profile, ctx, 0)
        data["revision"] = REVISION
        assert [w.rule for w in profile_warnings(data, "p.yml")].count("revision-unpinned") == 0
        pinned = type(profile)(profile.name, profile.path, data)
        argv = render_argv(pinned, ctx, 0)
        assert argv[argv.index("--revision") + 1] == REVISION


@pytest.mark.parametrize("bad", ["main", REVISION[:39], REVISION.upper(), REVISION + "\n", 7])
def test_a_revision_is_a_commit(bad: object) -> None:
    data = copy.deepcopy(load_profile("glm-4.7-nvfp4").data)
    data["revision"] = bad
    assert [(p.key, p.rule) for p in validate_profile(data, "g.yml", nodes=4)] == [
        ("revision", "schema")
    ]


def test_trtllm_refuses_a_revision_it_cannot_load() -> None:
    data = copy.deepcopy(load_profile("nemotron-3-super-120b-a12b-nvfp4-trtllm").data)
    assert validate_profile(data, "t.yml", nodes=1) == []
    data["revision"] = REVISION
    assert [p.rule for p in validate_profile(data, "t.yml", nodes=1)] == ["trtllm-revision"]


def test_image_slug_and_pin_state() -> None:
    tag = "vllm/vllm-openai:cu130-nightly"
    assert pin_state(tag) == "moving tag"
    assert pin_state("scitrera/dgx-spark-sglang:0.5.12") == "tag"
    assert pin_state(f"{tag}@{DIGEST}") == "digest"
    # One directory per image: the digest when pinned, else the reference (never shared).
    assert image_slug(f"{tag}@{DIGEST}") == DIGEST.replace(":", "-")
    assert image_slug("a/b:c") != image_slug("a-b:c")
    assert image_slug(tag) != image_slug(tag + "-2") and "/" not in image_slug(tag)
