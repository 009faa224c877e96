"""The receiver for real on loopback: ``receive`` runs the real ``rsync --daemon`` with the
config it renders, ``push`` the real rsync client. A hub 1.x shared-blob snapshot is pushed,
verified by the peer against the manifest and loads offline there; a byte corrupted on the peer
is found and only that file is sent again; and the attacks a holder of the password could try
(setuid files, device nodes, writing outside the module, symlink escapes, deletes, another
host) are each refused, with the old permissive config as the negative control.

Needs root (the daemon chroots) and the rsync binary (Debian's rsync; .ci/run installs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakehub
import hubversions
import pytest
from copytimeline import copy_lines
from hubcache import COMMIT, REPO, download, make_repo, offline_sums, sha_of, share_blobs
from rsyncpeer import (
    FOLDER,
    PASSWORD,
    SCRIPT,
    free_port,
    manifest_digest,
    password_file,
    sized_snapshot,
    start_receive,
)

from sparkrack.serving.scripts import fetch_base, fetch_daemon, fetch_push
from sparkrack.serving.switch import plan as fetchplan

pytestmark = [
    pytest.mark.tools,  # rsync daemons on loopback
    pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the receiver chroots: root only"),
]


def push(
    head: Path, port: int, tmp: Path, other_rails: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    pw = password_file(tmp)
    argv = fetchplan.push_argv(
        str(head), REPO, "main", ["127.0.0.1"], str(pw), port=port, timeout_s=60, interval_s=5,
        other_rails=[[address] for address in other_rails],
    )  # fmt: skip
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv[2:]],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, fakehub.FakeRepo]]:
    """A hub 1.x cache with the shared blob store, downloaded, verified and marked."""
    cache = tmp_path_factory.mktemp("head")
    repo = make_repo()
    with fakehub.serve(repo) as url:
        done = download(cache, hubversions.HUB_1, url)
    assert done.returncode == 0, done.stderr
    share_blobs(cache, repo)
    assert fetch_base.check_marker(cache, REPO, "main")[0]
    yield cache, repo


def test_shared_blob_snapshot_copied_verified_and_loadable(
    head: tuple[Path, fakehub.FakeRepo], tmp_path: Path
) -> None:
    cache, repo = head
    peer = start_receive(tmp_path, tmp_path / "peer", expect=cache)
    pushed = push(cache, peer.port, tmp_path)
    received = peer.output()
    print(pushed.stdout, pushed.stderr, received, sep="\n")
    assert pushed.returncode == 0, pushed.stderr
    assert peer.proc.returncode == 0, received
    assert "round 1: every file verified" in received
    assert "verified by the peer" in pushed.stdout and "1 round(s)" in pushed.stdout
    # The push's phase records: one copy to the one peer on rail 0, every byte of the snapshot;
    # then the peer's verification.
    copied, checked = fetch_base.read_phases(pushed.stdout)
    assert (copied["phase"], copied["peer"], copied["rail"]) == ("copy", "127.0.0.1", 0)
    assert (checked["phase"], checked["peer"]) == ("peer-verify", "127.0.0.1")
    assert int(str(copied["bytes"])) >= sum(len(d) for d in repo.files.values())
    # The shared store went along (marker, <xx>/<hash>), the repo's blobs are links into it.
    store = peer.cache / "blobs"
    assert (store / ".huggingface-shared-blobs").read_text() == "1\n"
    for path in (p for p in repo.files if repo.is_lfs(p)):
        xet = fakehub.xet_hash(repo.files[path])
        assert (store / xet[:2] / xet).is_file()
        assert os.readlink(peer.cache / FOLDER / "blobs" / repo.etag(path)) == (
            f"../../blobs/{xet[:2]}/{xet}"
        )
    # The receiver wrote manifest and marker itself: identical to the head's.
    for rel in (fetch_base.manifest_relpath(REPO, "main"),):
        assert (peer.cache / rel).read_bytes() == (cache / rel).read_bytes()
    assert fetch_base.check_marker(peer.cache, REPO, "main")[0]
    loaded = offline_sums(peer.cache, hubversions.HUB_1)
    assert loaded["sums"] == sha_of(repo)
    # Transfers ran as the unprivileged uid: what arrived belongs to it.
    shard = peer.cache / FOLDER / "blobs" / repo.etag("config.json")
    assert shard.stat().st_uid == fetch_daemon.TRANSFER_UID
    assert PASSWORD not in pushed.stdout + pushed.stderr + received

    # A corrupted byte in one shared blob on the peer: size and mtime unchanged, so rsync's
    # quick check alone would skip it. The peer's verification finds it; only it is sent again.
    victim = "model-00001-of-00002.safetensors"
    xet = fakehub.xet_hash(repo.files[victim])
    blob = store / xet[:2] / xet
    st = blob.stat()
    data = bytearray(blob.read_bytes())
    data[12345] ^= 0x01
    blob.write_bytes(bytes(data))
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    peer = start_receive(tmp_path, peer.cache, expect=cache)
    again = push(cache, peer.port, tmp_path)
    received = peer.output()
    print(again.stdout, again.stderr, received, sep="\n")
    assert again.returncode == 0, again.stderr
    assert f"round 1: the peer found 1 bad: {victim}; sending those again" in again.stdout
    assert f"{victim}: sha256" in received and "round 2: every file verified" in received
    assert "2 round(s)" in again.stdout
    # rsyncd logs one line per file received: round 2 received the one blob, nothing else.
    recv = [ln.split()[-2:] for ln in received.splitlines() if " recv " in ln]
    sent_files = {name for name, _size in recv if not name.endswith(("manifest.json", "round"))}
    assert sent_files == {f"{xet[:2]}/{xet}"}, recv
    assert offline_sums(peer.cache, hubversions.HUB_1)["sums"] == sha_of(repo)


def test_a_pusher_with_a_doctored_manifest_is_refused(tmp_path: Path) -> None:
    """The pusher holds the password, so it can send any manifest with files to match. The
    receiver takes only the manifest whose sha256 the head's download reported (out of band):
    a doctored one is refused, both digests named, nothing marked. Negative control: told the
    doctored digest, the same receiver takes the same push."""
    sized_snapshot(tmp_path / "genuine", (1_000, 2_000))
    sized_snapshot(tmp_path / "doctored", (1_000, 2_000))  # same repo, other bytes, own manifest
    want, got = manifest_digest(tmp_path / "genuine"), manifest_digest(tmp_path / "doctored")
    assert want != got
    outcome = {}
    for told in (want, got):
        run = tmp_path / told[:8]
        run.mkdir()
        peer = start_receive(run, run / "peer", timeout=30, expect=told)
        argv = fetchplan.push_argv(
            str(tmp_path / "doctored"), REPO, "main", ["127.0.0.1"], str(password_file(run)),
            port=peer.port, timeout_s=15, interval_s=5,
        )  # fmt: skip
        pushed = subprocess.run(
            [sys.executable, str(SCRIPT), *argv[2:]],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        outcome[told] = (peer.output(), peer.proc.returncode, pushed.returncode, run / "peer")
    received, code, pushed_code, cache = outcome[want]
    assert code == 1 and pushed_code != 0, received
    assert f"the pushed manifest has sha256 {got}, the head computed {want}: refused" in received
    assert not fetch_base.marker_path(cache, REPO, "main").exists()
    assert "every file verified" not in received
    received, code, pushed_code, cache = outcome[got]
    assert code == 0 and pushed_code == 0, received
    assert fetch_base.check_marker(cache, REPO, "main", content=True)[0]


def test_a_round_waits_for_the_heads_digest(tmp_path: Path) -> None:
    """The digest reaches the receiver after it started (the play writes it once the head's
    download ended): a round that comes first waits for it, then verifies."""
    sized_snapshot(tmp_path / "head", (1_000,))
    rounds = Path(tempfile.gettempdir()).glob
    before = set(rounds("sparkrack-rsyncd-*"))
    peer = start_receive(tmp_path, tmp_path / "peer", timeout=60)
    (work,) = set(rounds("sparkrack-rsyncd-*")) - before
    argv = fetchplan.push_argv(
        str(tmp_path / "head"), REPO, "main", ["127.0.0.1"], str(password_file(tmp_path)),
        port=peer.port, timeout_s=50, interval_s=1,
    )  # fmt: skip
    pushing = subprocess.Popen(
        [sys.executable, str(SCRIPT), *argv[2:]],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (work / "meta" / fetch_daemon.ROUND_FILE).exists():
        assert time.monotonic() < deadline and pushing.poll() is None
        time.sleep(0.2)
    time.sleep(1)  # the receiver's next look at the round (it looks every 0.2 s)
    assert pushing.poll() is None  # no verdict without the digest
    assert not fetch_base.marker_path(peer.cache, REPO, "main").exists()
    (tmp_path / "manifest.sha256").write_text(manifest_digest(tmp_path / "head"))
    out, _ = pushing.communicate(timeout=60)
    received = peer.output()
    assert pushing.returncode == 0 and peer.proc.returncode == 0, out + received
    assert "waits for the head's manifest sha256" in received


def rail_summary(pushed: str) -> dict[str, Any]:
    """The push's ``copy per rail json`` line."""
    line = next(ln for ln in pushed.splitlines() if f"{fetch_push.RAIL_SUMMARY} json: " in ln)
    return json.loads(line.split(f"{fetch_push.RAIL_SUMMARY} json: ", 1)[1])  # type: ignore[no-any-return]


def test_two_rails_carry_the_files_split_by_bytes(
    head: tuple[Path, fakehub.FakeRepo], tmp_path: Path
) -> None:
    """Two rails on loopback (127.0.0.1, 127.0.0.2): one daemon per address, one stream per
    rail; both carry file data, balanced by bytes; the peer verifies the whole snapshot."""
    cache, repo = head
    rails = ("127.0.0.1", "127.0.0.2")
    peer = start_receive(
        tmp_path, tmp_path / "peer", allow=",".join(rails), addresses=rails, expect=cache
    )
    pushed = push(cache, peer.port, tmp_path, other_rails=rails[1:])
    received = peer.output()
    print(pushed.stdout, pushed.stderr, received, sep="\n")
    assert pushed.returncode == 0, pushed.stderr
    assert "round 1: every file verified" in received
    assert received.count("rsync daemon on 127.0.0.") == 2
    summary = rail_summary(pushed.stdout)["rails"]
    literal = [summary[r]["literal_bytes"] for r in ("0", "1")]
    snap = fetch_base.find_snapshot(cache, REPO, "main")
    assert snap.bytes <= sum(literal) < snap.bytes + 100  # and refs/main
    largest = max(len(data) for data in repo.files.values())
    # Balanced: the rails differ by at most the largest file.
    assert min(literal) > 0 and abs(literal[0] - literal[1]) <= largest
    assert offline_sums(peer.cache, hubversions.HUB_1)["sums"] == sha_of(repo)
    # Negative control: one rail only carries everything on rail 0.
    peer = start_receive(tmp_path, tmp_path / "peer1", expect=cache)
    single = push(cache, peer.port, tmp_path)
    peer.output()
    assert single.returncode == 0, single.stderr
    one = rail_summary(single.stdout)["rails"]
    assert list(one) == ["0"] and one["0"]["literal_bytes"] == sum(literal)


def test_split_by_rail_is_balanced_and_deterministic(tmp_path: Path) -> None:
    folder, store = tmp_path / "m", tmp_path / "s"
    for root, made in ((folder, (700, 300, 0)), (store, (500, 500))):
        root.mkdir()
        for i, size in enumerate(made):
            (root / f"f{i}").write_bytes(b"x" * size)
    (folder / "link").symlink_to("f0")
    listing = fetch_push.Listing(("f0", "f1", "f2", "link"), ("f0", "f1"))
    parts = fetch_push.split_by_rail(listing, folder, store, 2)
    assert parts == fetch_push.split_by_rail(listing, folder, store, 2)
    sizes = [
        sum((folder / p).lstat().st_size for p in part.model if not (folder / p).is_symlink())
        + sum((store / p).stat().st_size for p in part.shared)
        for part in parts
    ]
    assert sorted(sizes) == [1000, 1000]
    assert sorted(p for part in parts for p in part.model) == sorted(listing.model)
    assert sorted(p for part in parts for p in part.shared) == sorted(listing.shared)
    assert fetch_push.split_by_rail(listing, folder, store, 1) == [listing]


# --- the copy estimate ------------------------------------------------------------------------

ESTIMATE_TOLERANCE = 0.25
"""How far the copy estimate may be from the measured copy (a fraction of the measurement)."""
VERIFY_SLACK_S = 0.5
"""peer-verify lasts about a second here (the peer's answer, not its hashing): half a second
of slack for process starts on a loaded machine."""


OVERHEAD_SLACK_S = 0.5
"""A stream's overhead on loopback against the estimate's (which is a Spark's): half a second."""


def test_the_copy_estimate_matches_a_rate_limited_copy(tmp_path: Path) -> None:
    """``sparkrack plan -i``'s copy and peer-verify figures against the records the push
    leaves, rsync held to a known rate (--bwlimit); the lab-container version is
    tests/serving/test_fetch_copy.py."""
    from sparkrack.planner.switch import Rates, copy_seconds, peer_verify_seconds, within

    total = sized_snapshot(tmp_path / "head", (24_000_000, 8_000_000))
    kib_s = 4_000  # 32 MB at 4.1 MB/s: about 8 s
    peer = start_receive(tmp_path, tmp_path / "peer", expect=tmp_path / "head")
    pw = tmp_path / "password"
    pw.write_text(PASSWORD + "\n")
    argv = fetchplan.push_argv(
        str(tmp_path / "head"), REPO, "main", ["127.0.0.1"], str(pw), port=peer.port,
        bwlimit_kib=kib_s, timeout_s=120, interval_s=5,
    )  # fmt: skip
    load = os.getloadavg()[0]
    pushed = subprocess.run(
        [sys.executable, str(SCRIPT), *argv[2:]],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    received = peer.output()
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert peer.proc.returncode == 0, received
    copied, checked = fetch_base.read_phases(pushed.stdout)
    assert (copied["phase"], checked["phase"]) == ("copy", "peer-verify")
    measured = float(str(copied["seconds"]))
    verified = float(str(checked["seconds"]))
    assert int(str(copied["bytes"])) >= total
    rates = Rates(kib_s * 1024 * 8 / 1e6, 1, 100_000, cores=os.cpu_count() or 1)
    predicted = copy_seconds(total, 1, 1, rates)
    answer = peer_verify_seconds(total, 1, rates)
    print(
        f"copy estimate vs measured on loopback: {total / 1e6:.0f} MB at --bwlimit={kib_s} KiB/s "
        f"({rates.rail_mbit_s:.1f} Mbit/s): copy predicted {predicted:.2f} s, measured "
        f"{measured:.2f} s ({100 * (predicted - measured) / measured:+.0f} %); peer-verify "
        f"predicted {answer:.2f} s, measured {verified:.2f} s; load {load:.2f}"
    )
    shown = copy_lines(pushed.stdout, "127.0.0.1", predicted)
    print("\n".join(shown))
    if os.environ.get("SPARKRACK_BENCH_REPORT"):  # tests/fetch_copy_benchmark.py collects these
        report = {
            "bytes": total, "kib_s": kib_s, "copy_predicted_s": predicted,
            "copy_measured_s": measured, "verify_predicted_s": answer,
            "verify_measured_s": verified, "load_before": load, "load_after": os.getloadavg()[0],
        }  # fmt: skip
        with open(os.environ["SPARKRACK_BENCH_REPORT"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(report) + "\n")
    assert re.search(
        rf"copy rail 0 +{measured:.1f} s +{predicted:.1f} s  pod +127\.0\.0\.1", shown[0]
    )
    assert within(predicted, measured, ESTIMATE_TOLERANCE), (predicted, measured)
    assert within(answer, verified, ESTIMATE_TOLERANCE, VERIFY_SLACK_S), (answer, verified)
    # Negative control: the estimate at twice the rate is outside the tolerance.
    wrong = Rates(rates.rail_mbit_s * 2, 1, 100_000, cores=rates.cores)
    assert not within(copy_seconds(total, 1, 1, wrong), measured, ESTIMATE_TOLERANCE)
    # The per-stream overhead alone: a copy of one small file at the same rate is its process
    # start, connection, login and file list. Inside the 8 s copy above it is within the
    # tolerance whether it is 0.3 s or 1.5 s; here it is most of the figure.
    small = sized_snapshot(tmp_path / "small", (1_000,))
    quick = start_receive(tmp_path / "small", tmp_path / "small-peer", expect=tmp_path / "small")
    argv = fetchplan.push_argv(
        str(tmp_path / "small"), REPO, "main", ["127.0.0.1"], str(pw), port=quick.port,
        bwlimit_kib=kib_s, timeout_s=60, interval_s=5,
    )  # fmt: skip
    pushed = subprocess.run(
        [sys.executable, str(SCRIPT), *argv[2:]],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    quiet = quick.output()
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert quick.proc.returncode == 0, quiet
    copied = fetch_base.read_phases(pushed.stdout)[0]
    overhead = float(str(copied["seconds"]))
    guess = copy_seconds(small, 1, 1, rates)
    print(f"one small file: copy predicted {guess:.2f} s, measured {overhead:.2f} s")
    assert within(guess, overhead, ESTIMATE_TOLERANCE, OVERHEAD_SLACK_S), (guess, overhead)


# --- attacks ---------------------------------------------------------------------------------


def rsync(*args: str, password: str = PASSWORD) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["rsync", *args], capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "RSYNC_PASSWORD": password},
    )  # fmt: skip


def url(port: int, path: str = "") -> str:
    return f"rsync://{fetch_base.RSYNC_USER}@127.0.0.1:{port}/{path}"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A peer cache with another model already there (what an attacker would overwrite)."""
    cache = tmp_path / "peer"
    other = cache / "models--other--model/snapshots" / COMMIT
    other.mkdir(parents=True)
    (other / "modeling.py").write_text("SAFE = True\n")
    return cache


def attack_source(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    suid = src / "suid"
    suid.write_bytes(b"#!/bin/sh\nid\n")
    suid.chmod(0o4755)
    os.mkfifo(src / "fifo")
    with contextlib.suppress(OSError):  # without CAP_MKNOD the fifo stands for the specials
        os.mknod(src / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (src / "modeling.py").write_text("SAFE = False\n")
    (src / "tool").write_bytes(b"#!/bin/sh\nid\n")
    (src / "tool").chmod(0o755)
    (src / "slow").write_bytes(os.urandom(256 * 1024))
    (src / "escape").symlink_to("../models--other--model/snapshots/" + COMMIT)
    return src


def attacks(port: int, src: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """Each attack a holder of the password could try against one receiver."""
    return {
        "setuid with --perms": rsync("-p", str(src / "suid"), url(port, "model/")),
        "setuid without": rsync(str(src / "suid"), url(port, "model/")),
        "devices and specials": rsync("-D", "-r", str(src) + "/", url(port, "model/dev/")),
        "owner": rsync("-o", "-g", str(src / "suid"), url(port, "model/own")),
        "delete": rsync("-r", "--delete", str(src) + "/", url(port, "model/")),
        "dotdot": rsync(
            str(src / "modeling.py"),
            url(port, f"model/../models--other--model/snapshots/{COMMIT}/modeling.py"),
        ),
        "symlink": rsync("-l", str(src / "escape"), url(port, "model/escape")),
        "through the symlink": rsync(
            str(src / "modeling.py"), url(port, "model/escape/modeling.py")
        ),
        "forged marker": rsync(
            str(src / "modeling.py"),
            url(port, "model/../.sparkrack/models--other--model@main.done"),
        ),
        "wrong password": rsync(str(src / "modeling.py"), url(port, "model/"), password="guess"),
        # Without --perms a new file keeps its source's execute bits unless the daemon strips them.
        "executable": rsync(str(src / "tool"), url(port, "model/tool")),
    }


def transfer_roots(daemon_parent: int, src: Path, port: int) -> set[str]:
    """The root folder of each rsync process under ``daemon_parent`` while a slow push to it
    runs: a chrooted connection's is its module's path, an unchrooted one's is ``/``."""
    slow = subprocess.Popen(
        ["rsync", "--bwlimit=8", str(src / "slow"), url(port, "model/slow")],
        env={**os.environ, "RSYNC_PASSWORD": PASSWORD},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    roots: set[str] = set()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(r != "/" for r in roots):
            parents = {}
            for entry in Path("/proc").iterdir():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    stat_line = (entry / "stat").read_text()
                    parents[int(entry.name)] = int(stat_line.rsplit(")", 1)[1].split()[1])
            below, frontier = set(), {daemon_parent}
            while frontier:
                frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - below
                below |= frontier
            for pid in below:
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/comm").read_text().strip() == "rsync":
                        roots.add(os.readlink(f"/proc/{pid}/root"))
            time.sleep(0.1)
    finally:
        slow.kill()
        slow.wait(10)
    return roots


def peer_state(cache: Path) -> dict[str, object]:
    """What the attacks could have changed on the peer."""
    modes = {}
    for dirpath, dirnames, filenames in os.walk(cache):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            modes[str(path.relative_to(cache))] = os.lstat(path).st_mode
    return {
        "other": (cache / "models--other--model/snapshots" / COMMIT / "modeling.py").read_text(),
        "setuid": sorted(p for p, m in modes.items() if m & (stat.S_ISUID | stat.S_ISGID)),
        "devices": sorted(
            p for p, m in modes.items() if stat.S_ISCHR(m) or stat.S_ISBLK(m) or stat.S_ISFIFO(m)
        ),
        "markers": sorted(p for p in modes if p.startswith(".sparkrack/") and p.endswith(".done")),
        "links": {p: os.readlink(cache / p) for p, m in modes.items() if stat.S_ISLNK(m)},
        "executable": sorted(
            p
            for p, m in modes.items()
            if stat.S_ISREG(m) and m & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        ),
    }


def test_receiver_refuses_the_attacks(victim: Path, tmp_path: Path) -> None:
    src = attack_source(tmp_path)
    peer = start_receive(tmp_path, victim, timeout=30)
    try:
        results = attacks(peer.port, src)
        roots = transfer_roots(peer.proc.pid, src, peer.port)
        # Another host: a receiver that allows 127.0.0.2 only refuses 127.0.0.1 (in a cache
        # of its own: two receivers of one model in one cache take turns).
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        other = start_receive(tmp_path, elsewhere, allow="127.0.0.2", timeout=30)
        try:
            results["another host"] = rsync(str(src / "modeling.py"), url(other.port, "model/"))
        finally:
            other.proc.terminate()
            other.output()
        state = peer_state(victim)
    finally:
        peer.proc.terminate()
        log = peer.output()
    print(log)
    for name, r in results.items():
        print(f"{name}: rc {r.returncode}: {r.stderr.strip()[-300:]}")
    assert state["other"] == "SAFE = True\n"  # nothing outside the module was written
    assert state["setuid"] == [] and state["devices"] == [] and state["markers"] == []
    # incoming chmod: a pushed file never lands executable (the push carries no --perms).
    assert results["executable"].returncode == 0 and state["executable"] == [], state
    # use chroot: the connection's process sees the module's folder as its root, nothing above.
    chrooted = {r for r in roots if r != "/"}
    assert chrooted and all(Path(r).is_relative_to(victim) for r in chrooted), roots
    # The one symlink that arrived is munged: dead until the receiver checks it.
    assert all(t.startswith("/rsyncd-munged/") for t in state["links"].values()), state["links"]
    for name in ("setuid with --perms", "devices and specials", "owner", "delete"):
        assert results[name].returncode != 0 and "refuse" in results[name].stderr, name
    assert "auth failed" in results["wrong password"].stderr
    # The module does not exist for another host (rsyncd names it unknown, transfers nothing).
    assert results["another host"].returncode != 0
    assert "@ERROR: Unknown module 'model'" in results["another host"].stderr
    assert results["through the symlink"].returncode != 0
    # What the receiver does with a munged link at the end of a round: one that leaves the
    # model's folder is removed, never made real.
    removed = fetch_daemon.unmunge(victim, REPO)
    assert removed == [f"{FOLDER}/escape -> ../models--other--model/snapshots/{COMMIT}"]
    assert not (victim / FOLDER / "escape").is_symlink()


PERMISSIVE = """use chroot = no
munge symlinks = no
[hf]
path = {cache}
read only = no
write only = yes
list = no
uid = 0
gid = 0
auth users = sparkrack
secrets file = {secrets}
refuse options = delete
"""


def test_negative_control_the_old_config_lets_the_attacks_through(
    victim: Path, tmp_path: Path
) -> None:
    """The same attacks against the receiver's former config succeed: the test can fail."""
    src = attack_source(tmp_path)
    secrets = tmp_path / "secrets"
    secrets.write_text(f"sparkrack:{PASSWORD}\n")
    secrets.chmod(0o600)
    conf = tmp_path / "rsyncd.conf"
    conf.write_text(PERMISSIVE.format(cache=victim, secrets=secrets))
    port = free_port()
    daemon = subprocess.Popen(
        [
            "rsync",
            "--daemon",
            "--no-detach",
            f"--config={conf}",
            f"--port={port}",
            "--address=127.0.0.1",
        ]
    )
    try:
        time.sleep(1)
        rsync("-p", str(src / "suid"), url(port, "hf/suid"))
        rsync("-l", str(src / "escape"), url(port, "hf/escape"))
        through = rsync(
            str(src / "modeling.py"),
            url(port, f"hf/models--other--model/snapshots/{COMMIT}/modeling.py"),
        )
        state = peer_state(victim)
    finally:
        daemon.terminate()
        daemon.wait(10)
    assert through.returncode == 0
    assert state["other"] == "SAFE = False\n"  # another model's code overwritten
    assert state["setuid"] == ["suid"]
    assert not str(state["links"]["escape"]).startswith("/rsyncd-munged/")
