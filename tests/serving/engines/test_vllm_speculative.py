"""``vllm.speculative_config``: every field of the real ``SpeculativeConfig`` is either allowed
with an exact form or refused, and a field that names a repo or a path never reaches vLLM
unchecked (the draft ``model`` is a repo id gated by ``serving_remote_code_repos``)."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.errors import SparkrackError
from sparkrack.serving.engines import ENGINES
from sparkrack.serving.engines.vllm_speculative import SPECULATIVE_FIELDS, SPECULATIVE_REFUSED
from sparkrack.serving.profile.load import load_profile
from sparkrack.serving.trust import RULE_REMOTE_CODE, Trust, trust_problems

ROOT = Path(__file__).resolve().parents[3]
PROFILE = ROOT / "model_profiles" / "nemotron-3-super-120b-a12b-nvfp4-vllm.yml"


def real_fields(version: str) -> set[str]:
    """The fields of ``SpeculativeConfig`` in vLLM ``version``'s own source (read, not imported),
    from its engine-check environment (built when missing)."""
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(ROOT / ".cache"))
    from sparkrack.serving.enginecheck import upstream

    env = upstream.ensure_env("vllm", version)
    source = env / "engine" / "vllm" / "config" / "speculative.py"
    tree = ast.parse(source.read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SpeculativeConfig"]
    return {
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def unclassified(fields: set[str]) -> set[str]:
    return fields - set(SPECULATIVE_FIELDS) - set(SPECULATIVE_REFUSED)


@pytest.mark.tools  # the engine-check environment, from PyPI once, cached under .cache/
@pytest.mark.parametrize("version", sorted({f.version for f in ENGINES["vllm"].images.values()}))
def test_every_field_of_the_real_class_is_allowed_or_refused(version: str) -> None:
    fields = real_fields(version)
    assert unclassified(fields) == set()
    assert set(SPECULATIVE_FIELDS) <= fields  # nothing allowed that vLLM does not read
    assert not set(SPECULATIVE_FIELDS) & set(SPECULATIVE_REFUSED)
    # Negative control: a field a later vLLM adds is caught until it is classified.
    assert unclassified(fields | {"draft_tokenizer"}) == {"draft_tokenizer"}


def profile_with(tmp_path: Path, spec: dict[str, Any], trust_remote_code: bool = True) -> Path:
    data = yaml.safe_load(PROFILE.read_text())
    data["vllm"]["speculative_config"] = {**data["vllm"]["speculative_config"], **spec}
    data["vllm"]["trust_remote_code"] = trust_remote_code
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "copied.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "spec",
    [
        {"draft_load_config": {"download_dir": "/root"}},
        {"code_revision": "main"},
        {"draft_model_config": {"trust_remote_code": True}},
        {"tokenizer": "attacker/tokenizer"},
        {"model": "/root/.cache/draft"},
        {"model": "../../draft"},
        {"quantization": "/tmp/plugin.py"},
        {"moe_backend": "--trust-remote-code"},
        {"speculative_token_tree": "__import__('os')"},
    ],
)
def test_a_field_that_names_a_path_or_loads_code_is_refused(
    tmp_path: Path, spec: dict[str, Any]
) -> None:
    path = profile_with(tmp_path, spec)
    with pytest.raises(SparkrackError) as refused:
        load_profile(str(path))
    [problem] = refused.value.problems
    [name] = spec
    assert problem.file == str(path)
    assert problem.key == f"vllm.speculative_config.{name}"
    assert problem.rule == "schema" and problem.fix
    if name in SPECULATIVE_REFUSED:  # a field vLLM reads: refused with its reason
        assert problem.message == f"is not for a profile to set: it {SPECULATIVE_REFUSED[name]}"
        assert problem.fix == "remove it"
    # Negative control: the shipped speculative config loads.
    load_profile(str(profile_with(tmp_path / "shipped", {})))


def test_a_draft_repo_with_remote_code_is_gated_by_the_inventory(tmp_path: Path) -> None:
    profile = load_profile(str(profile_with(tmp_path, {"model": "attacker/drafter"})))
    engine = ENGINES["vllm"]
    trust = Trust(images=("vllm/",), allow_undigested_privileged=True)
    trusting_model = Trust(trust.images, True, (profile.model,))
    [problem] = trust_problems(profile, engine, trusting_model)
    assert (problem.key, problem.rule) == ("vllm.speculative_config.model", RULE_REMOTE_CODE)
    assert "attacker/drafter" in problem.fix and "serving_remote_code_repos" in problem.fix
    # Negative controls: listed, it runs; the model's own code alone is what the inventory lists.
    listed = Trust(trust.images, True, (profile.model, "attacker/drafter"))
    assert trust_problems(profile, engine, listed) == []
    shipped = load_profile(str(profile_with(tmp_path / "shipped", {})))
    assert trust_problems(shipped, engine, trusting_model) == []
