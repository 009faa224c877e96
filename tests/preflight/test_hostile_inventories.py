"""The hostile-inventory corpus (tests/hostile_inventory_corpus.py) through ``sparkrack check``.

Each entry runs ``sparkrack.cli.main(["check", "-i", INV])`` in a forked child (tests/forked.py)
and must be refused: exit 1, a verdict of REFUSED, a refusal line naming the file the value was
written in, the key and a fix in words (no regular expression), the entry's rule; no traceback,
no raw control character, no secret's value in the output; within 5 s of CPU and 200 MB of new
memory. What the check renders passes the API server's rules (k8s/names) or is refused.
The corpus's hostile logs and servers go through ``diagnose`` and ``bench`` the same way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forked import Outcome, run_forked
from hostile_inventory_corpus import (
    BENCH,
    CORPUS,
    DIAGNOSE,
    EXAMPLE,
    PASSWORD,
    ROOT,
    Entry,
    LogEntry,
    ServerEntry,
    build,
    by_id,
)
from hostile_servers import HostileServer

from sparkrack.cli import build_parser, main
from sparkrack.inputs.inventory import VAULT_ENV, load_inventory
from sparkrack.preflight.check import check_inventory

MAX_CPU_SECONDS = 5.0
MAX_GROWTH_MB = 200
HANG_SECONDS = 30.0
PROBLEM = re.compile(
    r"^(?P<file>[^\n]+?): (?P<key>[^\n]+?): (?P<msg>.+?) — fix: (?P<fix>[^\n]+?) "
    r"\[(?P<rule>[a-z0-9-]+)\]$",
    re.M | re.S,
)
REGEX_SYNTAX = re.compile(r"\(\?[!:=<]|\\[dwsSZA]|\[\^|\{0,|\^\[|\]\{|\)\$|\$\"$")
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SECRET_VALUES = ("hf_abc", "gw-key", "two words", "X-Injected")
CATEGORIES = {"serving", "deployments", "images", "fabric", "yaml", "vault", "roles"}


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """Import every module the check needs and fill every cache once, before the forks."""
    build_parser()
    check_inventory(load_inventory(EXAMPLE), engine_check=False)


def run_check(inv: Path, workdir: Path, password: str | None) -> Outcome:
    env: dict[str, str | None] = {VAULT_ENV: None}
    if password is not None:
        pw = workdir / "vault-password"
        pw.write_text(password + "\n")
        env[VAULT_ENV] = str(pw)
    return run_forked(
        lambda: main(["check", "-i", str(inv), "--no-engine-check"]),
        workdir,
        growth_mb=MAX_GROWTH_MB,
        cpu_seconds=MAX_CPU_SECONDS,
        hang_seconds=HANG_SECONDS,
        env=env,
    )


def measure(name: str, got: Outcome) -> None:
    print(
        f"measure {name} {got.seconds:.3f}s wall {got.cpu_seconds:.3f}s cpu +{got.growth_mb:.0f}MB"
    )
    assert not got.killed, f"{name}: {got.killed}"
    assert got.cpu_seconds <= MAX_CPU_SECONDS
    assert got.growth_mb <= MAX_GROWTH_MB


def refusal_lines(out: str) -> list[re.Match[str]]:
    return list(PROBLEM.finditer(out))


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e.id)
def test_hostile_inventory_is_refused(entry: Entry, tmp_path: Path) -> None:
    inv = build(entry, tmp_path)
    got = run_check(inv, tmp_path, entry.password)
    measure(entry.id, got)
    output = got.out + got.err
    assert "Traceback" not in output, got.err
    assert got.code == entry.exit, output
    assert not RAW_CONTROL.search(output), "a control character reached the terminal"
    assert got.out.rstrip().splitlines()[-1].startswith("check: REFUSED"), got.out
    found = refusal_lines(got.out)
    assert found, got.out
    for match in found:
        assert match["fix"].strip() and match["msg"].strip(), match.group()
        assert not REGEX_SYNTAX.search(match["fix"] + " " + match["msg"]), match.group()
    file = str(inv / entry.file) if entry.file else str(inv)
    hits = [
        m for m in found if m["rule"] == entry.rule and entry.key in m["key"] and m["file"] == file
    ]
    assert hits, f"no [{entry.rule}] refusal of {entry.key!r} in {file}:\n{got.out}"
    if entry.category == "vault":
        assert not any(secret in output for secret in SECRET_VALUES), output


def test_the_same_harness_accepts_the_bases(tmp_path: Path) -> None:
    """Negative control: the corpus's bases, built the same way, pass the same check."""
    for base in ("example", "mixed"):
        entry = Entry(f"base-{base}", "base", "", "", lambda inv: None, base=base)
        inv = build(entry, tmp_path / base)
        got = run_check(inv, tmp_path, None)
        measure(entry.id, got)
        assert got.code == 0, got.out + got.err
        assert got.out.rstrip().splitlines()[-1].startswith("check: OK")


def test_the_right_vault_password_opens_the_vault_layout(tmp_path: Path) -> None:
    """Negative control of the vault entries: the same layout with its password passes."""
    inv = build(by_id("vault-file-no-password"), tmp_path)
    got = run_check(inv, tmp_path, PASSWORD)
    assert got.code == 0, got.out + got.err
    assert "vault_hf_token set (ansible-vault)" in got.out
    assert not any(secret in got.out + got.err for secret in SECRET_VALUES)


def test_the_corpus_is_big_unique_and_covers_every_category() -> None:
    ids = [e.id for e in CORPUS] + [e.id for e in DIAGNOSE] + [e.id for e in BENCH]
    assert len(ids) >= 150 and len(ids) == len(set(ids))
    assert {e.category for e in CORPUS} == CATEGORIES
    assert len(DIAGNOSE) >= 5 and len(BENCH) >= 5


def test_the_trust_page_gives_the_corpora_sizes() -> None:
    import hostile_corpus

    text = " ".join((ROOT / "docs" / "design" / "trust.md").read_text().split())
    assert (
        f"corpus of {len(hostile_corpus.CORPUS)} hostile variants of the shipped profiles" in text
    )
    assert f"holds {len(CORPUS)} hostile inventories" in text
    assert f"plus {len(DIAGNOSE)} hostile logs" in text
    assert f"{len(BENCH)} hostile servers" in text


def test_a_hang_and_a_traceback_are_reported(tmp_path: Path) -> None:
    """Negative controls of the runner: a child that never ends, and one that raises."""
    hung = run_forked(
        lambda: time.sleep(60) or 0, tmp_path, growth_mb=10, cpu_seconds=1, hang_seconds=0.5
    )
    assert hung.killed.startswith("still running")

    def boom() -> int:
        raise RecursionError("maximum recursion depth exceeded")

    raised = run_forked(boom, tmp_path, growth_mb=10, cpu_seconds=1, hang_seconds=10)
    assert raised.code is None and "RecursionError" in raised.err


def test_the_memory_limit_stops_a_child_that_grows(tmp_path: Path) -> None:
    """Negative control: allocating past the limit fails the child instead of the machine."""

    def grow() -> int:
        blocks = [bytearray(32 << 20) for _ in range(16)]  # 512 MB
        return len(blocks)

    got = run_forked(grow, tmp_path, growth_mb=100, cpu_seconds=5, hang_seconds=20)
    assert got.code is None and "MemoryError" in got.err


# --- the heaviest entries in a fresh process -------------------------------------------------

HEAVY = ("alias-bomb", "file-600-kb", "host-range-100000", "vf-count-million", "nesting-5000")


# The fresh process reports its own peak: VmHWM belongs to the process's memory map since its
# exec, where ru_maxrss would also count the pytest process it was forked from before the exec.
FRESH = """
import pathlib, resource, sys
from sparkrack.cli import main
code = main(sys.argv[2:])
status = pathlib.Path("/proc/self/status").read_text()
peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
usage = resource.getrusage(resource.RUSAGE_SELF)
pathlib.Path(sys.argv[1]).write_text(f"{usage.ru_utime + usage.ru_stime} {peak}")
sys.exit(code)
"""


@pytest.mark.parametrize("entry_id", HEAVY)
def test_heavy_entries_stay_small_in_a_fresh_process(entry_id: str, tmp_path: Path) -> None:
    """Measured without the warm parent: the whole ``sparkrack check`` process (Python, its
    imports, ansible-core) peaks under 200 MB and 5 s of CPU."""
    inv = build(by_id(entry_id), tmp_path)
    env = {k: v for k, v in os.environ.items() if k != VAULT_ENV}
    report = tmp_path / "usage"
    argv = ["check", "-i", str(inv), "--no-engine-check"]
    proc = subprocess.run(
        [sys.executable, "-c", FRESH, str(report), *argv],
        capture_output=True,
        env=env,
        timeout=HANG_SECONDS,
    )
    cpu, peak_kb = report.read_text().split()
    cpu_seconds, peak = float(cpu), int(peak_kb) / 1024
    print(f"measure fresh {entry_id} {cpu_seconds:.2f}s cpu {peak:.0f}MB peak")
    assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr
    assert b"check: REFUSED" in proc.stdout
    assert cpu_seconds <= MAX_CPU_SECONDS and peak <= MAX_GROWTH_MB


# --- diagnose and bench: untrusted text on the terminal --------------------------------------


@pytest.mark.parametrize("entry", DIAGNOSE, ids=lambda e: e.id)
def test_hostile_log_is_diagnosed_with_control_characters_escaped(
    entry: LogEntry, tmp_path: Path
) -> None:
    log = tmp_path / f"{entry.id}.log"
    log.write_bytes(entry.log)
    got = run_forked(
        lambda: main(["diagnose", str(log)]),
        tmp_path,
        growth_mb=MAX_GROWTH_MB,
        cpu_seconds=MAX_CPU_SECONDS,
        hang_seconds=HANG_SECONDS,
    )
    measure(entry.id, got)
    named = entry.shows != "no known failure signature"
    assert got.code == (1 if named else 0) and "Traceback" not in got.err, got.err
    assert not RAW_CONTROL.search(got.out + got.err)
    assert entry.shows in got.out, got.out


@pytest.mark.tools  # serves or probes HTTP on loopback
@pytest.mark.parametrize("entry", BENCH, ids=lambda e: e.id)
def test_hostile_server_is_refused_in_time_with_text_escaped(
    entry: ServerEntry, tmp_path: Path
) -> None:
    out = tmp_path / "bench"
    with HostileServer(entry) as srv:
        args = [
            "bench", "--url", srv.url, "--model", "m", "--concurrency", "1", "--warmup", "0",
            "--max-tokens", "20", "--no-metrics", "--no-progress", "--out", str(out),
            "--connect-timeout", "1", "--stall-timeout", "2",
        ]  # fmt: skip
        results = out / "results.json"
        got = run_forked(
            lambda: main(args),
            tmp_path,
            growth_mb=MAX_GROWTH_MB,
            cpu_seconds=MAX_CPU_SECONDS,
            hang_seconds=HANG_SECONDS,
            collect=lambda: results.read_text() if results.exists() else "",
        )
    measure(entry.id, got)
    assert got.code == entry.exit and "Traceback" not in got.err, got.out + got.err
    assert got.seconds < 10, "bench did not give up in time"
    assert not RAW_CONTROL.search(got.out + got.err)
    shown = got.out + got.err
    if got.extra:
        shown += " ".join(r["error"] for r in json.loads(got.extra)["levels"][0]["requests"])
    assert entry.shows in shown, shown
