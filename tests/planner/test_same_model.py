"""``sparkrack plan`` compares a profile's decode with another engine's profile of the same model
on as many Sparks: the multi-Spark vLLM profile against the SGLang one."""

from __future__ import annotations

import copy
import json

import pytest

from sparkrack.cli import main
from sparkrack.serving import load_profile
from sparkrack.serving.profile.capacity import plan_profile, same_model, unmatched

VLLM4 = "nemotron-3-super-120b-a12b-nvfp4-vllm4"
SGLANG = "nemotron-3-super-120b-a12b-nvfp4"
SHIPPED = [
    SGLANG,
    VLLM4,
    "nemotron-3-super-120b-a12b-nvfp4-vllm",
    "nemotron-3-super-120b-a12b-nvfp4-trtllm",
    "gemma-4-31b-it",
]


def test_the_vllm_profile_across_sparks_is_compared_with_the_sglang_one_only() -> None:
    shipped = [load_profile(n) for n in SHIPPED]
    (got,) = same_model(load_profile(VLLM4), shipped)
    assert (got.other.name, got.other.engine) == (SGLANG, "sglang")
    mine, other = plan_profile(load_profile(VLLM4)), plan_profile(load_profile(SGLANG))
    line = got.line()
    assert (
        f"{mine.roofline_tokens_per_s():.0f} vs {other.roofline_tokens_per_s():.0f} tok/s" in line
    )
    assert f"at most {mine.max_running_requests} vs {other.max_running_requests}" in line
    assert "both fit" in line


def test_a_profile_that_does_not_fit_is_named_in_the_comparison() -> None:
    data = copy.deepcopy(load_profile(VLLM4).data)
    data["name"] = "too-big"
    data["vllm"]["gpu_memory_utilization"] = 0.99  # more than a GB10 has free after the OS
    (got,) = same_model(data, [load_profile(SGLANG)])
    assert not got.plan.fits
    assert f"{SGLANG} fits, the other does not" in got.line()


def test_other_spark_counts_and_the_same_engine_are_not_compared() -> None:
    data = copy.deepcopy(load_profile(VLLM4).data)
    data["topology"]["tp"] = 2
    assert same_model(data, [load_profile(SGLANG)]) == []
    twin = copy.deepcopy(load_profile(VLLM4).data)
    twin["name"] = "another-vllm4"
    assert same_model(load_profile(VLLM4), [twin]) == []


def test_plan_prints_the_comparison_and_carries_it_in_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["plan", VLLM4])
    text = capsys.readouterr().out
    assert f"{VLLM4}: decode vs {SGLANG} (sglang, same model, tp/pp 4/1)" in text
    main(["plan", VLLM4, "--json"])
    (row,) = json.loads(capsys.readouterr().out)
    assert [c["profile"] for c in row["same_model"]] == [SGLANG]


VLLM2 = "nemotron-3-super-120b-a12b-nvfp4-vllm2"


def test_a_profile_with_no_peer_on_as_many_sparks_names_those_on_other_counts() -> None:
    shipped = [load_profile(n) for n in [*SHIPPED, VLLM2]]
    assert same_model(load_profile(VLLM2), shipped) == []
    note = unmatched(load_profile(VLLM2), shipped)
    assert note is not None and "on 2 Sparks, so no decode comparison" in note
    assert f"{SGLANG} (sglang, 4 Sparks)" in note and "(trtllm, 1 Spark)" in note
    assert VLLM4 not in note  # the same engine is no peer
    # One that has its comparison, and a one-Spark profile, get no note.
    assert unmatched(load_profile(VLLM4), shipped) is None
    assert unmatched(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm"), shipped) is None


def test_a_model_no_other_engine_serves_says_so() -> None:
    alone = [load_profile(VLLM2), load_profile(VLLM4)]
    note = unmatched(load_profile(VLLM2), alone)
    assert note is not None and "nothing to compare decode with" in note


def test_plan_prints_the_note_and_carries_it_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--format", "json", VLLM2]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["fits"] and row["same_model"] == []
    assert "no decode comparison" in row["same_model_note"]


def test_plan_loads_and_plans_each_shipped_profile_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sparkrack.cli.plan as cli_plan
    import sparkrack.serving as serving
    from sparkrack.serving.profile import capacity

    loads: list[str] = []
    planned: list[str] = []
    real_load, real_plan = serving.load_profile, capacity.plan_profile

    def load(ref: str) -> object:
        loads.append(ref)
        return real_load(ref)

    def plan(profile: object, **kwargs: object) -> object:
        planned.append(profile.name)  # type: ignore[attr-defined]
        return real_plan(profile, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(serving, "load_profile", load)
    monkeypatch.setattr(capacity, "plan_profile", plan)
    monkeypatch.setattr(cli_plan, "plan_profile", plan)
    main(["plan", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert len(out) > 2
    assert sorted(loads) == sorted(set(loads)) and len(loads) == len(out)
    # Once for its row, plus once for each profile it is compared with.
    assert len(planned) == len(out) + sum(len(p["same_model"]) for p in out)
