"""Adding an engine is one module and one row of the engine table.

The fourth engine lives in ``fake_engine.py`` beside this file, and nowhere else; the tests add
its row to ``ENGINES`` (and take it out again). With that row a profile naming it passes the
schema the table makes, runs the generic rules and its own, plans its memory, and renders and
validates through the same render function the CLI and the serve role call.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import fake_engine
import pytest
import yaml

from sparkrack import contract
from sparkrack.cli import main
from sparkrack.errors import SparkrackError
from sparkrack.serving import ENGINES, load_profile, resolve, validate_profile
from sparkrack.serving.context import ServingContext, context_from_inventory
from sparkrack.serving.deployments.bundle import in_apply_order, render_serving, single
from sparkrack.serving.engines import Engine
from sparkrack.serving.trust import repository

PROFILE: dict[str, Any] = {
    "model": "example-org/fake-model-8b",
    "engine": fake_engine.NAME,
    "image": fake_engine.IMAGE,
    "topology": {"tp": 1},
    fake_engine.NAME: {"max_len": 4096, "gpu_share": 0.7, "fast_path": True},
    "model_info": {
        "architecture": "LlamaForCausalLM",
        "attention_heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "hidden_size": 4096,
        "layers": {"total": 32, "attention": 32},
        "params": {"total_b": 8},
        "quantization": "bf16",
    },
    "provenance": {"source": "roce-post", "image": fake_engine.IMAGE},
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The one table row."""
    monkeypatch.setitem(ENGINES, fake_engine.NAME, fake_engine.ENGINE)
    return fake_engine.ENGINE


@pytest.fixture(scope="module")
def ctx() -> ServingContext:
    """The example inventory, trusting the fake engine's image repository too."""
    base = context_from_inventory("inventories/example")
    images = (*base.trust.images, repository(fake_engine.IMAGE))
    return replace(base, trust=replace(base.trust, images=images))


def write(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "fake-model.yml"
    path.write_text(yaml.safe_dump({**PROFILE, **changes}, sort_keys=False))
    return path


def test_without_its_row_the_engine_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(SparkrackError, match="engine: 'fakeserve' is not one of"):
        load_profile(str(write(tmp_path)))


def test_a_profile_of_the_fourth_engine_validates_and_renders(
    fake: Engine, ctx: ServingContext, tmp_path: Path
) -> None:
    profile = load_profile(str(write(tmp_path)))
    assert validate_profile(profile.data, profile.source, nodes=len(ctx.plan.nodes)) == []
    res = resolve(profile, ctx)
    assert res.engine is fake
    assert res.engine.image_facts(profile.data) == fake_engine.ENGINE.images[fake_engine.IMAGE]
    assert 0 < res.footprint_gb < 128
    rendered = render_serving(single(res), source="fake engine")
    docs = in_apply_order(rendered, deployment=res.name)
    [sts] = [d for d in docs if d["kind"] == "StatefulSet"]
    pod = sts["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert container["name"] == fake_engine.NAME and container["image"] == fake_engine.IMAGE
    assert container["command"] == ["fakeserve", "run"]
    assert container["args"] == [
        "--model", PROFILE["model"], "--port", str(ctx.api_port),
        "--max-len", "4096", "--gpu-share", "0.7",
    ]  # fmt: skip
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FAKESERVE_FAST"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    # Scraped at the engine's default /metrics, pinned to one Spark, waiting for its weights.
    assert pod["metadata"]["annotations"][contract.PROMETHEUS_PATH_ANNOTATION] == "/metrics"
    assert "securityContext" not in container
    names = [c["name"] for c in pod["spec"]["initContainers"]]
    assert names == ["wait-weights", "wait-memory", "settle"]
    assert [d["kind"] for d in docs if d["kind"] == "Job"] == ["Job"]  # one Spark: no receivers
    assert rendered["deployments"][0]["served_name"] == PROFILE["model"]


def test_its_own_rule_runs_after_the_generic_ones(fake: Engine, tmp_path: Path) -> None:
    data = {**PROFILE, fake_engine.NAME: {"gpu_share": 0.99}, "extra_args": ["--max-len=8"]}
    rules = [p.rule for p in validate_profile(data, "fake.yml", nodes=1)]
    assert rules == ["extra-args-owned", "fakeserve-share"]


def test_the_cli_renders_it(
    fake: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path)
    assert main(["render", str(path), "-i", "inventories/example", "--what", "command"]) == 0
    assert capsys.readouterr().out.startswith("fakeserve run --model example-org/fake-model-8b ")
