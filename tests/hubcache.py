"""Hugging Face caches for the fetch step's tests, made by the real huggingface_hub: a repo on
the loopback Hub (tests/fakehub.py), its download through the fetch step, hub 1.x's shared blob
store built by hub 1.x's own publishing code, and an offline load by either hub version.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import fakehub
import hubversions

from sparkrack.serving.scripts import fetch_step
from sparkrack.serving.switch import plan as fetchplan

SCRIPT = Path(fetch_step.__file__)
REPO = "org/model"
COMMIT = "c" * 40


def make_repo(**kw: object) -> fakehub.FakeRepo:
    rng = random.Random(24)
    files = {
        "config.json": b'{"architectures": ["FakeForCausalLM"]}\n',
        "model-00001-of-00002.safetensors": rng.randbytes(300_000),
        "model-00002-of-00002.safetensors": rng.randbytes(200_000),
        "tokenizer/tokenizer.model": rng.randbytes(5_000),
    }
    return fakehub.FakeRepo(REPO, COMMIT, files, **kw)  # type: ignore[arg-type]


def run_step(
    *argv: str,
    version: str,
    endpoint: str = "http://127.0.0.1:9",
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_TOKEN": "hf_never_printed"}
    env.pop("PYTHONPATH", None)
    env.update(hubversions.env(version))
    env.update(extra or {})
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


def download(
    cache: Path, version: str, endpoint: str, revision: str = "main"
) -> subprocess.CompletedProcess[str]:
    argv = fetchplan.download_argv(REPO, revision, str(cache), 600_000, timeout_s=60, interval_s=1)
    return run_step(*argv[2:], version=version, endpoint=endpoint)


def hub_python(version: str, code: str, *args: str) -> str:
    """Run ``code`` with huggingface_hub ``version`` (its own functions, offline)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    env.update(hubversions.env(version))
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


PUBLISH = """
import json, sys
from huggingface_hub.utils._shared_blobs import publish_blob_to_shared_store
for blob, xet, size in json.loads(sys.argv[2]):
    assert publish_blob_to_shared_store(
        blob_path=blob, xet_hash=xet, cache_dir=sys.argv[1], expected_size=size
    ), blob
"""

LOAD = """
import hashlib, json, os, sys
import huggingface_hub
from huggingface_hub import hf_hub_download, snapshot_download
cache, repo = sys.argv[1], sys.argv[2]
path = snapshot_download(repo, revision="main", cache_dir=cache)
sums = {}
for root, _, files in os.walk(path):
    for f in files:
        full = os.path.join(root, f)
        sums[os.path.relpath(full, path)] = hashlib.sha256(open(full, "rb").read()).hexdigest()
one = hf_hub_download(repo, "config.json", revision="main", cache_dir=cache)
print(json.dumps({"version": huggingface_hub.__version__, "sums": sums, "one": one}))
"""


def share_blobs(cache: Path, repo: fakehub.FakeRepo) -> None:
    """Turn the LFS blobs of a hub 1.x download into the shared store's layout, through hub
    1.x's own ``publish_blob_to_shared_store`` (what it does after a Xet download)."""
    todo = [
        [str(cache / "models--org--model/blobs" / repo.etag(p)), fakehub.xet_hash(d), len(d)]
        for p, d in repo.files.items()
        if repo.is_lfs(p)
    ]
    hub_python(hubversions.HUB_1, PUBLISH, str(cache), json.dumps(todo))


def offline_sums(cache: Path, version: str) -> dict[str, object]:
    return json.loads(hub_python(version, LOAD, str(cache), REPO))  # type: ignore[no-any-return]


def sha_of(repo: fakehub.FakeRepo) -> dict[str, str]:
    return {p: hashlib.sha256(d).hexdigest() for p, d in repo.files.items()}
