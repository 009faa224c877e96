"""Rank pods turn on PyTorch's NCCL flight recorder, spelled for the PyTorch of their image.

The names are held against a real libtorch: the 2.11.0 capture (tests/data/nccl/captured/hangs)
records the ``TORCH_*`` names its libtorch contains and the deprecation warnings it printed.
Which PyTorch an image carries comes from its image facts (``Engine.images`` or the profile's
``image_info.torch``)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack import contract
from sparkrack.fabric.ncclenv import FR_RENAMED, flight_recorder_env
from sparkrack.inputs.inventory import load_inventory
from sparkrack.serving import (
    ServingContext,
    context_from_vars,
    load_profile,
    render_env,
    render_manifests,
)
from sparkrack.serving.engines import ENGINES
from sparkrack.serving.names import deployment_name

HANGS = Path(__file__).resolve().parents[1] / "data" / "nccl" / "captured" / "hangs"
DIR = contract.flight_recorder_dir("alpha")
PREFIX = f"{DIR}/fr_dump_rank_"
NEW = {"TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"}
OLD = {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}


def libtorch_211_names() -> set[str]:
    """Names the captured torch 2.11.0 reads: those found in its libtorch, and those its own
    deprecation warnings name as the replacement."""
    versions = json.loads((HANGS / "versions-run2.json").read_text())
    assert versions["torch"].startswith("2.11.")
    names = set(versions["libtorch_env_names"])
    warned = re.compile(r"Environment variable (\w+) is deprecated; use (\w+) instead")
    for log in HANGS.glob("*/rank*.log"):
        for old, new in warned.findall(log.read_text(errors="replace")):
            names |= {old, new}
    return names


def test_names_for_torch_211_are_the_ones_its_libtorch_reads() -> None:
    env = flight_recorder_env("2.11.0", DIR)
    assert set(env) == NEW | {"TORCH_NCCL_DUMP_ON_TIMEOUT"}
    assert set(env) <= libtorch_211_names()
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and int(env["TORCH_FR_BUFFER_SIZE"]) > 0
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == PREFIX
    # the pre-rename names were deprecated in that release, not gone
    assert libtorch_211_names() >= OLD


@pytest.mark.parametrize("torch", [None, "2.9.1", "2.10.0", "garbage"])
def test_older_or_unknown_torch_gets_both_spellings(torch: str | None) -> None:
    env = flight_recorder_env(torch, DIR)
    assert NEW | OLD | {"TORCH_NCCL_DUMP_ON_TIMEOUT"} == set(env)
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == env["TORCH_FR_DUMP_TEMP_FILE"] == PREFIX
    assert FR_RENAMED == (2, 11)


def fabric_images() -> list[tuple[str, str]]:
    return [
        (engine.name, image)
        for engine in ENGINES.values()
        if engine.uses_fabric
        for image in engine.images
    ]


def profile_for(tmp_path: Path, engine: str, image: str, torch: str | None) -> Any:
    data = yaml.safe_load(Path("model_profiles/glm-4.7-nvfp4.yml").read_text())
    assert data["engine"] == engine
    data["image"] = image
    data.pop("image_info", None)
    if torch is not None:
        data["image_info"] = {engine: "0.5.13", "torch": torch}
    path = tmp_path / "profile.yml"
    path.write_text(yaml.safe_dump(data))
    return load_profile(str(path))


@pytest.mark.parametrize(("engine", "image"), fabric_images())
def test_every_rank_of_every_pinned_image_records_and_dumps(
    engine: str, image: str, tmp_path: Path
) -> None:
    profile = profile_for(tmp_path, engine, image, None)
    facts = ENGINES[engine].image_facts(profile.data)
    assert facts is not None
    ctx = context_from_vars(load_inventory("inventories/example").plan(), {}, {})
    # the version read from the image facts, the directory of this deployment
    expected = flight_recorder_env(
        facts.torch, contract.flight_recorder_dir(deployment_name(ctx, profile))
    )
    for rank in range(len(ctx.group())):
        env = render_env(profile, ctx, rank)
        assert {k: env.get(k) for k in expected} == expected
        assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_a_stated_torch_release_changes_the_spelling(tmp_path: Path) -> None:
    engine, image = fabric_images()[0]
    ctx = context_from_vars(load_inventory("inventories/example").plan(), {}, {})
    new = render_env(profile_for(tmp_path, engine, image + "-x", "2.11.0"), ctx, 0)
    old = render_env(profile_for(tmp_path, engine, image + "-x", "2.9.1"), ctx, 0)
    assert set(new) >= NEW and not OLD & set(new)
    assert set(old) >= NEW | OLD


def test_the_dump_directory_is_mounted_from_the_spark(tmp_path: Path) -> None:
    engine, image = fabric_images()[0]
    profile = profile_for(tmp_path, engine, image, None)
    ctx = context_from_vars(load_inventory("inventories/example").plan(), {}, {})
    sets = [d for d in render_manifests(profile, ctx) if d.get("kind") == "StatefulSet"]
    assert sets
    for doc in sets:
        spec = doc["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        where = contract.flight_recorder_dir(deployment_name(ctx, profile))
        name = mounts[where]
        assert volumes[name]["hostPath"]["path"] == where
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert env["TORCH_FR_DUMP_TEMP_FILE"].startswith(where + "/")


# --- the rendered rank pods of the shipped profiles, against what each image's PyTorch reads ---

NAMES = json.loads((HANGS.parents[1] / "torch_flight_recorder_names.json").read_text())
"""Per PyTorch release, the variables each flight-recorder reader takes (read from the release:
its wheel's headers and libraries, or the capture)."""
FLIGHT_NAMES = {
    name
    for release, facts in NAMES.items()
    if release != "comment"
    for reader in facts["readers"].values()
    for name in reader["names"]
}


def recorder_problems(env: dict[str, str], torch: str, dump_dir: str) -> list[str]:
    """What is wrong with a rank's flight recorder for PyTorch ``torch``: a reader that finds none
    of its names and has no known default, a buffer the process group sizes differently from the
    recorder, a dump outside ``dump_dir``, no dump on timeout, a name only deprecated readers take,
    a name no reader of that release takes."""
    facts = NAMES.get(torch)
    if facts is None:
        return [f"no record of the names torch {torch} reads"]
    problems: list[str] = []
    seen: dict[str, str] = {}
    for reader, spec in facts["readers"].items():
        value = next((env[n] for n in spec["names"] if n in env), spec["default"])
        if value is None:
            problems.append(f"{reader}: none of {spec['names']} is set")
        else:
            seen[reader] = value
    buffer = seen.get("recorder buffer", "0")
    if not buffer.isdigit() or int(buffer) <= 0:
        problems.append(f"recorder buffer {buffer!r}: the recorder is off")
    if seen.get("process group buffer", buffer) != buffer:
        problems.append(f"process group buffer {seen['process group buffer']} != {buffer}")
    if not seen.get("dump file", "").startswith(dump_dir.rstrip("/") + "/"):
        problems.append(f"dump file {seen.get('dump file')!r} is not in {dump_dir}")
    if seen.get("dump on timeout") != "1":
        problems.append("no dump on timeout")
    problems += [f"{n} is deprecated in torch {torch}" for n in facts["deprecated"] if n in env]
    read = {n for spec in facts["readers"].values() for n in spec["names"]}
    problems += [f"{n}: torch {torch} reads no such name" for n in FLIGHT_NAMES & set(env) - read]
    return problems


def shipped_fabric_profiles() -> list[Path]:
    found = []
    for path in sorted(Path("model_profiles").glob("*.yml")):
        engine = ENGINES.get(str(yaml.safe_load(path.read_text()).get("engine")))
        if engine is not None and engine.uses_fabric:
            found.append(path)
    return found


@functools.cache
def example_context() -> ServingContext:
    """The example inventory's serving context (frozen), loaded once for every render here."""
    return context_from_vars(load_inventory("inventories/example").plan(), {}, {})


def rank_pod_envs(profile: Any) -> tuple[str, list[dict[str, str]]]:
    """The dump directory of ``profile``'s deployment, and the literal env of every rank pod as
    rendered into its StatefulSet."""
    ctx = example_context()
    sets = [d for d in render_manifests(profile, ctx) if d.get("kind") == "StatefulSet"]
    envs = [
        {
            e["name"]: e["value"]
            for e in s["spec"]["template"]["spec"]["containers"][0]["env"]
            if "value" in e
        }
        for s in sets
    ]
    return contract.flight_recorder_dir(deployment_name(ctx, profile)), envs


def test_the_shipped_profiles_cover_every_pinned_fabric_image() -> None:
    pinned = {image for _, image in fabric_images()}
    shipped = {yaml.safe_load(p.read_text())["image"] for p in shipped_fabric_profiles()}
    assert pinned == shipped and len(pinned) == 4


@pytest.mark.parametrize("path", shipped_fabric_profiles(), ids=lambda p: p.stem)
def test_each_rank_pod_turns_the_recorder_on_for_its_images_torch(path: Path) -> None:
    profile = load_profile(str(path))
    facts = ENGINES[str(profile.data["engine"])].image_facts(profile.data)
    assert facts is not None and facts.torch in NAMES, f"{path}: torch of {facts} not recorded"
    dump_dir, envs = rank_pod_envs(profile)
    assert len(envs) >= 2
    for env in envs:
        assert recorder_problems(env, facts.torch, dump_dir) == []


def planted(tmp_path: Path, path: Path, torch: str) -> Any:
    """``path``'s profile whose ``image_info`` states another PyTorch for the same image."""
    data = yaml.safe_load(path.read_text())
    facts = ENGINES[data["engine"]].image_facts(data)
    assert facts is not None
    data["image_info"] = {data["engine"]: facts.version, "torch": torch}
    copy = tmp_path / path.name
    copy.write_text(yaml.safe_dump(data))
    return load_profile(str(copy))


@pytest.mark.parametrize(("real", "wrong"), [("2.11.0", "2.9.1"), ("2.9.1", "2.11.0")])
def test_a_planted_wrong_torch_renders_names_the_real_one_refuses(
    tmp_path: Path, real: str, wrong: str
) -> None:
    """Negative control: the image's facts, not a constant, decide the names; rendered for the
    wrong release, the env fails the real release's check."""
    path = next(
        p
        for p in shipped_fabric_profiles()
        if (f := ENGINES["sglang"].image_facts(yaml.safe_load(p.read_text()))) and f.torch == real
    )
    dump_dir, envs = rank_pod_envs(planted(tmp_path, path, wrong))
    for env in envs:
        assert recorder_problems(env, wrong, dump_dir) == []
        assert recorder_problems(env, real, dump_dir) != []
    assert recorder_problems(envs[0], "2.99.0", dump_dir) == [
        "no record of the names torch 2.99.0 reads"
    ]


def test_the_image_table_takes_torch_from_each_releases_pin() -> None:
    from sparkrack.serving.engines.sglang_table import IMAGES, TORCH

    for image, facts in IMAGES.items():
        assert facts.torch == TORCH[facts.version], image


# --- every shipped multi-rank profile, whichever engine renders its ranks (vLLM across Sparks
# included: its ranks take the fabric env from the same function as SGLang's) ----------------

RECORDER = FLIGHT_NAMES | {"TORCH_NCCL_DUMP_ON_TIMEOUT"}


@functools.cache
def shipped_multi_rank_profiles() -> tuple[Path, ...]:
    """Each shipped profile whose render has two rank pods or more (each one rendered to know)."""
    return tuple(
        path
        for path in sorted(Path("model_profiles").glob("*.yml"))
        if len(rank_pod_envs(load_profile(str(path)))[1]) >= 2
    )


def recorder_of(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in RECORDER}


@pytest.mark.parametrize("path", shipped_multi_rank_profiles(), ids=lambda p: p.stem)
def test_every_multi_rank_profiles_rank_pods_spell_the_recorder_for_the_images_torch(
    path: Path,
) -> None:
    profile = load_profile(str(path))
    facts = ENGINES[str(profile.data["engine"])].image_facts(profile.data)
    assert facts is not None and facts.torch is not None, f"{path}: its image's PyTorch is unknown"
    dump_dir, envs = rank_pod_envs(profile)
    expected = flight_recorder_env(facts.torch, dump_dir)
    for env in envs:
        assert recorder_of(env) == expected


def test_the_vllm_ranks_across_sparks_are_among_them() -> None:
    engines = {str(yaml.safe_load(p.read_text())["engine"]) for p in shipped_multi_rank_profiles()}
    assert engines == {"sglang", "vllm"}


def test_a_planted_torch_changes_the_vllm_ranks_spelling(tmp_path: Path) -> None:
    """Negative control: the vLLM ranks' names follow the image's facts, not a constant. vLLM
    0.19.0 pins torch 2.10.0 (before the rename: both spellings); a stated 2.11.0 drops the old."""
    path = next(
        p
        for p in shipped_multi_rank_profiles()
        if yaml.safe_load(p.read_text())["engine"] == "vllm"
    )
    _, pinned = rank_pod_envs(load_profile(str(path)))
    dump_dir, stated = rank_pod_envs(planted(tmp_path, path, "2.11.0"))
    for env in pinned:
        assert set(recorder_of(env)) == NEW | OLD | {"TORCH_NCCL_DUMP_ON_TIMEOUT"}
    for env in stated:
        assert set(recorder_of(env)) == NEW | {"TORCH_NCCL_DUMP_ON_TIMEOUT"}
        assert recorder_problems(env, "2.11.0", dump_dir) == []


def test_the_vllm_image_table_takes_torch_from_each_releases_pin() -> None:
    from sparkrack.serving.engines.vllm import IMAGES, TORCH

    for image, facts in IMAGES.items():
        assert facts.torch == TORCH[facts.version], image
