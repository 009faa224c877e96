"""``sparkrack plan -i``'s outage (old engine stopped -> new one ready) for every shipped
profile, and its engine-load model against the published load figures.

The figures (:data:`PUBLISHED`, sources in docs/switch-estimate.md) are split in two. The
**fit** figure set :data:`sparkrack.planner.switch.LOAD_MBYTE_S`: src:ultra-post (Ultra, 83.72 GB per
GPU, ~490 s). The **held-out** figure played no part in choosing the rate and is only compared:
MiniMax M2.7 on 2 Sparks with SGLang at TP=2, 67 GB of weights per rank in about 5 minutes
(al-engr.com, "minimax-sglang-debug"). Every figure's error is printed in one table
(``pytest -s`` shows it) and held to ±25 %; the held-out figure misses it today (+31 %), marked
as a strict expected failure that names the error, so a better model turns it into a failure
to update. The other published figures (549.6 s in vllm#56824; 216 s at ~850 MB/s) come
without the bytes per rank a comparison needs and stay out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.cli import main
from sparkrack.planner.switch import LOAD_MBYTE_S, OUTAGE_PHASES, Rates, predict, within

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted(p.stem for p in (ROOT / "model_profiles").glob("*.yml"))
TOLERANCE = 0.25

PUBLISHED = {
    # profile: (GB per GPU, seconds to load, source)
    "nemotron-3-ultra-550b-a55b-nvfp4": (83.72, 490.0, "src:ultra-post"),
}


@dataclass(frozen=True)
class LoadFigure:
    """A published weight load on GB10 ranks: the bytes each rank loads and how long it took."""

    model: str
    ranks: int
    gb_per_rank: float
    seconds: float
    source: str
    role: str
    """``fit`` (the rate was chosen from it) or ``held-out`` (only compared)."""

    def predicted_s(self) -> float:
        p = predict(int(self.ranks * self.gb_per_rank * 1e9), self.ranks - 1, 1, DEFAULT_RATES)
        load = p.seconds("engine load")
        assert load is not None
        return load

    def error(self) -> float:
        return self.predicted_s() / self.seconds - 1


LOAD_FIGURES = (
    LoadFigure("Nemotron-3-Ultra NVFP4 (SGLang TP=4 EP=4)", 4, 83.72, 490.0, "src:ultra-post", "fit"),
    LoadFigure(
        "MiniMax M2.7 (SGLang TP=2)", 2, 67.0, 300.0, "al-engr.com minimax-sglang-debug", "held-out"
    ),
)
DEFAULT_RATES = Rates(100_000, 1_000, 3_000)
"""The example inventory's rates: a disk faster than the loader, so the load is the loader's."""
HELD_OUT_MISS = "held-out figure outside ±25 % today: the model predicts 392 s, +31 %"


def _inventory(tmp_path: Path, profile: str) -> str:
    inv = tmp_path / profile
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text((ROOT / "inventories/example/hosts.yml").read_text())
    base = yaml.safe_load((ROOT / "inventories/example/group_vars/all.yml").read_text())
    base["serving_profile"] = profile
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(base))
    return str(inv)


def plan_switch(
    tmp_path: Path, profile: str, capsys: pytest.CaptureFixture[str]
) -> tuple[str, dict[str, Any]]:
    """The deployment's name and its switch estimate, from ``plan -i --format json``."""
    assert main(["plan", "-i", _inventory(tmp_path, profile), "--format", "json"]) == 0
    ((name, switch),) = json.loads(capsys.readouterr().out)["switch"].items()
    return name, dict(switch)


@pytest.mark.parametrize("profile", PROFILES)
def test_plan_prints_the_outage_apart_from_the_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], profile: str
) -> None:
    name, switch = plan_switch(tmp_path, profile, capsys)
    phases = switch["phases"]
    assert switch["outage_s"] == pytest.approx(sum(phases[name] for name in OUTAGE_PHASES), abs=0.1)
    # The old model serves through download and copy: the outage is a part of the total.
    assert 0 < switch["outage_s"] < switch["ready_s"]
    assert main(["plan", "-i", _inventory(tmp_path / "t", profile)]) == 0
    out = capsys.readouterr().out
    shown = re.search(
        rf"^{re.escape(name)}: down (\d+) s \(old engine stopped -> new one ready\), "
        r"(\d+) s from the switch's start to ready$",
        out,
        re.M,
    )
    assert shown is not None, out
    assert int(shown[1]) == pytest.approx(switch["outage_s"], abs=1)
    assert int(shown[2]) == pytest.approx(switch["ready_s"], abs=1)
    assert "outage " in out


@pytest.mark.parametrize("profile", sorted(PUBLISHED))
def test_the_outage_matches_the_published_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], profile: str
) -> None:
    per_gpu_gb, seconds, source = PUBLISHED[profile]
    _, switch = plan_switch(tmp_path, profile, capsys)
    ranks = switch["peers"] + 1
    # plan's share per rank is the checkpoint's bytes over the ranks (78.7 GB for Ultra), the
    # source's figure is the weights in GPU memory: within 10 % of each other.
    assert switch["model_bytes"] / ranks / 1e9 == pytest.approx(per_gpu_gb, rel=0.10)
    assert within(switch["outage_s"], seconds, TOLERANCE), (source, switch["outage_s"])


def test_the_load_check_can_fail() -> None:
    """Negative control: the disk-rate model this replaced (each rank's share at the disk's
    3 GB/s) is far outside the tolerance of src:ultra-post's 490 s."""
    disk_bound = Rates(100_000, 1_000, 3_000, loader_mbyte_s=float("inf"))
    p = predict(int(4 * 83.72e9), peers=3, rails=1, rates=disk_bound)
    assert p.outage_s == pytest.approx(27.9, abs=0.1)
    assert not within(p.outage_s, 490.0, TOLERANCE)
    # A disk slower than the loader's copy bounds the load.
    slow_disk = predict(int(4 * 83.72e9), 3, 1, Rates(100_000, 1_000, 100))
    assert slow_disk.seconds("engine load") == pytest.approx(837.2)


def test_the_load_rate_is_set_by_the_fit_figures_alone() -> None:
    fit = [f for f in LOAD_FIGURES if f.role == "fit"]
    rate = sum(f.gb_per_rank * 1e3 for f in fit) / sum(f.seconds for f in fit)
    assert round(rate) == round(LOAD_MBYTE_S), (rate, LOAD_MBYTE_S)


def test_the_load_errors_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        f"{f.role:<8} {f.model:<42} {f.gb_per_rank:6.2f} GB {f.seconds:6.0f} s "
        f"predicted {f.predicted_s():6.0f} s  {100 * f.error():+5.0f} %  ({f.source})"
        for f in LOAD_FIGURES
    ]
    with capsys.disabled():
        print("\nengine load against published figures (tolerance ±25 %):")
        print("\n".join(rows))
    assert len(rows) == len(LOAD_FIGURES) and {f.role for f in LOAD_FIGURES} == {"fit", "held-out"}


@pytest.mark.parametrize(
    "figure",
    [
        pytest.param(
            f,
            id=f"{f.role}-{f.ranks}x{f.gb_per_rank}GB",
            marks=[pytest.mark.xfail(strict=True, reason=HELD_OUT_MISS)]
            if f.role == "held-out"
            else [],
        )
        for f in LOAD_FIGURES
    ],
)
def test_the_engine_load_is_within_tolerance_of_each_published_figure(figure: LoadFigure) -> None:
    assert within(figure.predicted_s(), figure.seconds, TOLERANCE), (
        f"{figure.model}: predicted {figure.predicted_s():.0f} s against {figure.seconds:.0f} s "
        f"({100 * figure.error():+.0f} %, {figure.source})"
    )
