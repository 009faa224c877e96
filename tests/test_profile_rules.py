"""Every rule against the corpus of bad profiles (tests/data/bad_profiles/*.yml).

Each corpus file names the one rule id it must be refused with (``# expect: <id>``); every rule
has at least one corpus file; every refusal is a complete ``<file>: <key>: <message> [<id>]``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sparkrack.errors import SparkrackError
from sparkrack.profiles import all_rules, load_checked, validate_profile
from sparkrack.profiles.engines import engine

CORPUS = sorted((Path(__file__).parent / "data" / "bad_profiles").glob("*.yml"))
LINE = re.compile(
    r"^(?P<file>[^:]+): (?P<key>[^:]+): (?P<msg>.+) — fix: (?P<fix>.+) \[(?P<rule>[a-z0-9-]+)\]$"
)


def expected_rule(path: Path) -> str:
    match = re.search(r"^# expect: (\S+)$", path.read_text(), re.MULTILINE)
    assert match, f"{path.name} has no '# expect: <rule-id>' line"
    return match.group(1)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_bad_profile_refused_with_its_rule(path: Path) -> None:
    problems = validate_profile(yaml.safe_load(path.read_text()), str(path), nodes=4)
    assert problems, f"{path.name} was accepted"
    assert {p.rule for p in problems} == {expected_rule(path)}
    for problem in problems:
        line = LINE.match(str(problem))
        assert line, f"malformed refusal: {problem}"
        assert line["file"] == str(path)
        assert problem.fix


def test_every_rule_has_a_corpus_case() -> None:
    covered = {expected_rule(p) for p in CORPUS}
    # The SGLang/seed 000-003 rules; engine modules (vLLM, TensorRT-LLM) test their own rules.
    own = {r.id for r in engine("sglang").rule_list()} | {
        r.id for r in all_rules() if r.check.__module__ == "sparkrack.profiles.rules"
    }
    assert len(own) >= 20
    missing = sorted(own - covered)
    assert not missing, f"rules without a bad profile: {missing}"
    assert "schema" in covered


def test_rule_ids_unique_and_sourced() -> None:
    ids = [r.id for r in all_rules()]
    assert len(ids) == len(set(ids))
    for r in all_rules():
        assert r.seed and r.summary, r.id


def test_load_checked_raises_with_every_problem(tmp_path: Path) -> None:
    src = Path(__file__).parent / "data" / "bad_profiles" / "ultra-mfs-085.yml"
    data = yaml.safe_load(src.read_text())
    data["topology"]["ep"] = 3  # the 0.88 floor is measured at EP=4 only
    data["sglang"]["attention_backend"] = "triton"
    path = tmp_path / "two.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SparkrackError) as exc:
        load_checked(str(path), nodes=4)
    assert {p.rule for p in exc.value.problems} == {
        "topology-ep-divides-tp",
        "nemotronh-triton-attention",
    }


def test_node_count_comes_from_the_caller() -> None:
    data = yaml.safe_load((Path("model_profiles") / "gemma-4-31b-it.yml").read_text())
    assert validate_profile(data, "g.yml", nodes=None) == []
    assert [p.rule for p in validate_profile(data, "g.yml", nodes=2)] == ["topology-nodes"]
