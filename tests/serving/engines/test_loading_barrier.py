"""SGLang's loading barrier read from the pinned releases' own source, and the ``check`` warning
it leads to (the releases hard-code it: no variable can raise it)."""

from __future__ import annotations

import ast
import os
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from patch_fixtures import wheel_path

from sparkrack.diagnose.signatures import diagnose, load_signatures
from sparkrack.serving.context import context_from_inventory
from sparkrack.serving.enginecheck import upstream
from sparkrack.serving.engines.sglang import ENGINE
from sparkrack.serving.profile.load import load_profile
from sparkrack.serving.resolution import Resolution, resolve
from sparkrack.serving.switch.plan import LOADING_BARRIER_MARGIN, loading_barrier_warnings

RUNNER = "sglang/srt/model_executor/model_runner.py"
ENVIRON = "sglang/srt/environ.py"
PINNED = sorted({facts.version for facts in ENGINE.images.values()})
CONSTANT = re.compile(r"^UNBALANCED_MODEL_LOADING_TIMEOUT_S\s*=\s*(?P<value>.+?)\s*(?:#.*)?$", re.M)


def source(version: str, path: str) -> str:
    with zipfile.ZipFile(wheel_path("sglang", version)) as wheel:
        return wheel.read(path).decode()


def barrier_facts(runner: str, environ: str) -> tuple[float | None, str | None]:
    """(seconds, variable) of the barrier as a release's source sets them: a literal constant
    gives no variable; a constant read from the environment gives the variable's name."""
    match = CONSTANT.search(runner)
    if match is None:
        return None, None
    value = match["value"]
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return float(value), None
    read = re.search(r"""(?:getenv|environ\.get|get_int_env_var|Env\w*)\(\s*["'](\w+)["']""", value)
    named = re.search(r"envs\.(\w+)", value)
    variable = read.group(1) if read else (named.group(1) if named else value)
    default = re.search(r",\s*(\d+(?:\.\d+)?)", value)
    if named and not default:
        declared = re.search(rf"{named.group(1)}\s*=\s*\w+\((\d+(?:\.\d+)?)\)", environ)
        default = declared
    return (float(default.group(1)) if default else None), variable


@pytest.mark.tools  # the pinned releases' wheels, downloaded from PyPI on first use
@pytest.mark.parametrize("version", PINNED)
def test_the_pinned_release_hard_codes_the_barrier(version: str) -> None:
    runner = source(version, RUNNER)
    seconds, variable = barrier_facts(runner, source(version, ENVIRON))
    assert (seconds, variable) == (ENGINE.loading_barrier_s, ENGINE.loading_barrier_env)
    assert "monitored_barrier" in runner
    assert "could finish the model loading, but there are other ranks" in runner
    assert "UNBALANCED_MODEL_LOADING_TIMEOUT" not in source(version, ENVIRON)


def test_negative_control_a_release_that_reads_a_variable_is_told_apart() -> None:
    # The shape a release that honours the variable would have (no pinned release has it).
    runner = 'UNBALANCED_MODEL_LOADING_TIMEOUT_S = int(os.getenv("SGLANG_UNBALANCED_MODEL_LOADING_TIMEOUT_S", 480))\n'
    assert barrier_facts(runner, "") == (480.0, "SGLANG_UNBALANCED_MODEL_LOADING_TIMEOUT_S")
    assert barrier_facts("UNBALANCED_MODEL_LOADING_TIMEOUT_S = 300\n", "") == (300.0, None)


ROOT = Path(__file__).resolve().parents[3]


def installed(version: str, path: str) -> str:
    """A file of the release as the engine check's environment installed it."""
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(ROOT / ".cache"))
    return (upstream.ensure_env("sglang", version) / "engine" / path).read_text()


def barrier_message(runner: str, rank: int) -> str:
    """The message the release raises at its loading barrier, its f-string's placeholders
    (the TP rank) filled with ``rank``: read with ``ast``, nothing imported."""
    for node in ast.walk(ast.parse(runner)):
        if isinstance(node, ast.JoinedStr):
            parts = [
                str(v.value) if isinstance(v, ast.Constant) else str(rank) for v in node.values
            ]
            text = "".join(parts)
            if "could finish the model loading" in text:
                return text
    raise AssertionError("no loading-barrier message in model_runner.py")


@pytest.mark.tools  # the engine check's environments (real SGLang wheels, built on first use)
@pytest.mark.parametrize("version", PINNED)
def test_diagnose_names_the_barrier_message_of_each_installed_release(version: str) -> None:
    runner = installed(version, RUNNER)
    line = f"ValueError: {barrier_message(runner, 3)}"
    assert line.startswith("ValueError: TP rank 3 could finish the model loading")
    assert [f.id for f in diagnose(line)] == ["sglang-loading-barrier"]
    # negative control: the same message reworded the way a release could change it
    changed = line.replace("could finish the model loading", "finished loading the model")
    assert diagnose(changed) == []
    # the timeout: a literal constant, no variable read anywhere in the installed release
    seconds, variable = barrier_facts(runner, installed(version, ENVIRON))
    assert (seconds, variable) == (ENGINE.loading_barrier_s, ENGINE.loading_barrier_env)
    assert (seconds, variable) == (480.0, None)
    engine = upstream.ensure_env("sglang", version) / "engine" / "sglang"
    readers = [
        p.relative_to(engine).as_posix()
        for p in engine.rglob("*.py")
        if "UNBALANCED_MODEL_LOADING" in p.read_text(errors="replace")
    ]
    assert readers == ["srt/model_executor/model_runner.py"]
    assert "SGLANG_UNBALANCED" not in runner


def test_diagnose_names_the_barrier_message_the_releases_print() -> None:
    (sig,) = [s for s in load_signatures() if s.id == "sglang-loading-barrier"]
    line = "ValueError: TP rank 2 could finish the model loading, but there are other ranks that didn't finish loading."
    assert re.search(sig.match, line)


def deployment(name: str, disk_mbyte_s: int | None = None) -> Resolution:
    ctx = context_from_inventory("inventories/example")
    if disk_mbyte_s is not None:
        ctx = replace(ctx, disk_mbyte_s=disk_mbyte_s)
    return resolve(load_profile(name), ctx)


def test_check_warns_for_a_load_near_the_barrier() -> None:
    # Nemotron-3-Ultra: ~79 GB per rank at 181.6 MB/s (433 s), x1.25 past the 480 s barrier.
    (warning,) = loading_barrier_warnings(deployment("nemotron-3-ultra-550b-a55b-nvfp4"), "inv")
    assert warning.rule == "loading-barrier"
    assert "480 s" in warning.message and "could finish the model loading" in warning.message


def test_negative_control_a_load_well_under_the_barrier_does_not_warn() -> None:
    assert loading_barrier_warnings(deployment("glm-4.7-nvfp4"), "inv") == []
    # the same model on a disk four times slower than the loader's copy reaches it
    slow = deployment("glm-4.7-nvfp4", disk_mbyte_s=40)
    assert [w.rule for w in loading_barrier_warnings(slow, "inv")] == ["loading-barrier"]
    assert LOADING_BARRIER_MARGIN > 1
