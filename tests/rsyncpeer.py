"""Receivers and pushers of the fetch step on loopback, for the tests that run the real rsync
daemon (``tests/serving/scripts/test_fetch_receiver.py``, ``test_fetch_chain.py``): a receiver
started with exactly the capabilities its pod grants, a push with the plan's own argv, a sized
snapshot marked on a cache."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hubcache import REPO

from sparkrack.serving.scripts import fetch_base, fetch_step
from sparkrack.serving.switch import plan as fetchplan
from sparkrack.serving.switch.objects import RECEIVER_SECURITY

SCRIPT = Path(fetch_step.__file__)
PASSWORD = "pw-" + os.urandom(8).hex()
FOLDER = "models--org--model"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Peer:
    cache: Path
    port: int
    proc: subprocess.Popen[str]

    def output(self, timeout: float = 60) -> str:
        out, _ = self.proc.communicate(timeout=timeout)
        return out


def confined() -> list[str]:
    """The receiver with exactly the capabilities its securityContext grants (setpriv, from
    util-linux; none when missing) and no new privileges, as the pod runs it."""
    caps = RECEIVER_SECURITY["capabilities"]["add"]
    if shutil.which("setpriv") is None:
        return []
    bounding = "-all," + ",".join(f"+{c.lower()}" for c in caps)
    return ["setpriv", f"--bounding-set={bounding}", "--no-new-privs"]


def manifest_digest(head: Path) -> str:
    """The sha256 of the manifest of REPO@main a head's cache holds (what its download reports)."""
    return hashlib.sha256(
        (head / fetch_base.manifest_relpath(REPO, "main")).read_bytes()
    ).hexdigest()


def password_file(tmp: Path) -> Path:
    """The bare password (what a pusher reads), in ``tmp``."""
    pw = tmp / "password"
    pw.write_text(PASSWORD + "\n")
    return pw


def start_receive(
    tmp: Path,
    cache: Path,
    allow: str = "127.0.0.1",
    timeout: float = 60,
    addresses: tuple[str, ...] = ("127.0.0.1",),
    port: int | None = None,
    relay_to: tuple[str, ...] = (),
    phases: Path | None = None,
    expect: str | Path | None = None,
) -> Peer:
    """``receive`` into ``cache`` from ``allow``, one daemon per address; with ``relay_to`` (the
    next receiver's addresses, rail order) a hop of a chain. ``expect``: the manifest sha256 the
    receiver verifies the push against (what the serve play writes out of band), or the head's
    cache to take it from (None: not written, a round waits for it)."""
    secrets = tmp / "rsyncd.secrets"
    secrets.write_text(f"{fetch_base.RSYNC_USER}:{PASSWORD}\n")
    expected = tmp / "manifest.sha256"
    if expect is not None:
        expected.write_text(manifest_digest(expect) if isinstance(expect, Path) else expect)
    port = port or free_port()
    argv = fetchplan.receive_argv(
        str(cache), 1_000_000, str(secrets), REPO, "main", allow, port=port,
        address=list(addresses), timeout_s=timeout, interval_s=5,
        relay_to=list(relay_to), relay_password_file=str(password_file(tmp)) if relay_to else None,
        phases=str(phases) if phases else None, manifest_sha256_file=str(expected),
    )  # fmt: skip
    proc = subprocess.Popen(
        [*confined(), sys.executable, str(SCRIPT), *argv[2:]],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    listening: set[str] = set()
    while time.monotonic() < deadline:
        for address in addresses:
            with socket.socket() as s:
                if s.connect_ex((address, port)) == 0:
                    listening.add(address)
        if listening == set(addresses):
            return Peer(cache, port, proc)
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"receive did not listen: {proc.communicate()[0]}")


def sized_snapshot(cache: Path, sizes: tuple[int, ...]) -> int:
    """A marked snapshot of REPO@main of random files of ``sizes`` bytes; returns their total."""
    commit = "c" * 40
    base = cache / FOLDER
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True)
    (base / "blobs").mkdir()
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(commit)
    files: dict[str, dict[str, object]] = {}
    for i, size in enumerate(sizes):
        data = os.urandom(size)
        digest = hashlib.sha256(data).hexdigest()
        (base / "blobs" / digest).write_bytes(data)
        name = f"model-{i:05d}.safetensors"
        (snap / name).symlink_to(f"../../blobs/{digest}")
        files[name] = {"size": size, "sha256": digest}
    manifest = cache / "manifest.json"
    manifest.write_bytes(fetch_base.manifest_bytes(REPO, "main", commit, files))
    fetch_step.mark(REPO, "main", cache, manifest)
    return sum(sizes)
