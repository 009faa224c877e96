"""``extra_args`` is an allow-list per engine, and every option on it or refused by class is one the
engine's release defines: the real parser of each release (SGLang, vLLM) or the source table
(TensorRT-LLM) resolves it. The refusals themselves, through ``sparkrack validate``, are entries
of the hostile corpus (tests/hostile_corpus.py)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from sparkrack.serving import list_profiles, load_profile, validate_profile
from sparkrack.serving.engines import ENGINES
from sparkrack.serving.engines.base import EXTRA_ARGS_CLASS_RULES, RULE_EXTRA_NOT_ALLOWED
from sparkrack.serving.engines.trtllm import source_table

ROOT = Path(__file__).resolve().parents[3]
PROFILE = {
    "sglang": "glm-4.7-nvfp4",
    "vllm": "nemotron-3-super-120b-a12b-nvfp4-vllm",
    "trtllm": "nemotron-3-super-120b-a12b-nvfp4-trtllm",
}


def rules_of(engine: str, extra: list[str]) -> list[str]:
    data = copy.deepcopy(load_profile(PROFILE[engine]).data)
    data["extra_args"] = extra
    return [p.rule for p in validate_profile(data, "p.yml", nodes=None)]


@pytest.mark.parametrize("engine", sorted(PROFILE))
def test_every_allowed_option_validates_and_nothing_else_does(engine: str) -> None:
    eng = ENGINES[engine]
    assert eng.allowed_options, f"{engine} allows nothing"
    for option, takes_value in eng.allowed_options.items():
        assert rules_of(engine, [option, "1"] if takes_value else [option]) == [], option
    # Negative control: one letter changed, the option is no longer on the list.
    assert rules_of(engine, ["--x" + next(iter(eng.allowed_options))[3:]]) == [
        RULE_EXTRA_NOT_ALLOWED
    ]


@pytest.mark.parametrize("engine", sorted(PROFILE))
def test_every_refused_option_is_refused_by_its_class(engine: str) -> None:
    eng = ENGINES[engine]
    assert not set(eng.allowed_options) & set(eng.refused_options)
    owned = [o for o in [*eng.allowed_options, *eng.refused_options] if eng.owner_of(o)]
    assert not owned, f"{engine}: the table owns {owned}"
    for option, (klass, _why) in eng.refused_options.items():
        assert rules_of(engine, [option]) == [EXTRA_ARGS_CLASS_RULES[klass]], option


def test_the_refusal_names_file_key_and_fix() -> None:
    data = copy.deepcopy(load_profile(PROFILE["sglang"]).data)
    data["extra_args"] = ["--otlp-traces-endpoint", "collector:4317"]
    [problem] = validate_profile(data, "stranger.yml", nodes=None)
    assert (problem.file, problem.key, problem.rule) == (
        "stranger.yml",
        "extra_args",
        "extra-args-egress",
    )
    assert "sparkrack/serving/engines/sglang.py allows" in problem.fix
    assert "--log-level" in problem.fix


def test_no_shipped_profile_passes_an_option_off_the_list() -> None:
    for path in list_profiles():
        profile = load_profile(path.stem)
        eng = ENGINES[profile.data["engine"]]
        for word in profile.data.get("extra_args") or []:
            assert eng.extra_refusal(str(word)) is None, (path.stem, word)


def test_trtllm_options_are_in_its_source_table() -> None:
    options = source_table()["serve_options"]
    eng = ENGINES["trtllm"]
    for option, takes_value in eng.allowed_options.items():
        assert option in options and options[option]["flag"] is not takes_value, option
    assert set(eng.refused_options) <= set(options)


@pytest.mark.tools  # the engine-check environments, from PyPI once, cached under .cache/
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_options_are_the_real_parsers(engine: str) -> None:
    """Every allowed and refused option resolves in the real parser of each release the images
    carry (the engine-check environments, built when missing)."""
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(ROOT / ".cache"))
    from sparkrack.serving.enginecheck import upstream

    eng = ENGINES[engine]
    versions = sorted({f.version for f in eng.images.values()})
    words = [*eng.allowed_options, *eng.refused_options]
    for version in versions:
        dests = upstream.option_dests(engine, version, words)
        unknown = [word for word, dest in dests if dest is None]
        assert not unknown, (engine, version, unknown)
