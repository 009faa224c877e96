"""The hostile-profile corpus (tests/hostile_corpus.py) through ``sparkrack validate``.

Each entry runs ``sparkrack.cli.main(["validate", "--nodes", "4", FILE])`` in a forked child, so
a hang or a memory blow-up cannot take the test session with it and each entry is measured on
its own: exit 1, only ``<file>: <key>: <message> — fix: <fix> [<rule>]`` lines naming the
entry's file and its expected rule, no traceback, under 2 s of CPU and under 300 MB of new memory
(the child's peak resident set beyond its own right after the fork, tests/forked.py).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from forked import Outcome, run_forked
from hostile_corpus import CORPUS, PROFILE_DIR, Entry, write

from sparkrack.cli import build_parser, main
from sparkrack.cli.options import DEFAULT_INVENTORY
from sparkrack.inputs.inventory import load_inventory
from sparkrack.serving import all_rules, validate_profile

LINE = re.compile(
    r"^(?P<file>.+?): (?P<key>[^:]+): (?P<msg>.+) — fix: (?P<fix>.+) \[(?P<rule>[a-z0-9-]+)\]$"
)
MAX_SECONDS = 2.0
MAX_RSS_MB = 300
HANG_SECONDS = 30.0
CHILD_GROWTH_MB = 1024
"""The child's address-space limit beyond the parent's: a bomb that expands fails the entry."""
LOADER_RULES = {
    "yaml",
    "yaml-alias",
    "yaml-depth",
    "yaml-size",
    "yaml-encoding",
    "yaml-non-finite",
    "yaml-duplicate-key",
    "yaml-key",
}


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """Import every command module, build the schema validator and load the default inventory
    (its trust settings) once, before the forks."""
    build_parser()
    validate_profile({}, "warm-up")
    load_inventory(DEFAULT_INVENTORY)


def run_validate(path: Path, workdir: Path) -> Outcome:
    """``sparkrack validate --nodes 4 PATH`` in a forked child (tests/forked.py)."""
    got = run_forked(
        lambda: main(["validate", "--nodes", "4", str(path)]),
        workdir,
        growth_mb=CHILD_GROWTH_MB,
        cpu_seconds=MAX_SECONDS,
        hang_seconds=HANG_SECONDS,
    )
    if got.killed.startswith("still running"):
        pytest.fail(f"{path.name}: still running after {HANG_SECONDS} s (killed)")
    return got


def _param(entry: Entry) -> object:
    marks = [pytest.mark.xfail(strict=True, reason="engine layer")] if entry.engine_layer else []
    return pytest.param(entry, id=entry.id, marks=marks)


@pytest.mark.parametrize("entry", [_param(e) for e in CORPUS])
def test_hostile_profile_is_refused(entry: Entry, tmp_path: Path) -> None:
    path = write(entry, tmp_path)
    got = run_validate(path, tmp_path)
    print(
        f"measure {entry.id} {got.seconds:.3f}s wall {got.cpu_seconds:.3f}s cpu "
        f"+{got.growth_mb:.0f}MB"
    )
    assert "Traceback" not in got.out + got.err, got.err
    assert got.code == 1, (got.code, got.out, got.err)
    lines = got.out.splitlines()
    # stderr carries nothing but warnings (a moving image tag) and the note naming the default
    # inventory, never a traceback or a refusal.
    assert lines and all(
        line.startswith(("warning: ", "note: no -i given: ")) for line in got.err.splitlines()
    )
    rules = set()
    for line in lines:
        match = LINE.match(line)
        assert match, f"not <file>: <key>: <message> — fix: <fix> [<rule>]: {line!r}"
        assert match["file"] == str(path)
        assert match["key"].strip() and match["msg"].strip() and match["fix"].strip()
        rules.add(match["rule"])
    assert rules == {entry.rule}, lines
    # CPU time: wall time on a shared 2-core machine measures the neighbours too.
    assert got.cpu_seconds < MAX_SECONDS
    assert got.seconds < HANG_SECONDS
    assert got.growth_mb < MAX_RSS_MB


@pytest.mark.parametrize("path", sorted(PROFILE_DIR.glob("*.yml")), ids=lambda p: p.stem)
def test_the_same_harness_accepts_every_shipped_profile(path: Path, tmp_path: Path) -> None:
    got = run_validate(path, tmp_path)
    assert got.code == 0
    assert all(
        line.startswith(("warning: ", "note: no -i given: ")) for line in got.err.splitlines()
    )
    assert "1 profile(s) valid for 4 Sparks" in got.out


def test_the_corpus_is_big_unique_and_covers_every_rule() -> None:
    ids = [e.id for e in CORPUS]
    assert len(CORPUS) >= 150
    assert len(ids) == len(set(ids))
    active = {e.rule for e in CORPUS if not e.engine_layer}
    missing = sorted({r.id for r in all_rules()} - active)
    assert not missing, f"rules without a corpus entry: {missing}"
    assert LOADER_RULES | {"schema"} <= active
    assert {e.base for e in CORPUS} == {p.stem for p in PROFILE_DIR.glob("*.yml")}


def test_a_hang_is_reported_not_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for the runner: a child that never finishes fails the entry."""
    monkeypatch.setattr(f"{__name__}.HANG_SECONDS", 0.5)
    monkeypatch.setitem(globals(), "main", lambda argv: time.sleep(60))
    path = tmp_path / "p.yml"
    path.write_text("model: x/y\n")
    with pytest.raises(pytest.fail.Exception, match="still running"):
        run_validate(path, tmp_path)


def test_a_traceback_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for the runner: an exception escaping main() shows as a traceback."""

    def boom(argv: list[str]) -> int:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setitem(globals(), "main", boom)
    path = tmp_path / "p.yml"
    path.write_text("model: x/y\n")
    got = run_validate(path, tmp_path)
    assert got.code is None and "Traceback" in got.err and "RecursionError" in got.err
