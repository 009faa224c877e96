"""The fetch step with the real huggingface_hub, 0.36 and 1.x, against a Hub on loopback
(tests/fakehub.py): the download through the library's own code, the manifest from the Hub's
metadata, verification after the download (a bad file fetched again, alone), the hub 1.x shared
blob store (built by hub 1.x's own publishing code), the lock per (repo, revision), free space
for the missing bytes only, and the marker that ``wait`` accepts only with its manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import fakehub
import hubversions
import pytest
from hubcache import COMMIT, REPO, download, make_repo, offline_sums, run_step, sha_of, share_blobs

from sparkrack.serving.scripts import fetch_base, fetch_step
from sparkrack.serving.switch import plan as fetchplan

pytestmark = pytest.mark.tools  # huggingface_hub releases from PyPI


@pytest.fixture(params=hubversions.VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def hub() -> Iterator[tuple[fakehub.FakeRepo, str]]:
    repo = make_repo()
    with fakehub.serve(repo) as url:
        yield repo, url


def test_download_writes_manifest_and_marker_and_loads_offline(
    tmp_path: Path, version: str, hub: tuple[fakehub.FakeRepo, str]
) -> None:

    repo, url = hub
    done = download(tmp_path, version, url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verify (round 1): 4 files" in done.stdout and "0 bad" in done.stdout
    manifest = (tmp_path / fetch_base.manifest_relpath(REPO, "main")).read_bytes()
    doc = json.loads(manifest)
    assert doc["commit"] == COMMIT and doc["files"] == repo.manifest_files()
    marker = json.loads(fetch_base.marker_path(tmp_path, REPO, "main").read_text())
    assert marker["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    assert fetch_base.check_marker(tmp_path, REPO, "main")[0]
    loaded = offline_sums(tmp_path, version)
    assert loaded["version"] == version and loaded["sums"] == sha_of(repo)
    # The phase records: the download and the verification, each with the bytes it moved.
    total = sum(int(str(e["size"])) for e in repo.manifest_files().values())
    records = fetch_base.read_phases(done.stdout)
    assert [(r["phase"], r["bytes"]) for r in records] == [("download", total), ("verify", total)]
    assert all(isinstance(r["seconds"], float) for r in records)
    again = download(tmp_path, version, url)
    assert again.returncode == 0 and "no download" in again.stdout
    assert [(r["phase"], r["bytes"]) for r in fetch_base.read_phases(again.stdout)] == [
        ("download", 0)
    ]
    for text in (done.stdout, done.stderr):
        assert "hf_never_printed" not in text


def test_a_corrupted_download_is_found_and_only_that_file_fetched_again(
    tmp_path: Path, version: str
) -> None:
    repo = make_repo(corrupt={"model-00002-of-00002.safetensors": 1})
    with fakehub.serve(repo) as url:
        done = download(tmp_path, version, url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bad: model-00002-of-00002.safetensors: sha256" in done.stdout
    assert "verify (round 2): 1 files" in done.stdout
    assert repo.gets["model-00002-of-00002.safetensors"] == 2
    assert all(n == 1 for p, n in repo.gets.items() if p != "model-00002-of-00002.safetensors")
    assert offline_sums(tmp_path, version)["sums"] == sha_of(repo)


def test_a_file_the_hub_keeps_serving_wrong_fails_the_step_without_a_marker(tmp_path: Path) -> None:
    repo = make_repo(corrupt={"config.json": 10})  # every GET of the step returns a wrong byte
    with fakehub.serve(repo) as url:
        failed = download(tmp_path, hubversions.HUB_0, url)
    assert failed.returncode == 1
    assert "files still wrong after 3 downloads: config.json: git_sha1" in failed.stderr
    assert not fetch_base.marker_path(tmp_path, REPO, "main").exists()


def test_hub1_shared_blob_snapshot_is_found_verified_and_loads(
    tmp_path: Path, hub: tuple[fakehub.FakeRepo, str]
) -> None:
    repo, url = hub
    assert download(tmp_path, hubversions.HUB_1, url).returncode == 0
    share_blobs(tmp_path, repo)
    # The layout hub 1.x made: the store marker, <xx>/<hash> files, repo blobs that are links.
    store = tmp_path / "blobs"
    assert (store / ".huggingface-shared-blobs").read_text() == "1\n"
    lfs = [p for p in repo.files if repo.is_lfs(p)]
    for path in lfs:
        xet = fakehub.xet_hash(repo.files[path])
        assert (store / xet[:2] / xet).is_file()
        link = tmp_path / "models--org--model/blobs" / repo.etag(path)
        assert link.is_symlink() and os.readlink(link) == f"../../blobs/{xet[:2]}/{xet}"
    snap = fetch_base.find_snapshot(tmp_path, REPO, "main")
    assert {p for p in snap.shared_paths if p != ".huggingface-shared-blobs"} == {
        f"{fakehub.xet_hash(repo.files[p])[:2]}/{fakehub.xet_hash(repo.files[p])}" for p in lfs
    }
    assert ".huggingface-shared-blobs" in snap.shared_paths
    assert {f"blobs/{repo.etag(p)}" for p in lfs} <= set(snap.model_paths)
    assert snap.bytes == sum(len(d) for d in repo.files.values())
    files = json.loads((tmp_path / fetch_base.manifest_relpath(REPO, "main")).read_bytes())["files"]
    assert fetch_base.verify(tmp_path, snap, files) == {}
    assert fetch_base.check_marker(tmp_path, REPO, "main")[0]
    assert offline_sums(tmp_path, hubversions.HUB_1)["sums"] == sha_of(repo)
    # A corrupted shared blob is found by the verification (and the marker check is size-only).
    victim = lfs[0]
    xet = fakehub.xet_hash(repo.files[victim])
    blob = store / xet[:2] / xet
    blob.chmod(0o600)
    data = bytearray(blob.read_bytes())
    data[1000] ^= 1
    blob.write_bytes(bytes(data))
    assert set(fetch_base.verify(tmp_path, snap, files)) == {victim}
    # A snapshot link leaving both the model's folder and the store is still refused.
    (tmp_path / "elsewhere").write_bytes(b"x")
    evil = tmp_path / "models--org--model/snapshots" / COMMIT / "evil"
    evil.symlink_to("../../../elsewhere")
    with pytest.raises(fetch_base.StepError, match="outside"):
        fetch_base.find_snapshot(tmp_path, REPO, "main")


def test_the_download_of_hub1_after_sharing_is_cached(
    tmp_path: Path, hub: tuple[fakehub.FakeRepo, str]
) -> None:
    repo, url = hub
    assert download(tmp_path, hubversions.HUB_1, url).returncode == 0
    share_blobs(tmp_path, repo)
    again = download(tmp_path, hubversions.HUB_1, url)
    assert again.returncode == 0 and "no download" in again.stdout


def test_two_downloads_at_once_fetch_once(
    tmp_path: Path, hub: tuple[fakehub.FakeRepo, str]
) -> None:
    repo, url = hub
    results: list[subprocess.CompletedProcess[str]] = []
    threads = [
        threading.Thread(target=lambda: results.append(download(tmp_path, hubversions.HUB_0, url)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    outs = " ".join(r.stdout for r in results)
    assert "downloaded by another deployment meanwhile" in outs or outs.count("no download") == 1
    assert set(repo.gets.values()) == {1}  # every file once


def test_free_space_counts_missing_bytes_only(
    tmp_path: Path, hub: tuple[fakehub.FakeRepo, str]
) -> None:
    repo, url = hub
    assert download(tmp_path, hubversions.HUB_0, url).returncode == 0
    # Forget one shard and the marker: the next download needs that shard's bytes only.
    snap = fetch_base.find_snapshot(tmp_path, REPO, "main")
    fetch_step.forget(tmp_path, snap, {"model-00001-of-00002.safetensors"})
    fetch_base.marker_path(tmp_path, REPO, "main").unlink()
    redo = download(tmp_path, hubversions.HUB_0, url)
    assert redo.returncode == 0, redo.stderr
    total = sum(len(d) for d in repo.files.values())
    here = total - len(repo.files["model-00001-of-00002.safetensors"])
    assert f"({here / 1e9:.2f} GB already here)" in redo.stdout
    # The margin: room for the largest file once more (a resume basis beside its new copy).
    largest = max(len(d) for d in repo.files.values())
    need = len(repo.files["model-00001-of-00002.safetensors"]) + largest
    assert f"free space ok: need {need / 1e9:.2f} GB" in redo.stdout
    assert repo.gets["model-00001-of-00002.safetensors"] == 2 and repo.gets["config.json"] == 1


def test_wait_refuses_forged_markers(tmp_path: Path, hub: tuple[fakehub.FakeRepo, str]) -> None:
    repo, url = hub
    assert download(tmp_path, hubversions.HUB_0, url).returncode == 0
    wait = fetchplan.wait_argv(str(tmp_path), REPO, "main", timeout_s=1, interval_s=0.5)[2:]
    assert run_step(*wait, version=hubversions.HUB_0).returncode == 0  # the real one passes
    marker = fetch_base.marker_path(tmp_path, REPO, "main")
    manifest = tmp_path / fetch_base.manifest_relpath(REPO, "main")
    real_marker, real_manifest = marker.read_bytes(), manifest.read_bytes()
    forged = json.loads(real_marker)
    forgeries = {
        "old-style marker, sizes only": {k: v for k, v in forged.items() if k != "manifest_sha256"},
        "another manifest's hash": {**forged, "manifest_sha256": "0" * 64},
    }
    for why, doc in forgeries.items():
        marker.write_text(json.dumps(doc))
        refused = run_step(*wait, version=hubversions.HUB_0)
        assert refused.returncode == fetch_base.EXIT_TIMEOUT, why
        assert "refused: it does not name the sha256" in refused.stderr, why
    marker.write_bytes(real_marker)
    # A manifest rewritten to match a shrunken file, with a marker that names it: the sizes of
    # the snapshot must still match (a truncated shard), else refused.
    shard = tmp_path / "models--org--model/snapshots" / COMMIT / "model-00002-of-00002.safetensors"
    shard.resolve().write_bytes(shard.resolve().read_bytes()[:-1])
    refused = run_step(*wait, version=hubversions.HUB_0)
    assert refused.returncode == fetch_base.EXIT_TIMEOUT
    assert (
        "model-00002-of-00002.safetensors has 199999 bytes, the manifest 200000" in refused.stderr
    )
    manifest.unlink()
    gone = run_step(*wait, version=hubversions.HUB_0)
    assert "its manifest" in gone.stderr and "is missing" in gone.stderr
    manifest.write_bytes(real_manifest)
