"""``sparkrack images -i INV``: every image the inventory runs, its pin state marked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from sparkrack.cli import main
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.inputs.inventory import load_inventory
from sparkrack.serving.deployments import gateway

DIGEST = "sha256:" + "0123456789abcdef" * 4


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().out


def test_lists_every_deployment_the_fetch_image_and_the_gateway(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = run(["images", "-i", "inventories/lab", "--json"], capsys)
    assert code is ExitCode.OK
    rows = {r["used_by"]: r for r in json.loads(out)}
    deployments = [k for k in rows if k.startswith("deployment ")]
    assert len(deployments) == 3
    copier = rows["weight copy (push and receiver Jobs)"]["image"]
    assert copier == load_inventory("inventories/lab").var("serving_fetch_image")
    assert rows["gateway (LiteLLM)"]["image"] == gateway.IMAGE
    vllm = next(r for k, r in rows.items() if "super-vllm" in k)
    assert (vllm["image"], vllm["pin"]) == ("vllm/vllm-openai:cu130-nightly", "moving tag")
    assert {r["pin"] for k, r in rows.items() if "super-vllm" not in k} == {"tag"}


def test_table_marks_moving_tags_and_digests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "inv"
    shutil.copytree("inventories/example", inv)
    profile = yaml.safe_load(
        Path("model_profiles/nemotron-3-super-120b-a12b-nvfp4.yml").read_text()
    )
    profile["image"] = f"{profile['image']}@{DIGEST}"
    (tmp_path / "pinned.yml").write_text(yaml.safe_dump(profile))
    group_vars = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(group_vars.read_text())
    data["serving_profile"] = str(tmp_path / "pinned.yml")
    data["serving_fetch_image"] = f"example.org/fetch:1@{DIGEST}"
    group_vars.write_text(yaml.safe_dump(data))
    code, out = run(["images", "-i", str(inv)], capsys)
    assert code is ExitCode.OK
    lines = out.splitlines()
    assert len(lines) == 4
    assert "digest" in lines[0] and DIGEST in lines[0]
    assert "digest" in lines[1] and "example.org/fetch:1" in lines[1]
    assert "stall watchdog" in lines[2] and "tag " in lines[2]
    assert "MOVING TAG" not in out
    code, out = run(["images", "-i", "inventories/lab"], capsys)
    assert "MOVING TAG  vllm/vllm-openai:cu130-nightly" in out
