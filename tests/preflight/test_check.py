"""``sparkrack check``: the real-parser check runs when it can and says when it cannot, the
report's verdict follows its problems, and the preflight play runs the same check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from hostile_inventory_corpus import owned

from sparkrack.cli import main
from sparkrack.inputs.inventory import load_inventory
from sparkrack.preflight.check import RULE_UNDIGESTED, Report, check_inventory

ROOT = Path(__file__).resolve().parents[2]
TRTLLM = ROOT / "model_profiles" / "nemotron-3-super-120b-a12b-nvfp4-trtllm.yml"


def one_spark_inventory(tmp_path: Path, extra_args: list[str]) -> Path:
    profile = yaml.safe_load(TRTLLM.read_text())
    profile["extra_args"] = extra_args
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "trtllm.yml").write_text(yaml.safe_dump(profile))
    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "example", inv)
    owned(inv)
    path = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(path.read_text())
    data["serving_profile"] = str(tmp_path / "trtllm.yml")
    path.write_text(yaml.safe_dump(data))
    return inv


def test_the_engine_check_says_when_it_could_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKRACK_CACHE_DIR", str(tmp_path / "empty"))
    shutil.copytree(ROOT / "inventories" / "example", tmp_path / "inv")
    owned(tmp_path / "inv")
    report = check_inventory(load_inventory(tmp_path / "inv"))
    [line] = [x for x in report.lines if x.startswith("engine check ")]
    assert "NOT RUN, sglang 0.5.13: not in the engine-check cache" in line
    assert report.ok  # not run is said, not counted as passed or failed
    skipped = check_inventory(load_inventory(tmp_path / "inv"), engine_check=False)
    assert "engine check: NOT RUN (--no-engine-check)" in skipped.lines


def test_the_engine_check_refuses_what_the_engines_parser_refuses(tmp_path: Path) -> None:
    """TensorRT-LLM checks against its source table, so this runs without any cache."""
    good = check_inventory(load_inventory(one_spark_inventory(tmp_path / "good", [])))
    assert good.ok and any(line.endswith("trtllm 1.3.0rc9 ok") for line in good.lines)
    # An allowed option without its value: validation lets it through, the engine's parser not.
    bad = check_inventory(load_inventory(one_spark_inventory(tmp_path / "bad", ["--log_level"])))
    assert [p.rule for p in bad.problems] == ["engine-check"]
    assert "--log_level needs a value" in bad.problems[0].message
    assert any("refused (see below)" in line for line in bad.lines)


def test_the_verdict_follows_the_problems() -> None:
    report = Report("inv")
    assert report.ok and report.verdict().startswith("check: OK")
    from sparkrack.errors import Problem

    report.refuse([Problem("f", "k", "m", "x", "r")] * 2)
    assert not report.ok and report.verdict().startswith("check: REFUSED, 1 problem(s)")
    assert report.text()[-2:] == ["f: k: m — fix: x [r]", report.verdict()]


def test_check_exits_0_1_and_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "-i", "inventories/lab", "--no-engine-check"]) == 0
    bad = one_spark_inventory(tmp_path, [])
    (bad / "group_vars" / "all.yml").write_text(
        (bad / "group_vars" / "all.yml").read_text() + "serving_api_port: abc\n"
    )
    assert main(["check", "-i", str(bad), "--no-engine-check"]) == 1
    assert main(["check", "-i", str(tmp_path / "absent")]) == 2
    out = capsys.readouterr().out
    assert "serving_api_port: is the text 'abc', not a whole number" in out


@pytest.mark.parametrize("name", ["lab", "example"])
def test_privileged_images_run_by_tag_are_named_in_one_warning(tmp_path: Path, name: str) -> None:
    """Both shipped inventories let the SGLang ranks, which run privileged, pull by tag: check
    says so in one line naming the images (M7)."""
    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / name, inv)
    if name == "example":
        owned(inv)
    report = check_inventory(load_inventory(inv), engine_check=False)
    [warning] = [w for w in report.warnings if w.rule == RULE_UNDIGESTED]
    assert warning.file == str(inv / "group_vars" / "all.yml")
    assert warning.key == "serving_allow_undigested_privileged"
    assert "xomoxcc/dgx-spark-sglang:" in warning.message and "\n" not in str(warning)
    assert "vllm/vllm-openai" not in warning.message  # one Spark, not privileged
    assert len([line for line in report.text() if RULE_UNDIGESTED in line]) == 1
    # Negative control: with the switch off the warning goes, and the tag is refused instead.
    path = inv / "group_vars" / "all.yml"
    path.write_text(
        path.read_text().replace(
            "serving_allow_undigested_privileged: true",
            "serving_allow_undigested_privileged: false",
        )
    )
    strict = check_inventory(load_inventory(inv), engine_check=False)
    assert [w for w in strict.warnings if w.rule == RULE_UNDIGESTED] == []
    assert "privileged-image-digest" in [p.rule for p in strict.problems]
