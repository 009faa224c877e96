"""A chain of receivers for real on loopback: the head pushes to the first peer only, over two
rails; the first peer passes every file on to the second while it still receives (its relay),
then, once its own copy verifies, pushes the rest and the manifest there; the second verifies
and marks (also a huggingface_hub 1.x shared-blob snapshot, which loads offline at the end). Both daemons listen on the deployment's one port, each on its own addresses, each
allowing only the Spark before it. The relay reads nothing but plain files inside the model's
folder and the shared store.

Needs root (the daemons chroot) and the rsync binary, like test_fetch_receiver.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import fakehub
import hubversions
import pytest
from hubcache import REPO, download, make_repo, offline_sums, sha_of, share_blobs
from rsyncpeer import (
    FOLDER,
    PASSWORD,
    SCRIPT,
    free_port,
    password_file,
    sized_snapshot,
    start_receive,
)

from sparkrack.serving.scripts import fetch_base, fetch_relay
from sparkrack.serving.switch import plan as fetchplan

pytestmark = [
    pytest.mark.tools,  # rsync daemons on loopback
    pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the receivers chroot: root only"),
]
HEAD = "127.0.0.1"
P1 = ("127.0.0.2", "127.0.0.12")
P2 = ("127.0.0.3", "127.0.0.13")
SHARD = 6_000_000
KIB_S = 3_000
"""The head's rate per rail: each 6 MB shard takes about 2 s, so the relay has time to act."""


def push_to_first(head: Path, port: int, tmp: Path) -> subprocess.CompletedProcess[str]:
    argv = fetchplan.push_argv(
        str(head), REPO, "main", [P1[0]], str(password_file(tmp)), port=port,
        bwlimit_kib=KIB_S, timeout_s=120, interval_s=5, other_rails=[[P1[1]]],
    )  # fmt: skip
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv[2:]],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def recv_lines(output: str) -> list[str]:
    """The paths a receiver's daemons logged as received (``recv <module> <path> <length>``)."""
    out = []
    for line in output.splitlines():
        words = line.split()
        if "recv" in words:
            out.append(words[words.index("recv") + 2])
    return out


def test_a_chain_relays_each_file_while_receiving_and_every_hop_verifies(tmp_path: Path) -> None:
    total = sized_snapshot(tmp_path / "head", (SHARD,) * 4 + (1_000,))
    port = free_port()
    for d in ("p1", "p2"):
        (tmp_path / d).mkdir()
    last = start_receive(
        tmp_path / "p2", tmp_path / "p2" / "cache", allow=",".join(P1), addresses=P2, port=port,
        timeout=120, expect=tmp_path / "head",
    )  # fmt: skip
    # The second peer takes nothing from the head itself: only the Spark before it may push.
    canary = tmp_path / "canary"
    canary.write_bytes(b"x")
    direct = subprocess.run(
        ["rsync", str(canary), f"rsync://{fetch_base.RSYNC_USER}@{P2[0]}:{port}/model/x"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "RSYNC_PASSWORD": PASSWORD},
    )  # fmt: skip
    assert direct.returncode != 0, direct.stderr
    assert "@ERROR: Unknown module 'model'" in direct.stderr, direct.stderr
    phases = tmp_path / "p1" / "phases"
    first = start_receive(
        tmp_path / "p1", tmp_path / "p1" / "cache", allow=HEAD, addresses=P1, port=port,
        timeout=120, relay_to=P2, phases=phases, expect=tmp_path / "head",
    )  # fmt: skip
    pushed = push_to_first(tmp_path / "head", port, tmp_path)
    relayed = first.output(180)
    received = last.output(180)
    print(pushed.stdout, pushed.stderr, relayed, received, sep="\n----\n")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert first.proc.returncode == 0, relayed
    assert last.proc.returncode == 0, received
    for cache in (first.cache, last.cache):
        assert fetch_base.check_marker(cache, REPO, "main")[0]
        blobs = sorted((cache / FOLDER / "blobs").iterdir())
        head_blobs = sorted((tmp_path / "head" / FOLDER / "blobs").iterdir())
        assert [b.name for b in blobs] == [b.name for b in head_blobs]
        assert all(b.read_bytes() == h.read_bytes() for b, h in zip(blobs, head_blobs, strict=True))
    # The head pushed to the first peer only; the relay passed shards on before the first
    # peer's own copy had verified (its log says so in that order).
    lines = relayed.splitlines()
    passed = [i for i, ln in enumerate(lines) if "file(s) passed on" in ln]
    verified = next(i for i, ln in enumerate(lines) if "round 1: every file verified" in ln)
    assert passed and passed[0] < verified, relayed
    # Every shard reached the second peer exactly once (relayed, never sent again by the final
    # push), on both rails.
    shards = [p for p in recv_lines(received) if p.startswith("blobs/") and len(p) > 60]
    assert len(shards) == len(set(shards)) == 5, shards
    records = fetch_base.read_phases(phases.read_text())
    copies = [r for r in records if r["phase"] == "copy"]
    assert {(r["peer"], r["via"], r["rail"]) for r in copies} == {
        (P2[0], P1[0], 0),
        (P2[0], P1[0], 1),
    }
    assert all(int(str(r["bytes"])) > SHARD for r in copies)
    assert sum(int(str(r["bytes"])) for r in copies) >= total
    assert [r["peer"] for r in records if r["phase"] == "peer-verify"] == [P2[0]]
    assert PASSWORD not in pushed.stdout + pushed.stderr + relayed + received


def test_a_shared_blob_snapshot_travels_the_chain_and_loads_offline_at_its_end(
    tmp_path: Path,
) -> None:
    """huggingface_hub 1.x's layout: the shards in the cache-wide shared store, the repo's blobs
    links into it. The relay passes the store's files on (module ``shared``); the links come
    with the final push; the last peer loads the model offline with hub 1.x."""
    head = tmp_path / "head"
    repo = make_repo()
    with fakehub.serve(repo) as url:
        done = download(head, hubversions.HUB_1, url)
    assert done.returncode == 0, done.stderr
    share_blobs(head, repo)
    port = free_port()
    for d in ("p1", "p2"):
        (tmp_path / d).mkdir()
    last = start_receive(
        tmp_path / "p2", tmp_path / "p2" / "cache", allow=",".join(P1), addresses=P2, port=port,
        expect=head,
    )  # fmt: skip
    first = start_receive(
        tmp_path / "p1", tmp_path / "p1" / "cache", allow=HEAD, addresses=P1, port=port,
        relay_to=P2, expect=head,
    )  # fmt: skip
    argv = fetchplan.push_argv(
        str(head), REPO, "main", [P1[0]], str(password_file(tmp_path)), port=port,
        timeout_s=60, interval_s=5, other_rails=[[P1[1]]],
    )  # fmt: skip
    pushed = subprocess.run(
        [sys.executable, str(SCRIPT), *argv[2:]],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    relayed, received = first.output(), last.output()
    print(pushed.stdout, relayed, received, sep="\n----\n")
    assert pushed.returncode == 0 and first.proc.returncode == 0, relayed
    assert last.proc.returncode == 0, received
    assert " recv shared " in received  # the store's files reached the last peer from the first
    store = last.cache / "blobs"
    assert (store / ".huggingface-shared-blobs").is_file()
    for path in (p for p in repo.files if repo.is_lfs(p)):
        xet = fakehub.xet_hash(repo.files[path])
        assert (store / xet[:2] / xet).is_file()
        assert os.readlink(last.cache / FOLDER / "blobs" / repo.etag(path)) == (
            f"../../blobs/{xet[:2]}/{xet}"
        )
    assert fetch_base.check_marker(last.cache, REPO, "main")[0]
    assert offline_sums(last.cache, hubversions.HUB_1)["sums"] == sha_of(repo)


def test_without_a_relay_the_first_peer_passes_nothing_on(tmp_path: Path) -> None:
    """Negative control: the same first peer with no ``--relay-to`` leaves the second empty."""
    sized_snapshot(tmp_path / "head", (SHARD,) * 2)
    port = free_port()
    (tmp_path / "p1").mkdir()
    first = start_receive(
        tmp_path / "p1", tmp_path / "p1" / "cache", allow=HEAD, addresses=P1, port=port,
        expect=tmp_path / "head",
    )  # fmt: skip
    pushed = push_to_first(tmp_path / "head", port, tmp_path)
    out = first.output(120)
    assert pushed.returncode == 0 and first.proc.returncode == 0, out
    assert "passed on" not in out and "relay to" not in out
    assert not fetch_base.read_phases(out)


def test_the_relay_reads_only_plain_files_inside(tmp_path: Path) -> None:
    """A pusher names files; the relay (root) must never follow a link out of the model's
    folder: a symlinked file, a file under a symlinked directory, ``..`` and absolute paths
    are refused, a plain file inside is taken."""
    root = tmp_path / "models--org--model"
    (root / "blobs").mkdir(parents=True)
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "shadow").write_text("root:$6$...")
    (root / "blobs" / "good").write_bytes(b"w" * 10)
    (root / "blobs" / "link").symlink_to(outside / "shadow")
    (root / "dir").symlink_to(outside)
    cases = {
        "blobs/good": True,
        "blobs/link": False,
        "dir/shadow": False,
        "../secret/shadow": False,
        str(outside / "shadow"): False,
    }
    got = {path: fetch_relay._plain_file(root, path) is not None for path in cases}
    assert got == cases
    # Negative control: a naive check (the path is a file) would take the escapes.
    naive = {path: (root / path).is_file() for path in cases}
    assert naive["blobs/link"] and naive["dir/shadow"] and naive["../secret/shadow"]
