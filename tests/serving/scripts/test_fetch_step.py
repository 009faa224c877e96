"""The fetch step's logic on this machine: marker, snapshot walk, free-space refusal, waits, argv.

The script runs as the pods run it (``python3 fetch_step.py ...`` in a subprocess); the copy
between two machines is tests/serving/test_fetch_copy.py.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path, PurePosixPath

import fakehub
import pytest

from sparkrack import contract
from sparkrack.serving.scripts import fetch_base, fetch_push, fetch_step
from sparkrack.serving.switch import plan as fetchplan

SCRIPT = Path(fetch_step.__file__)
REPO = "org/model"
REV = "a" * 40


def run_step(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


def fake_snapshot(cache: Path, sizes: tuple[int, ...] = (1000, 2000)) -> int:
    """An HF cache entry: blobs, snapshot links (one nested), refs/main -> REV; returns bytes."""
    base = cache / "models--org--model"
    snap = base / "snapshots" / REV
    (snap / "sub").mkdir(parents=True)
    (base / "blobs").mkdir()
    (base / "refs").mkdir()
    for i, size in enumerate(sizes):
        (base / "blobs" / f"h{i}").write_bytes(bytes([i + 1]) * size)
        link = snap / ("sub/tok" if i == 0 else f"model-{i}.safetensors")
        link.symlink_to(("../../../" if i == 0 else "../../") + f"blobs/h{i}")
    (base / "blobs" / "other-revision").write_bytes(b"x" * 10)
    (base / "refs" / "main").write_text(REV)
    (base / "refs" / "old").write_text("b" * 40)
    files = {
        ("sub/tok" if i == 0 else f"model-{i}.safetensors"): {
            "size": size,
            "sha256": hashlib.sha256(bytes([i + 1]) * size).hexdigest(),
        }
        for i, size in enumerate(sizes)
    }
    (cache / "manifest.json").write_bytes(fetch_base.manifest_bytes(REPO, REV, REV, files))
    return sum(sizes)


def mark(cache: Path) -> None:
    fetch_step.mark(REPO, REV, cache, cache / "manifest.json")


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stderr.strip().splitlines() or [""])[-1]


def test_marker_name_has_one_owner() -> None:
    rel = fetch_base.marker_relpath(REPO, REV)
    assert rel == f".sparkrack/models--org--model@{REV}.done"
    assert fetchplan.marker_path("/c", REPO, REV) == PurePosixPath("/c") / rel
    assert fetch_base.marker_path("/c", REPO, REV) == Path("/c") / rel
    for repo, rev in (("no-slash", REV), ("a/b/c", REV), (REPO, "refs/pr/1"), (REPO, "")):
        with pytest.raises(fetch_base.StepError):
            fetch_base.marker_relpath(repo, rev)


def test_snapshot_walk_takes_its_blobs_and_refs_only(tmp_path: Path) -> None:
    total = fake_snapshot(tmp_path)
    snap = fetch_base.find_snapshot(tmp_path, REPO, REV)
    assert (snap.commit, snap.files, snap.bytes) == (REV, 2, total)
    assert set(snap.paths) == {
        "models--org--model/blobs/h0",
        "models--org--model/blobs/h1",
        "models--org--model/refs/main",
        f"models--org--model/snapshots/{REV}/sub/tok",
        f"models--org--model/snapshots/{REV}/model-1.safetensors",
    }
    assert fetch_base.find_snapshot(tmp_path, REPO, "main").commit == REV  # by ref name
    (tmp_path / "models--org--model/blobs/h1").unlink()
    with pytest.raises(fetch_base.StepError, match="incomplete"):
        fetch_base.find_snapshot(tmp_path, REPO, REV)


def test_mark_then_wait_reads_the_marker(tmp_path: Path) -> None:
    total = fake_snapshot(tmp_path)
    manifest = str(tmp_path / "manifest.json")
    argv = ("mark", "--cache", str(tmp_path), "--repo", REPO, "--revision", REV)
    marked = run_step(*argv, "--manifest", manifest)
    assert marked.returncode == 0, marked.stderr
    data = json.loads(fetch_base.marker_path(tmp_path, REPO, REV).read_text())
    sha = hashlib.sha256((tmp_path / "manifest.json").read_bytes()).hexdigest()
    assert data == {
        "repo": REPO, "revision": REV, "commit": REV, "bytes": total, "files": 2,
        "manifest_sha256": sha,
    }  # fmt: skip
    # Negative control: a snapshot that differs from the manifest is not marked.
    fetch_base.marker_path(tmp_path, REPO, REV).unlink()
    blob = tmp_path / "models--org--model/blobs/h1"
    blob.write_bytes(b"\0" + blob.read_bytes()[1:])
    refused = run_step(*argv, "--manifest", manifest)
    assert refused.returncode == 1 and "model-1.safetensors: sha256" in last_line(refused)
    assert not fetch_base.marker_path(tmp_path, REPO, REV).exists()
    blob.write_bytes(bytes([2]) * 2000)
    assert run_step(*argv, "--manifest", manifest).returncode == 0
    waited = run_step(*fetchplan.wait_argv(str(tmp_path), REPO, REV, timeout_s=5)[2:])
    assert waited.returncode == 0 and f"2 files, {total / 1e9:.2f} GB" in waited.stdout


def test_wait_times_out_with_the_numbers_and_sees_a_late_marker(tmp_path: Path) -> None:
    argv = fetchplan.wait_argv(str(tmp_path), REPO, REV, timeout_s=1.5, interval_s=0.5)[2:]
    start = time.monotonic()
    late = run_step(*argv)
    assert late.returncode == fetch_base.EXIT_TIMEOUT
    assert 1.5 <= time.monotonic() - start < 20
    assert "FAILED: waiting for" in last_line(late) and "after 2 s" in last_line(late)
    assert late.stdout.count("waiting for") >= 2  # progress lines while it waits
    fake_snapshot(tmp_path)
    mark(tmp_path)
    marker = fetch_base.marker_path(tmp_path, REPO, REV)
    moved = marker.with_name("elsewhere")
    marker.rename(moved)
    timer = threading.Timer(1.0, moved.rename, args=(marker,))
    timer.start()
    try:
        arrived = run_step(*fetchplan.wait_argv(str(tmp_path), REPO, REV, timeout_s=20)[2:])
    finally:
        timer.join()
    assert arrived.returncode == 0, arrived.stderr


def _meminfo(path: Path, free_kb: int) -> Path:
    """A /proc/meminfo whose MemAvailable is far above MemFree (a page cache full of weights)."""
    path.write_text(
        f"MemTotal:       125000000 kB\nMemFree:        {free_kb} kB\n"
        f"MemAvailable:   {free_kb + 60_000_000} kB\nCached:         60000000 kB\n"
    )
    return path


def _vm(tmp_path: Path) -> Path:
    """A folder standing in for /proc/sys/vm (the tests run as root: never the real one)."""
    vm = tmp_path / "vm"
    vm.mkdir(exist_ok=True)
    return vm


def test_memwait_flushes_then_decides_on_memfree(tmp_path: Path) -> None:
    info, vm = _meminfo(tmp_path / "meminfo", 100_000_000), _vm(tmp_path)  # 95.37 GiB free
    ok = run_step(*fetchplan.memwait_argv(90, timeout_s=5, meminfo=str(info), vm=str(vm))[2:])
    assert ok.returncode == 0, ok.stderr
    assert "MemFree 95.37 GiB >= need 83.82 GiB after drop_caches and compact_memory" in ok.stdout
    assert (vm / "drop_caches").read_text() == "3"
    assert (vm / "compact_memory").read_text() == "1"
    # MemAvailable (152.6 GiB) covers 110 GB; MemFree does not: the step waits, then fails.
    short = run_step(*fetchplan.memwait_argv(110, 1, 0.5, meminfo=str(info), vm=str(vm))[2:])
    assert short.returncode == fetch_base.EXIT_TIMEOUT
    assert last_line(short).endswith("FAILED: MemFree 95.37 GiB < need 102.45 GiB after 1 flushes")
    (tmp_path / "bad").write_text("MemTotal: 1 kB\n")
    bad = run_step("memwait", "--need-gb", "1", "--meminfo", str(tmp_path / "bad"), "--vm", str(vm))
    assert bad.returncode == 1 and "no MemFree, MemAvailable, Cached line" in last_line(bad)
    missing = run_step(
        *fetchplan.memwait_argv(90, 5, meminfo=str(info), vm=str(tmp_path / "absent"))[2:]
    )
    assert missing.returncode == 1
    assert f"cannot write {tmp_path / 'absent' / 'drop_caches'}" in last_line(missing)


def test_memwait_writes_its_phase_record_to_the_termination_file(tmp_path: Path) -> None:
    info, vm = _meminfo(tmp_path / "meminfo", 100_000_000), str(_vm(tmp_path))
    message = tmp_path / "termination-log"
    ok = run_step(*fetchplan.memwait_argv(90, 5, meminfo=str(info), phases=str(message), vm=vm)[2:])
    assert ok.returncode == 0, ok.stderr
    records = fetch_base.read_phases(message.read_text())
    assert [r["phase"] for r in records] == ["wait-memory"]
    assert records[0]["memfree_gib"] == [95.37]  # MemFree at each attempt
    assert records == fetch_base.read_phases(ok.stdout)  # the same record as a log line
    # A failed wait records MemFree at each of its attempts too: why it gave up is evidence.
    message.write_text("")
    short = run_step(
        *fetchplan.memwait_argv(110, 1, 0.5, str(info), phases=str(message), vm=vm)[2:]
    )
    assert short.returncode == fetch_base.EXIT_TIMEOUT
    [failed] = fetch_base.read_phases(message.read_text())
    assert failed["phase"] == "wait-memory" and failed["memfree_gib"] == [95.37]
    # An unwritable file costs the record, not the step.
    blocked = run_step(
        *fetchplan.memwait_argv(90, 5, meminfo=str(info), phases="/proc/nope", vm=vm)[2:]
    )
    assert blocked.returncode == 0 and "phase records not written to /proc/nope" in blocked.stdout


def test_read_phases_keeps_well_formed_records_only() -> None:
    good = 'sparkrack-phase {"phase": "copy", "seconds": 2.5, "bytes": 10, "peer": "h", "rail": 1}'
    text = "\n".join(
        [
            good,
            "noise",
            'sparkrack-phase {"phase": "rm -rf", "seconds": 1}',
            'sparkrack-phase {"phase": "copy", "seconds": -1}',
            'sparkrack-phase {"phase": "copy", "seconds": 1, "bytes": "10"}',
            'sparkrack-phase {"phase": "copy", "seconds": true}',
            "sparkrack-phase [1, 2]",
            "sparkrack-phase {",
        ]
    )
    assert fetch_base.read_phases(text) == [
        {"phase": "copy", "seconds": 2.5, "bytes": 10, "peer": "h", "rail": 1}
    ]
    assert fetch_base.read_phases(text.replace("sparkrack-phase", "other")) == []


def test_copy_records_one_per_peer_and_rail(capsys: pytest.CaptureFixture[str]) -> None:
    whole = fetch_push.PushResult("10.0.0.3", seconds=4.0, stats={"Total bytes sent": 900})
    rail = fetch_push.RailCopy
    split = fetch_push.PushResult(
        "10.0.0.4",
        seconds=6.25,
        per_rail={1: rail(sent_bytes=400, seconds=4.5), 0: rail(sent_bytes=500, seconds=5.0)},
    )
    fetch_step.copy_phases([whole, split])
    records = fetch_base.read_phases(capsys.readouterr().out)
    copies = [r for r in records if r["phase"] == "copy"]
    assert [(r["peer"], r["rail"], r["bytes"], r["seconds"]) for r in copies] == [
        ("10.0.0.3", 0, 900, 4.0),
        ("10.0.0.4", 0, 500, 5.0),
        ("10.0.0.4", 1, 400, 4.5),
    ]
    # The peer's verification: from the end of its longest stream (5.0 s) to its verdict.
    checks = [r for r in records if r["phase"] == "peer-verify"]
    assert [(r["peer"], r["seconds"], "bytes" in r) for r in checks] == [("10.0.0.4", 1.25, False)]


@pytest.mark.tools  # serves or probes HTTP on loopback
def test_download_refuses_short_disk_before_writing(tmp_path: Path) -> None:
    cache = tmp_path / "hf"
    need = 10**18  # more than any disk here: the real statvfs of tmp_path refuses
    repo = fakehub.FakeRepo(
        REPO, REV, {"model.safetensors": b"x" * 2048}, claimed={"model.safetensors": need}
    )
    with fakehub.serve(repo) as url:
        refused = run_step(
            *fetchplan.download_argv(REPO, REV, str(cache), need)[2:], env={"HF_ENDPOINT": url}
        )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    line = last_line(refused)
    assert f"need {(need + fetch_base.SPACE_MARGIN_BYTES) / 1e9:.2f} GB" in line
    # The figure statvfs gave the step (other writers on this disk move it a little meanwhile).
    said = re.search(rf"free ([\d.]+) GB on {re.escape(str(cache))}", line)
    assert said and abs(float(said.group(1)) - free / 1e9) < 1.0, line
    assert repo.gets == {}  # nothing downloaded
    assert not (cache / "models--org--model").exists()


def test_download_skips_a_cached_revision_and_redoes_a_broken_one(tmp_path: Path) -> None:
    fake_snapshot(tmp_path)
    mark(tmp_path)
    cached = run_step(*fetchplan.download_argv(REPO, REV, str(tmp_path), 3000)[2:])
    assert cached.returncode == 0 and "no download" in cached.stdout
    (tmp_path / "models--org--model/blobs/h0").unlink()
    redo = run_step(
        *fetchplan.download_argv(REPO, REV, str(tmp_path), 3000)[2:],
        env={"HF_ENDPOINT": "http://127.0.0.1:9"},
    )
    # The marker no longer holds: the step goes to the Hub (unreachable here) for its manifest.
    assert "checking and completing the download" in redo.stdout
    assert redo.returncode == 1 and "cannot read the Hub's file list" in last_line(redo)


def shared_snapshot(cache: Path) -> dict[str, Path]:
    """huggingface_hub 1.x's layout, marked: each file's repo blob ``blobs/<sha256>`` a link into
    the cache-wide shared store ``blobs/<xx>/<xet hash>``; returns each file's shared blob."""
    base = cache / "models--org--model"
    snap = base / "snapshots" / REV
    store = cache / "blobs"
    for folder in (snap, base / "blobs", base / "refs", store):
        folder.mkdir(parents=True)
    (store / ".huggingface-shared-blobs").write_text("1\n")
    (base / "refs" / "main").write_text(REV)
    files: dict[str, dict[str, object]] = {}
    shared: dict[str, Path] = {}
    for i, size in enumerate((1000, 3000)):
        data = bytes([i + 7]) * size
        sha = hashlib.sha256(data).hexdigest()
        xet = hashlib.sha256(b"xet" + data).hexdigest()  # a stand-in Xet hash
        (store / xet[:2]).mkdir(exist_ok=True)
        (store / xet[:2] / xet).write_bytes(data)
        (base / "blobs" / sha).symlink_to(f"../../blobs/{xet[:2]}/{xet}")
        name = f"model-{i}.safetensors"
        (snap / name).symlink_to(f"../../blobs/{sha}")
        files[name] = {"size": size, "sha256": sha, "xet_hash": xet}
        shared[name] = store / xet[:2] / xet
    (cache / "manifest.json").write_bytes(fetch_base.manifest_bytes(REPO, REV, REV, files))
    mark(cache)
    return shared


def plant(blob: Path) -> None:
    """What another writer of the shared store could leave: other bytes, same size and mtime."""
    st = blob.stat()
    blob.write_bytes(b"\xee" * st.st_size)
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_planted_shared_blob_is_caught_by_wait_and_by_a_cached_download(
    tmp_path: Path,
) -> None:
    shared = shared_snapshot(tmp_path)
    wait = fetchplan.wait_argv(str(tmp_path), REPO, REV, timeout_s=5)[2:]
    download = fetchplan.download_argv(REPO, REV, str(tmp_path), 4000)[2:]
    # Negative control: the untouched snapshot passes both, every byte verified.
    ok = run_step(*wait)
    assert ok.returncode == 0 and "every byte verified" in ok.stdout, ok.stdout + ok.stderr
    message = tmp_path / "termination-log"
    cached = run_step(*download, "--phases", str(message))
    assert cached.returncode == 0 and "no download" in cached.stdout, cached.stderr
    # The head reports the sha256 of the manifest it vouches for where the play reads it.
    digest = hashlib.sha256((tmp_path / "manifest.json").read_bytes()).hexdigest()
    assert fetch_base.read_manifest_digest(message.read_text()) == digest
    assert message.read_text().startswith(f"sparkrack-manifest {digest}\n")
    plant(shared["model-1.safetensors"])
    # Sizes alone still agree: the marker's own check is not fooled once bytes are read.
    assert fetch_base.check_marker(tmp_path, REPO, REV)[0]
    refused = run_step(*wait)
    assert refused.returncode == 1, refused.stdout
    assert "model-1.safetensors" in last_line(refused) and "sha256" in last_line(refused)
    # The download reuses nothing it has not verified: the planted blob is named, removed, and
    # fetched again (from the Hub, unreachable here).
    redo = run_step(*download, env={"HF_ENDPOINT": "http://127.0.0.1:9"})
    assert "no download" not in redo.stdout
    assert "bad: model-1.safetensors: sha256" in redo.stdout, redo.stdout
    assert not shared["model-1.safetensors"].exists()
    assert shared["model-0.safetensors"].exists()
    assert redo.returncode == 1 and "cannot read the Hub's file list" in last_line(redo)


def test_a_blob_is_checked_against_its_sha256_name_not_only_the_manifest(
    tmp_path: Path,
) -> None:
    """A writer of the cache who also rewrites manifest and marker to match its blob: the
    manifest now agrees with the bytes, the blob's own name (its sha256, the Hub's) does not."""
    shared = shared_snapshot(tmp_path)
    blob = shared["model-0.safetensors"]
    plant(blob)
    doc = json.loads((tmp_path / "manifest.json").read_bytes())
    named = doc["files"]["model-0.safetensors"]["sha256"]
    doc["files"]["model-0.safetensors"]["sha256"] = hashlib.sha256(blob.read_bytes()).hexdigest()
    forged = fetch_base.manifest_bytes(REPO, REV, REV, doc["files"])
    (tmp_path / "manifest.json").write_bytes(forged)
    mark(tmp_path)  # verifies against the forged manifest: it agrees with the bytes
    ok, why = fetch_base.check_marker(tmp_path, REPO, REV, content=True)
    assert not ok and f"model-0.safetensors ({blob.relative_to(tmp_path)})" in why
    assert f"blob named {named}" in why
    # Negative control: blob and name agree again, the forged manifest entry is the only lie.
    fresh = shared_snapshot(tmp_path / "fresh")
    assert fetch_base.check_marker(tmp_path / "fresh", REPO, REV, content=True)[0]
    assert fresh


def test_push_and_receive_refuse_bad_inputs(tmp_path: Path) -> None:
    fake_snapshot(tmp_path)
    pw = tmp_path / "pw"
    pw.write_text("s3cret-pass\n")
    unmarked = run_step(*fetchplan.push_argv(str(tmp_path), REPO, REV, ["10.0.0.2"], str(pw))[2:])
    assert unmarked.returncode == 1 and "download first" in last_line(unmarked)
    bad_host = run_step(*fetchplan.push_argv(str(tmp_path), REPO, REV, ["a b"], str(pw))[2:])
    assert bad_host.returncode == 1 and "'a b'" in last_line(bad_host)
    uneven = fetchplan.push_argv(str(tmp_path), REPO, REV, ["10.0.0.2"], str(pw))[2:]
    rails = run_step(*uneven, "--to", "10.0.1.2,10.0.1.3")
    assert rails.returncode == 1 and "must name the same peers" in last_line(rails)
    secrets = tmp_path / "secrets"
    secrets.write_text("someone:else\n")
    receive = fetchplan.receive_argv(str(tmp_path / "c"), 10, str(secrets), REPO, REV, "10.0.0.1")
    wrong = run_step(*receive[2:])
    assert wrong.returncode == 1 and "no 'sparkrack:<password>' line" in last_line(wrong)
    secrets.write_text("sparkrack:pw\n")
    bad_allow = fetchplan.receive_argv(str(tmp_path / "c"), 10, str(secrets), REPO, REV, "a b")
    refused = run_step(*bad_allow[2:])
    assert refused.returncode == 1 and "--allow 'a b'" in last_line(refused)
    # A relay: its next Spark must be an address, its password file readable and not empty,
    # and both flags go together; each refused before anything listens.
    relay = fetchplan.receive_argv(str(tmp_path / "c"), 10, str(secrets), REPO, REV, "10.0.0.1")
    bad_next = run_step(*relay[2:], "--relay-to", "a b", "--relay-password-file", str(pw))
    assert bad_next.returncode == 1 and "--relay-to 'a b'" in last_line(bad_next)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    no_pw = run_step(*relay[2:], "--relay-to", "10.0.0.4", "--relay-password-file", str(empty))
    assert no_pw.returncode == 1 and "--relay-password-file" in last_line(no_pw)
    alone = run_step(*relay[2:], "--relay-to", "10.0.0.4")
    assert alone.returncode == 1 and "go together" in last_line(alone)
    for text in (unmarked.stdout, unmarked.stderr, bad_host.stdout, bad_host.stderr):
        assert "s3cret-pass" not in text
    assert not (tmp_path / "c").exists()


def test_secrets_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefgh")
    assert fetch_base.redact("401 for token hf_abcdefgh") == "401 for token ***"
    monkeypatch.delenv("HF_TOKEN")
    assert fetch_base.redact("hf_abcdefgh") == "hf_abcdefgh"


def test_every_argv_fetchplan_builds_parses_as_the_script_reads_it() -> None:
    parser = fetch_step.build_parser()
    built = {
        "download": fetchplan.download_argv(REPO, REV, "/c", 5, 60, 2),
        "receive": fetchplan.receive_argv(
            "/c", 5, "/s", REPO, REV, "10.0.0.1", 9000, "10.0.0.3", 60, 2
        ),
        "push": fetchplan.push_argv(
            "/c",
            REPO,
            REV,
            ["10.0.0.3", "10.0.0.4"],
            "/p",
            9000,
            100,
            other_rails=[["10.0.1.3", "10.0.1.4"]],
        ),
        "receive-rails": fetchplan.receive_argv(
            "/c", 5, "/s", REPO, REV, ["10.0.0.1", "10.0.1.1"], 9000, ["10.0.0.3", "10.0.1.3"]
        ),
        "receive-relay": fetchplan.receive_argv(
            "/c",
            5,
            "/s",
            REPO,
            REV,
            ["10.0.0.1", "10.0.1.1"],
            9000,
            ["10.0.0.3", "10.0.1.3"],
            relay_to=["10.0.0.4", "10.0.1.4"],
            relay_password_file="/p",
            phases="/m",
        ),  # fmt: skip
        "wait": fetchplan.wait_argv("/c", REPO, REV, 60, 2),
        "memwait": fetchplan.memwait_argv(61.5, 60, 2, "/proc/meminfo", phases="/m"),
    }
    for step, argv in built.items():
        assert argv[:3] == ["python3", "/opt/sparkrack/switch/fetch_step.py", step.split("-")[0]]
        args = parser.parse_args(argv[2:])
        assert args.step == step.split("-")[0]
    # One --to per rail, the peers in the same order.
    assert parser.parse_args(built["push"][2:]).to == ["10.0.0.3,10.0.0.4", "10.0.1.3,10.0.1.4"]
    assert parser.parse_args(built["memwait"][2:]).need_gb == 61.5
    assert parser.parse_args(built["memwait"][2:]).phases == Path("/m")
    receive = parser.parse_args(built["receive"][2:])
    assert (receive.address, receive.repo, receive.port) == (["10.0.0.3"], REPO, 9000)
    assert receive.allow == "10.0.0.1"
    assert receive.manifest_sha256_file == Path(contract.FETCH_MANIFEST_FILE)
    rails = parser.parse_args(built["receive-rails"][2:])
    assert (rails.address, rails.allow) == (["10.0.0.3", "10.0.1.3"], "10.0.0.1,10.0.1.1")
    relay = parser.parse_args(built["receive-relay"][2:])
    assert (relay.relay_to, relay.relay_password_file) == (["10.0.0.4", "10.0.1.4"], Path("/p"))
    assert relay.phases == Path("/m")
    with pytest.raises(ValueError, match="go together"):
        fetchplan.receive_argv("/c", 5, "/s", REPO, REV, "10.0.0.1", relay_to=["10.0.0.4"])
    with pytest.raises(SystemExit):
        parser.parse_args(["receive", "--cache", "/c", "--need-bytes", "0", "--secrets-file", "s"])
    # A receiver without the head's manifest digest is not a receiver: the flag is required.
    without = [a for a in built["receive"][2:] if a != "--manifest-sha256-file"]
    without.remove(contract.FETCH_MANIFEST_FILE)
    with pytest.raises(SystemExit):
        parser.parse_args(without)


def test_shipped_scripts_import_the_standard_library_and_each_other_only() -> None:
    files = fetchplan.script_files()
    assert files == {name: (SCRIPT.parent / name).read_text() for name in fetchplan.SCRIPT_FILES}
    siblings = {Path(name).stem for name in fetchplan.SCRIPT_FILES}
    outside: set[str] = set()
    for text in files.values():
        tree = ast.parse(text)
        names = {
            a.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for a in n.names
        }
        names |= {
            n.module.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
        }
        outside |= names - sys.stdlib_module_names - siblings
    assert outside == {"huggingface_hub"}
    secret = fetchplan.rsync_secret_data("pw")
    assert secret == {"password": "pw", "rsyncd.secrets": "sparkrack:pw\n"}
