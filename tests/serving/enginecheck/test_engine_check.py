"""Every shipped profile, every rank: the rendered command passes the real upstream engine's parser
and start-up checks of the release its image corresponds to (``sparkrack validate --engine-check``).

The negative controls that prove the check can fail (unknown flag, invalid choice, missing top-k,
NemotronH radix cache with no_buffer, unknown env) are in ``tests/serving/enginecheck/test_enginecheck.py``; here the
same harness refuses a shipped profile that has been broken the way the seeds' printouts were.
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sparkrack.serving import Profile, list_profiles, load_profile
from sparkrack.serving.context import ServingContext, context_from_inventory
from sparkrack.serving.enginecheck.check import (
    Row,
    check_profiles,
    check_resolved,
    problems_of,
)
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.vllm import VLLMAcrossSparks
from sparkrack.serving.engines.vllm_across import ACROSS_FLAGS
from sparkrack.serving.profile.knobs import RuntimeKnob
from sparkrack.serving.resolution import resolve

pytestmark = pytest.mark.tools  # engine environments from PyPI

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


def _spread(data: dict[str, Any]) -> int:
    topo = data.get("topology", {})
    return int(topo.get("tp", 1)) * int(topo.get("pp", 1)) if engine_of(data).uses_fabric else 1


def test_every_shipped_profile_and_rank_passes_its_engine(rows: list[Row]) -> None:
    table = "\n".join(
        f"{r.profile:<42} rank {r.rank}  {r.engine} {r.version:<9} "
        f"{'ok' if r.ok and not r.unknown_env else 'FAIL ' + r.error[:200]}"
        + (f" unknown env {list(r.unknown_env)}" if r.unknown_env else "")
        for r in rows
    )
    print("\n" + table)
    # SGLang and vLLM across Sparks: one rank per Spark, tp·pp of them (the example inventory
    # has 4; a 2-Spark profile alone runs on its first 2).
    ranks = {p.stem: _spread(load_profile(p.stem).data) for p in list_profiles()}
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
    # All hostile words in one profile: one parser process answers for them all, and each word
    # is still refused on its own (exactly one problem naming it).
    words = HOSTILE_EXTRA[engine]
    data = copy.deepcopy(base.data)
    data["extra_args"] = [w for word in words for w in ([word, "2"] if "=" not in word else [word])]
    problems = extra_args_problems(Profile(name, base.path, data))
    assert [p.rule for p in problems] == ["extra-args-owned"] * len(words), problems
    for word in words:
        flag = word.split("=", 1)[0]
        assert len([p for p in problems if p.message.startswith(f"{flag} ")]) == 1, (word, problems)
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
    aliased = {k.key: [k.flag, *k.aliases] for k in eng.knobs if k.flag and k.aliases}
    # One parser process resolves every knob's words; each word resolves on its own.
    dest_of = dict(
        enginecheck.option_dests(engine, version, [w for ws in aliased.values() for w in ws])
    )
    for key, words in aliased.items():
        dests = {dest_of[w] for w in words}
        assert len(dests) == 1 and None not in dests, (key, dests)


# --- vLLM across Sparks -------------------------------------------------------------------------

ACROSS = "nemotron-3-super-120b-a12b-nvfp4-vllm4"


def test_the_multi_node_flags_are_the_real_parsers() -> None:
    """ACROSS_FLAGS (read from the wheels) and the table's aliases resolve, in the release of the
    profile's image, to the destinations they name."""
    from sparkrack.serving.enginecheck import upstream as enginecheck

    profile = load_profile(ACROSS)
    eng = engine_of(profile.data)
    version = eng.upstream_version(profile)
    assert version is not None
    words = [f.flag for f in ACROSS_FLAGS]
    aliased = {
        k.key: [k.flag, *k.aliases]
        for k in eng.knobs
        if isinstance(k, RuntimeKnob) and k.flag and k.aliases
    }
    knob_words = [w for ws in aliased.values() for w in ws]
    # One parser process resolves every word; each word resolves on its own.
    resolved = enginecheck.option_dests("vllm", version, [*words, *knob_words])
    got = dict(resolved[: len(words)])
    assert got == {f.flag: f.dest for f in ACROSS_FLAGS}
    dest_of = dict(resolved)
    for key, knob_flags in aliased.items():
        dests = {dest_of[w] for w in knob_flags}
        assert len(dests) == 1 and None not in dests, (key, dests)


class PlantedFlag(VLLMAcrossSparks):
    """The table with one flag misspelled, as a wrong edit of it would render."""

    knobs = tuple(
        replace(k, flag="--master-adress") if k.flag == "--master-addr" else k
        for k in VLLMAcrossSparks.knobs
    )


class OneNode(VLLMAcrossSparks):
    """Every rank told it is the only node: tp 4 on one GB10."""

    def runtime_value(self, knob: RuntimeKnob, ctx: ServingContext, rank: Any) -> str | None:
        return "1" if knob.runtime == "nnodes" else super().runtime_value(knob, ctx, rank)


def test_every_rank_of_the_planted_wrong_flag_fails_naming_it(ctx: ServingContext) -> None:
    profile = load_profile(ACROSS)
    rows = check_resolved([resolve(profile, ctx, PlantedFlag())], offline=True)
    assert [r.rank for r in rows] == [0, 1, 2, 3]
    assert all(not r.ok and "unrecognized arguments: --master-adress" in r.error for r in rows)
    problems = problems_of(rows, {profile.name: profile.source})
    assert len(problems) == 4
    assert all("--master-adress" in p.message and p.rule == "engine-check" for p in problems)


TWO = "nemotron-3-super-120b-a12b-nvfp4-vllm2"


def test_the_two_spark_profile_passes_and_its_planted_wrong_flag_fails(ctx: ServingContext) -> None:
    """The sourced 2-Spark profile: both ranks pass vLLM 0.19.0; the same ranks with the
    misspelled flag fail, naming it (negative control)."""
    profile = load_profile(TWO)
    rows = check_resolved([resolve(profile, ctx)], offline=True)
    assert [(r.rank, r.version) for r in rows] == [(0, "0.19.0"), (1, "0.19.0")]
    assert all(r.ok and not r.unknown_env for r in rows), [r.error for r in rows]
    bad = check_resolved([resolve(profile, ctx, PlantedFlag(2))], offline=True)
    assert [r.rank for r in bad] == [0, 1]
    assert all(not r.ok and "unrecognized arguments: --master-adress" in r.error for r in bad)
    problems = problems_of(bad, {profile.name: profile.source})
    assert [p.file for p in problems] == [profile.source] * 2
    assert all("--master-adress" in p.message and p.rule == "engine-check" for p in problems)


def test_a_rank_without_the_node_count_is_refused_by_vllm(ctx: ServingContext) -> None:
    rows = check_resolved([resolve(load_profile(ACROSS), ctx, OneNode())], offline=True)
    assert rows and all(not r.ok for r in rows)
    assert all(
        "World size (4) is larger than the number of available GPUs (1) in this node" in r.error
        for r in rows
    )


# --- vLLM across Sparks on the later release the check pins (0.33.0) --------------------------


def _on_033(**vllm: Any) -> Profile:
    """The shipped profile on a vLLM 0.33.0 image: its env knobs that 0.33.0 no longer reads
    dropped (the check refuses them as unknown), ``vllm`` keys changed."""
    profile = load_profile(ACROSS)
    data = copy.deepcopy(profile.data)
    data["image"] = "vllm/vllm-openai:cu130-nightly-0123abc"
    data["image_info"] = {"vllm": "0.33.0"}
    for key in ("nvfp4_gemm_backend", "use_flashinfer_moe_fp4"):
        data["vllm"].pop(key)
    data["vllm"].update(vllm)
    return Profile(profile.name, profile.path, data)


def test_every_rank_passes_vllm_0_33_with_the_plugin_standing_in(ctx: ServingContext) -> None:
    # `vllm serve` imports the reasoning-parser plugin (a model repo file the pod's init container
    # copies) before 0.33.0's config looks the parser up by name; offline, a file that registers
    # the profile's --reasoning-parser name stands in for it.
    rows = check_resolved([resolve(_on_033(), ctx)])
    assert [(r.rank, r.version) for r in rows] == [(r, "0.33.0") for r in range(4)]
    assert all(r.ok and not r.unknown_env for r in rows), [r.error for r in rows]


def test_vllm_0_33_refuses_a_parser_no_plugin_registers(ctx: ServingContext) -> None:
    profile = _on_033(reasoning_parser="super_v9")
    del profile.data["vllm"]["reasoning_parser_plugin"]
    rows = check_resolved([resolve(profile, ctx)])
    assert rows and all(
        not r.ok and "Reasoning parser 'super_v9' not found" in r.error for r in rows
    )


def test_vllm_0_33_refuses_the_planted_wrong_flag_on_every_rank(ctx: ServingContext) -> None:
    profile = _on_033()
    rows = check_resolved([resolve(profile, ctx, PlantedFlag())])
    assert [r.rank for r in rows] == [0, 1, 2, 3]
    assert all(not r.ok and "--master-adress" in r.error for r in rows), [r.error for r in rows]


# --- vLLM data parallel across Sparks (test profiles, not shipped ones) ------------------------

DP_PROFILES = ROOT / "tests" / "data" / "profiles"


class PlantedDPFlag(VLLMAcrossSparks):
    """The table with the DP address misspelled, as a wrong edit of it would render."""

    knobs = tuple(
        replace(k, flag="--data-parallel-adress") if k.flag == "--data-parallel-address" else k
        for k in VLLMAcrossSparks.knobs
    )


@pytest.mark.parametrize(("name", "sparks"), [("vllm-dp2", 2), ("vllm-dp2-tp2", 4)])
def test_every_dp_rank_passes_vllm_and_its_planted_wrong_flag_fails(
    ctx: ServingContext, name: str, sparks: int
) -> None:
    """Each rank of a data-parallel profile (the head, the headless heads of the other DP ranks
    and their headless workers) passes vLLM 0.19.0's parser and EngineArgs -> VllmConfig; the
    same ranks with the DP address misspelled fail, naming it (negative control)."""
    profile = load_profile(DP_PROFILES / f"{name}.yml")
    rows = check_resolved([resolve(profile, ctx)], offline=True)
    assert [(r.rank, r.version) for r in rows] == [(r, "0.19.0") for r in range(sparks)]
    assert all(r.ok and not r.unknown_env for r in rows), [r.error for r in rows]
    bad = check_resolved([resolve(profile, ctx, PlantedDPFlag(sparks, 2))], offline=True)
    assert [r.rank for r in bad] == list(range(sparks))
    assert all(
        not r.ok and "unrecognized arguments: --data-parallel-adress" in r.error for r in bad
    ), [r.error for r in bad]
    problems = problems_of(bad, {profile.name: profile.source})
    assert all("--data-parallel-adress" in p.message and p.rule == "engine-check" for p in problems)


def test_the_dp_flags_are_the_real_parsers() -> None:
    """The DP flags of ACROSS_FLAGS and their aliases resolve, in vLLM 0.19.0, to the
    destinations the table names."""
    from sparkrack.serving.enginecheck import upstream as enginecheck
    from sparkrack.serving.engines.vllm_across import ACROSS_KNOBS, DP_FLAGS

    rows = [f for f in ACROSS_FLAGS if f.flag in DP_FLAGS]
    aliases = [a for k in ACROSS_KNOBS if k.flag in DP_FLAGS for a in k.aliases]
    resolved = dict(enginecheck.option_dests("vllm", "0.19.0", [*DP_FLAGS, *aliases]))
    assert {f.flag: resolved[f.flag] for f in rows} == {f.flag: f.dest for f in rows}
    assert {resolved[a] for a in aliases} <= {f.dest for f in rows}


class OwnAddress(VLLMAcrossSparks):
    """Rank 2 told its own fabric address is the master's and the DP address: vLLM accepts the
    command, but that rank would start a launch of its own."""

    def runtime_value(self, knob: RuntimeKnob, ctx: ServingContext, rank: Any) -> str | None:
        if rank.rank == 2 and knob.runtime in ("master_addr", "dp_address"):
            return ctx.rank_address(rank.node)
        return super().runtime_value(knob, ctx, rank)


class OffByOneStart(VLLMAcrossSparks):
    """Rank 1 given the start rank of the next DP group."""

    def runtime_value(self, knob: RuntimeKnob, ctx: ServingContext, rank: Any) -> str | None:
        if rank.rank == 1 and knob.runtime == "dp_start_rank":
            return "1"
        return super().runtime_value(knob, ctx, rank)


def test_ranks_that_disagree_with_the_plan_are_refused_naming_the_field(
    ctx: ServingContext,
) -> None:
    """vLLM builds each rank's ParallelConfig; a rank whose addresses or DP rank differ from the
    plan of the launch is refused by field, though vLLM's parser accepts it."""
    profile = load_profile(DP_PROFILES / "vllm-dp2-tp2.yml")
    rows = check_resolved(
        [resolve(profile, ctx, OwnAddress(4, 2)), resolve(profile, ctx, OffByOneStart(4, 2))],
        offline=True,
    )
    assert [(r.rank, r.ok) for r in rows] == [
        (0, True), (1, True), (2, False), (3, True),
        (0, True), (1, False), (2, True), (3, True),
    ]  # fmt: skip
    problems = problems_of(rows, {profile.name: profile.source})
    assert sorted(p.key for p in problems) == [
        "rank 1 data_parallel_rank",
        "rank 2 data_parallel_master_ip",
        "rank 2 master_addr",
    ]
    assert all(p.rule == "engine-check" for p in problems)
