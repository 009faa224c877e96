"""The rule table itself, and how rule problems add up (every rule has an entry in the hostile
corpus, tests/hostile_corpus.py, which tests/serving/profile/test_hostile_profiles.py runs through the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hostile_corpus import build, by_id

from sparkrack.errors import SparkrackError
from sparkrack.serving import all_rules, load_checked, validate_profile


def test_rule_ids_unique_and_sourced() -> None:
    ids = [r.id for r in all_rules()]
    assert len(ids) == len(set(ids))
    for r in all_rules():
        assert r.seed and r.summary, r.id


def test_load_checked_raises_with_every_problem(tmp_path: Path) -> None:
    data = yaml.safe_load(build(by_id("ultra-mfs-085")))
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
