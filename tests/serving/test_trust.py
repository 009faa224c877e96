"""The inventory decides what code runs: trusted image prefixes, digests for privileged images,
the model repos whose own code may run. Refusals name the profile's file, key and fix, and
come before anything renders."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sparkrack import contract
from sparkrack.errors import SparkrackError
from sparkrack.serving import Profile, load_profile, resolve
from sparkrack.serving.context import ServingContext, context_from_inventory
from sparkrack.serving.deployments.bundle import from_inventory, render_serving, single
from sparkrack.serving.engines import engine_of
from sparkrack.serving.trust import (
    RULE_DIGEST,
    RULE_IMAGE,
    RULE_REMOTE_CODE,
    Trust,
    code_sources,
    repository,
    trust_of,
    trust_problems,
)

DIGEST = "@sha256:" + "a" * 64


@pytest.fixture(scope="module")
def ctx() -> ServingContext:
    return context_from_inventory("inventories/example")


def rules(profile: Profile, trust: Trust) -> list[str]:
    return [p.rule for p in trust_problems(profile, engine_of(profile.data), trust)]


def changed(name: str, **changes: object) -> Profile:
    base = load_profile(name)
    data = copy.deepcopy(base.data)
    for key, value in changes.items():
        section, _, sub = key.partition("__")
        if sub:
            data.setdefault(section, {})[sub] = value
        else:
            data[key] = value
    return Profile(base.name, Path(f"/profiles/{name}.yml"), data)


@pytest.mark.parametrize(
    ("image", "trusted"),
    [
        ("scitrera/dgx-spark-sglang:0.5.10", True),
        (f"scitrera/dgx-spark-sglang:0.5.10{DIGEST}", True),
        (f"scitrera/dgx-spark-sglang{DIGEST}", True),
        ("scitrera/dgx-spark-sglang-evil:0.5.10", False),
        ("docker.io/scitrera/dgx-spark-sglang:0.5.10", False),
        ("evil.example/scitrera/dgx-spark-sglang:0.5.10", False),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc9", True),
        ("nvcr.io/nvidia/tensorrt-llm/other:1", True),
        ("nvcr.io/nvidia/tensorrt-llm-evil/release:1", False),
        ("localhost:5000/scitrera/dgx-spark-sglang:1", False),
    ],
)
def test_image_prefixes_match_at_a_path_boundary(image: str, trusted: bool) -> None:
    trust = trust_of(
        {"serving_trusted_images": ["scitrera/dgx-spark-sglang", "nvcr.io/nvidia/tensorrt-llm/"]}
    )
    assert trust.trusts_image(image) is trusted


def test_repository_drops_tag_and_digest_but_keeps_a_registry_port() -> None:
    assert repository(f"localhost:5000/a/b:1{DIGEST}") == "localhost:5000/a/b"
    assert repository("a/b") == "a/b"


def test_nothing_is_trusted_by_default() -> None:
    profile = load_profile("glm-4.7-nvfp4")
    assert rules(profile, trust_of({})) == [RULE_IMAGE, RULE_REMOTE_CODE]


def test_the_example_inventory_trusts_every_shipped_profile(ctx: ServingContext) -> None:
    for name in ("glm-4.7-nvfp4", "gemma-4-31b-it", "nemotron-3-super-120b-a12b-nvfp4-trtllm"):
        assert rules(load_profile(name), ctx.trust) == [], name


def test_a_foreign_image_is_refused_whatever_its_image_info_says(ctx: ServingContext) -> None:
    profile = changed(
        "glm-4.7-nvfp4",
        image="registry.example/own/sglang:0.5.13",
        image_info={"sglang": "0.5.13", "cudnn": True},
    )
    [problem] = trust_problems(profile, engine_of(profile.data), ctx.trust)
    assert (problem.file, problem.key, problem.rule) == (str(profile.source), "image", RULE_IMAGE)
    assert "image_info is not believed" in problem.message
    assert "serving_trusted_images" in problem.fix


def test_a_privileged_image_needs_a_digest_unless_the_inventory_allows_tags(
    ctx: ServingContext,
) -> None:
    strict = replace(ctx.trust, allow_undigested_privileged=False)
    sglang = load_profile("gemma-4-31b-it")  # SGLang ranks run privileged
    assert rules(sglang, strict) == [RULE_DIGEST]
    assert rules(changed("gemma-4-31b-it", image=sglang.image + DIGEST), strict) == []
    assert rules(sglang, ctx.trust) == []  # the example inventory allows tags
    # vLLM runs unprivileged: a tag is the inventory's trust in its prefix alone.
    assert rules(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm"), strict) == []


def test_remote_code_only_for_listed_repos(ctx: ServingContext) -> None:
    flipped = changed("gemma-4-31b-it", sglang__trust_remote_code=True)
    # The model's own code, and its drafter's, which SGLang loads with the same switch.
    model, draft = trust_problems(flipped, engine_of(flipped.data), ctx.trust)
    assert (model.key, model.rule) == ("sglang.trust_remote_code", RULE_REMOTE_CODE)
    assert "google/gemma-4-31B-it" in model.message
    assert (draft.key, draft.rule) == ("speculative.draft_model_path", RULE_REMOTE_CODE)
    assert "google/gemma-4-31B-it-assistant" in draft.fix
    foreign = changed("glm-4.7-nvfp4", model="attacker/GLM-4.7-NVFP4")
    assert rules(foreign, ctx.trust) == [RULE_REMOTE_CODE]
    listed = replace(
        ctx.trust,
        remote_code_repos=("google/gemma-4-31B-it", "google/gemma-4-31B-it-assistant"),
    )
    assert rules(flipped, listed) == []
    # Without trust_remote_code the drafter's code does not run: nothing to list.
    assert rules(load_profile("gemma-4-31b-it"), ctx.trust) == []


VLLM = "nemotron-3-super-120b-a12b-nvfp4-vllm"


def test_a_strangers_plugin_is_refused_whatever_trust_remote_code_says(
    ctx: ServingContext,
) -> None:
    """A copied vLLM profile whose model is a stranger's repo, with trust_remote_code off, still
    names a reasoning-parser plugin: the render would copy that repo's file for vLLM to import."""
    stranger = changed(VLLM, model="attacker/innocent-model", vllm__trust_remote_code=False)
    [problem] = trust_problems(stranger, engine_of(stranger.data), ctx.trust)
    assert (problem.file, problem.key, problem.rule) == (
        str(stranger.source),
        "vllm.reasoning_parser_plugin",
        RULE_REMOTE_CODE,
    )
    assert (
        "attacker/innocent-model" in problem.message and "serving_remote_code_repos" in problem.fix
    )
    with pytest.raises(SparkrackError) as err:
        render_serving(single(resolve(stranger, ctx)))
    assert [p.rule for p in err.value.problems] == [RULE_REMOTE_CODE]
    # Negative controls: the shipped profile (its model repo is listed) is accepted, and so is
    # the stranger's profile without the plugin.
    assert rules(load_profile(VLLM), ctx.trust) == []
    data = copy.deepcopy(stranger.data)
    del data["vllm"]["reasoning_parser_plugin"]
    assert rules(Profile(stranger.name, stranger.path, data), ctx.trust) == []


def test_a_vllm_draft_model_is_code_when_remote_code_is_on(ctx: ServingContext) -> None:
    spec = dict(load_profile(VLLM).data["vllm"]["speculative_config"], model="attacker/drafter")
    drafted = changed(VLLM, vllm__speculative_config=spec)
    [problem] = trust_problems(drafted, engine_of(drafted.data), ctx.trust)
    assert (problem.key, problem.rule) == ("vllm.speculative_config.model", RULE_REMOTE_CODE)
    off = changed(VLLM, vllm__speculative_config=spec, vllm__trust_remote_code=False)
    assert rules(off, replace(ctx.trust, remote_code_repos=(off.model,))) == []


def test_the_plan_names_every_code_source() -> None:
    from sparkrack.serving.trust import trust_facts

    profile = load_profile(VLLM)
    shown = trust_facts(profile, engine_of(profile.data))["remote_code"]
    assert shown.startswith("yes (runs the Python code of ")
    assert "imports /app/super_v3_reasoning_parser.py from" in shown


def test_render_refuses_an_untrusted_profile_before_rendering(ctx: ServingContext) -> None:
    profile = changed("gemma-4-31b-it", image="registry.example/own/sglang:0.5.11")
    with pytest.raises(SparkrackError) as err:
        render_serving(single(resolve(profile, ctx)))
    assert [p.rule for p in err.value.problems] == [RULE_IMAGE]
    # Negative control: the same profile under an inventory that trusts the registry renders.
    trusting = replace(ctx, trust=replace(ctx.trust, images=("registry.example/own",)))
    rendered = render_serving(single(resolve(profile, trusting)))
    assert rendered["summary"][0].startswith("deployment ")


def test_the_serving_plan_shows_the_code_that_runs_first() -> None:
    rendered = render_serving(from_inventory("inventories/example"))
    first = rendered["summary"][0]
    profile = load_profile("nemotron-3-super-120b-a12b-nvfp4")
    assert first.startswith(f"deployment {rendered['names'][0]} runs image {profile.image},")
    assert f"model {profile.model}@" in first
    assert "remote code: yes" in first
    assert rendered["deployments"][0]["plan"]["runs"]["remote_code"].startswith("yes")


def test_engines_mount_the_hf_cache_read_only_unless_the_models_code_runs(
    ctx: ServingContext,
) -> None:
    """A rank reads the node's HF cache through a read-only mount (a root engine container
    plants no link or file there) unless its model's own code runs, which transformers copies
    under HF_HOME/modules. Negative control: the same profile with its repo's code trusted keeps
    a writable cache."""

    def cache_mounts(rendered: dict[str, Any]) -> list[bool]:
        return [
            bool(m.get("readOnly"))
            for d in rendered["manifests"]
            if d["kind"] == "StatefulSet"
            for c in d["spec"]["template"]["spec"]["containers"]
            for m in c["volumeMounts"]
            if m["mountPath"] == contract.HF_CACHE_MOUNT
        ]

    gemma = load_profile("gemma-4-31b-it")
    mounts = cache_mounts(render_serving(single(resolve(gemma, ctx))))
    assert mounts and all(mounts)
    profile = changed("gemma-4-31b-it", sglang__trust_remote_code=True)
    repos = tuple({s.repo for s in code_sources(profile, engine_of(profile.data))})
    listed = replace(ctx, trust=replace(ctx.trust, remote_code_repos=repos))
    assert not any(cache_mounts(render_serving(single(resolve(profile, listed)))))
