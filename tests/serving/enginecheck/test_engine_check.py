"""Every shipped profile, every rank: the rendered command passes the real upstream engine's parser
and start-up checks of the release its image corresponds to (``sparkrack validate --engine-check``).

The negative controls that prove the check can fail (unknown flag, invalid choice, missing top-k,
NemotronH radix cache with no_buffer, unknown env) are in ``tests/serving/enginecheck/test_enginecheck.py``; here the
same harness refuses a shipped profile that has been broken the way the seeds' printouts were.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from sparkrack.serving import Profile, list_profiles, load_profile
from sparkrack.serving.context import ServingContext, context_from_inventory
from sparkrack.serving.enginecheck.check import Row, check_profiles, problems_of

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(ROOT / ".cache"))


@pytest.fixture(scope="module")
def ctx() -> ServingContext:
    return context_from_inventory("inventories/example")


@pytest.fixture(scope="module")
def rows(ctx: ServingContext) -> list[Row]:
    return check_profiles([load_profile(p.stem) for p in list_profiles()], ctx)


def test_every_shipped_profile_and_rank_passes_its_engine(rows: list[Row]) -> None:
    table = "\n".join(
        f"{r.profile:<42} rank {r.rank}  {r.engine} {r.version:<9} "
        f"{'ok' if r.ok and not r.unknown_env else 'FAIL ' + r.error[:200]}"
        + (f" unknown env {list(r.unknown_env)}" if r.unknown_env else "")
        for r in rows
    )
    print("\n" + table)
    ranks = {
        p.stem: (4 if load_profile(p.stem).data["engine"] == "sglang" else 1)
        for p in list_profiles()
    }
    assert sorted((r.profile, r.rank) for r in rows) == sorted(
        (name, rank) for name, count in ranks.items() for rank in range(count)
    )
    assert all(r.ok and not r.unknown_env for r in rows), table


def test_the_seed_printout_without_topk_is_refused_by_sglang(ctx: ServingContext) -> None:
    base = load_profile("glm-4.7-nvfp4")
    data = copy.deepcopy(base.data)
    del data["speculative"]["eagle_topk"]  # exactly the three flags src:roce-post printed
    broken = Profile("glm-4.7-nvfp4-as-printed", base.path, data)
    rows = check_profiles([broken], ctx)
    assert rows and not any(r.ok for r in rows)
    assert all("NoneType" in r.error for r in rows), [r.error for r in rows]
    problems = problems_of(rows, {broken.name: "glm.yml"})
    assert {p.rule for p in problems} == {"engine-check"}
    assert all(p.file == "glm.yml" for p in problems)


HOSTILE_EXTRA = {
    "sglang": [
        "--node-r",
        "--tensor-parallel-size",
        "--expert-parallel-s=4",
        "--model",
        "--config",
    ],
    "vllm": ["--tensor_parallel_size", "-tp", "--model", "--config", "--max_model_len"],
}


@pytest.mark.parametrize(
    ("name", "engine"),
    [("glm-4.7-nvfp4", "sglang"), ("nemotron-3-super-120b-a12b-nvfp4-vllm", "vllm")],
)
def test_extra_args_resolved_by_the_real_parser_are_refused(name: str, engine: str) -> None:
    from sparkrack.serving.enginecheck.check import extra_args_problems
    from sparkrack.serving.engines import engine_of

    base = load_profile(name)
    for word in HOSTILE_EXTRA[engine]:
        data = copy.deepcopy(base.data)
        data["extra_args"] = [word, "2"] if "=" not in word else [word]
        profile = Profile(name, base.path, data)
        problems = extra_args_problems(profile)
        assert [p.rule for p in problems] == ["extra-args-owned"], (word, problems)
        # The static rule, which validate runs without the engine, refuses the same word.
        assert engine_of(data).owner_of(word) is not None, word
    data = copy.deepcopy(base.data)
    data["extra_args"] = ["--random-seed", "1"] if engine == "sglang" else ["--seed", "1"]
    assert extra_args_problems(Profile(name, base.path, data)) == []


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_table_aliases_are_the_real_parsers(engine: str) -> None:
    """Every alias the static check knows resolves to its flag's destination upstream."""
    from sparkrack.serving.enginecheck import upstream as enginecheck
    from sparkrack.serving.engines import engine as get

    eng = get(engine)
    version = eng.upstream_version(
        load_profile(
            next(p.stem for p in list_profiles() if load_profile(p.stem).data["engine"] == engine)
        )
    )
    assert version is not None
    for knob in eng.knobs:
        if knob.flag and knob.aliases:
            words = [knob.flag, *knob.aliases]
            dests = {d for _w, d in enginecheck.option_dests(engine, version, words)}
            assert len(dests) == 1 and None not in dests, (knob.key, dests)
