#!/usr/bin/env python3
"""The fetch step of a model switch: download once, copy over the fabric, mark, wait (STDLIB ONLY).

Shipped verbatim to pods (ConfigMap) and run there as ``python3 fetch_step.py SUBCOMMAND ...``
in an image that has python3, rsync and huggingface_hub; sparkrack itself is not installed there,
so this file imports nothing but the standard library (huggingface_hub only inside ``download``).

Subcommands (each prints progress lines, is bounded by ``--timeout``, exits 0 on success and
non-zero with one ``FAILED:`` line naming the numbers otherwise; a token is never printed):

* ``download``  on the head Spark: unless the completion marker of (repo, revision) exists,
                check free space, ``snapshot_download`` into the HF cache, write the marker;
* ``receive``   on every other Spark: check free space, serve the cache through a real
                ``rsync --daemon`` (one write-only module) until the pusher's marker arrives;
* ``push``      on the head: rsync the snapshot to every peer (in parallel), resumable, then the
                marker last;
* ``mark``      record a snapshot already present in the cache as complete (what ``download``
                does after its download);
* ``wait``      init container of a serving pod: wait for the marker;
* ``memwait``   init container of a serving pod: wait until MemAvailable covers the footprint.

The completion marker is ``<cache>/.sparkrack/models--<org>--<name>@<revision>.done``, a JSON
file with repo, revision, commit, bytes and files (:func:`marker_relpath` owns the name).

Exit status: 0 success, 1 refused or failed, 2 bad arguments, 3 timed out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

GB = 1_000_000_000
MARKER_DIR = ".sparkrack"
MARKER_SUFFIX = ".done"
RSYNC_USER = "sparkrack"
RSYNC_MODULE = "hf"
PARTIAL_DIR = ".rsync-partial"
"""Where rsync keeps the part of a file an interrupted push already sent (per directory)."""
SPACE_MARGIN_BYTES = 5 * GB
"""Free space demanded on top of the snapshot: an interrupted blob is kept as rsync's resume
basis while its complete copy is written beside it (HF shards are at most 5 GB by default)."""
DEFAULT_TIMEOUT_S = {
    "download": 4 * 3600,
    "receive": 6 * 3600,
    "push": 2 * 3600,
    "mark": 600,
    "wait": 6 * 3600,
    "memwait": 600,
}
DEFAULT_INTERVAL_S = 10.0
# rsync exit codes after which a rerun is worth it (the copy resumes): protocol start,
# socket I/O, data stream, timeouts. Code 20 (killed by a signal) is deliberate: no retry.
RSYNC_RETRY = frozenset({5, 10, 12, 30, 35})
RETRY_PAUSE_S = 3.0
TIMED_OUT = -1

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_TIMEOUT = 3

_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_REV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]*$")


class StepError(Exception):
    """A refusal or failure: the message is the one line printed after ``FAILED:``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def say(step: str, message: str) -> None:
    print(f"[fetch {step}] {redact(message)}", flush=True)


def redact(text: str) -> str:
    """``text`` with the HF token and the rsync password replaced, wherever they appear."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "RSYNC_PASSWORD"):
        secret = os.environ.get(name, "")
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def gb(n: float) -> str:
    return f"{n / GB:.2f} GB"


# --- names ----------------------------------------------------------------------------------


def check_repo(repo: str) -> str:
    if not _REPO_RE.match(repo):
        raise StepError(f"--repo {repo!r} is not a Hugging Face repo id like org/name")
    return repo


def check_revision(revision: str) -> str:
    if not _REV_RE.match(revision):
        raise StepError(
            f"--revision {revision!r} is not a commit hash or a branch/tag name without '/'"
        )
    return revision


def repo_folder(repo: str) -> str:
    """The HF cache folder of a model repo: ``org/name`` -> ``models--org--name``."""
    return "models--" + check_repo(repo).replace("/", "--")


def marker_relpath(repo: str, revision: str) -> str:
    """The completion marker of (repo, revision), relative to the HF cache directory."""
    return f"{MARKER_DIR}/{repo_folder(repo)}@{check_revision(revision)}{MARKER_SUFFIX}"


def marker_path(cache: str | os.PathLike[str], repo: str, revision: str) -> Path:
    return Path(cache) / marker_relpath(repo, revision)


# --- snapshot -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """A snapshot in an HF cache: its commit and the paths (relative to the cache) it consists of."""

    repo: str
    revision: str
    commit: str
    paths: tuple[str, ...]
    files: int
    bytes: int


def find_snapshot(cache: Path, repo: str, revision: str) -> Snapshot:
    """The files of (repo, revision): the snapshot's entries, the blobs they link, the refs naming it."""
    base = cache / repo_folder(repo)
    commit = revision
    ref = base / "refs" / revision
    if not (base / "snapshots" / revision).is_dir() and ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
    snap = base / "snapshots" / commit
    if not snap.is_dir():
        raise StepError(f"no snapshot of {repo}@{revision} in {cache} ({snap} missing)")
    paths: list[str] = []
    blobs: dict[str, int] = {}
    files = 0
    root = base.resolve()
    for dirpath, dirnames, filenames in os.walk(snap):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if Path(dirpath, d).is_symlink()]:
            entry = Path(dirpath, name)
            paths.append(str(entry.relative_to(cache)))
            files += 1
            if entry.is_symlink():
                target = entry.resolve()
                if not target.is_file() or root not in target.parents:
                    raise StepError(
                        f"snapshot entry {entry} points to {target}, which is missing or outside "
                        f"{base}: the snapshot is incomplete (download it again)"
                    )
                blobs[str(target.relative_to(cache.resolve()))] = target.stat().st_size
            else:
                blobs[str(entry.relative_to(cache))] = entry.stat().st_size
    if files == 0:
        raise StepError(f"snapshot {snap} is empty")
    extra = [b for b in blobs if b not in paths]
    # Every ref (main, a tag, refs/pr/N) that names this commit goes along, so an offline load
    # by that name resolves on the peer as it does here.
    for path in sorted((base / "refs").rglob("*")):
        if path.is_file() and path.read_text(encoding="utf-8").strip() == commit:
            extra.append(str(path.relative_to(cache)))
    return Snapshot(repo, revision, commit, tuple(extra + paths), files, sum(blobs.values()))


def write_marker(cache: Path, snap: Snapshot) -> Path:
    path = marker_path(cache, snap.repo, snap.revision)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "repo": snap.repo,
        "revision": snap.revision,
        "commit": snap.commit,
        "bytes": snap.bytes,
        "files": snap.files,
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_marker(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- free space -----------------------------------------------------------------------------


def free_bytes(path: Path) -> tuple[Path, int]:
    """Free bytes for an unprivileged writer on the filesystem of ``path`` (or its nearest parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    return probe, st.f_bavail * st.f_frsize


def check_space(cache: Path, need: int, step: str) -> None:
    """Refuse, before anything is written, unless ``need`` + the margin fits on ``cache``."""
    probe, free = free_bytes(cache)
    want = need + SPACE_MARGIN_BYTES
    if free < want:
        raise StepError(
            f"need {gb(want)} ({gb(need)} snapshot + {gb(SPACE_MARGIN_BYTES)} margin), "
            f"free {gb(free)} on {cache} (filesystem of {probe}): nothing was written"
        )
    say(step, f"free space ok: need {gb(want)}, free {gb(free)} on {cache}")


def tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            total += st.st_blocks * 512 if st.st_blocks else st.st_size
    return total


# --- download -------------------------------------------------------------------------------


def download(
    repo: str, revision: str, cache: Path, need: int, timeout: float, interval: float
) -> None:
    marker = marker_path(cache, repo, revision)
    done = read_marker(marker)
    if done is not None:
        try:
            cached = find_snapshot(cache, repo, revision)
        except StepError as problem:
            say("download", f"{marker} exists but {problem}: downloading again")
        else:
            if cached.bytes == done.get("bytes"):
                say(
                    "download",
                    f"cached: {marker} records {cached.files} files, {gb(cached.bytes)}"
                    " - no download",
                )
                return
            say("download", f"{marker} records {done.get('bytes')} bytes, cache has {cached.bytes}")
    check_space(cache, need, "download")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from huggingface_hub import snapshot_download  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise StepError(f"huggingface_hub is not importable in this image ({exc})") from None
    cache.mkdir(parents=True, exist_ok=True)
    outcome: dict[str, object] = {}

    def fetch() -> None:
        try:
            outcome["path"] = snapshot_download(repo, revision=revision, cache_dir=str(cache))
        except BaseException as exc:  # reported by the main thread
            outcome["error"] = exc

    say("download", f"downloading {repo}@{revision} into {cache} (expect {gb(need)})")
    start = time.monotonic()
    worker = threading.Thread(target=fetch, name="snapshot_download", daemon=True)
    worker.start()
    repo_dir = cache / repo_folder(repo)
    while worker.is_alive():
        worker.join(min(interval, max(0.0, start + timeout - time.monotonic())))
        elapsed = time.monotonic() - start
        if worker.is_alive() and elapsed >= timeout:
            raise StepError(
                f"download of {repo}@{revision} not done after {timeout:.0f} s "
                f"({gb(tree_bytes(repo_dir))} of {gb(need)} on disk)",
                EXIT_TIMEOUT,
            )
        if worker.is_alive():
            have = tree_bytes(repo_dir)
            pct = 100 * have / need if need else 0.0
            say("download", f"{gb(have)} of {gb(need)} ({pct:.0f} %) after {elapsed:.0f} s")
    if "error" in outcome:
        error = outcome["error"]
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise StepError(f"snapshot_download failed: {type(error).__name__}: {first}")
    snap = find_snapshot(cache, repo, revision)
    path = write_marker(cache, snap)
    say(
        "download",
        f"done in {time.monotonic() - start:.0f} s: {snap.files} files, {gb(snap.bytes)} "
        f"(commit {snap.commit}); marker {path}",
    )


def mark(repo: str, revision: str, cache: Path) -> None:
    snap = find_snapshot(cache, repo, revision)
    path = write_marker(cache, snap)
    say("mark", f"{repo}@{revision}: {snap.files} files, {gb(snap.bytes)}; marker {path}")


# --- receive --------------------------------------------------------------------------------


def _marker_states(cache: Path) -> dict[str, tuple[int, int]]:
    states: dict[str, tuple[int, int]] = {}
    folder = cache / MARKER_DIR
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.name.endswith(MARKER_SUFFIX):
                st = entry.stat()
                states[entry.name] = (st.st_ino, st.st_ctime_ns)
    return states


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def rsyncd_config(cache: Path, secrets: Path, log: Path) -> str:
    """rsyncd.conf: one write-only module ``hf`` rooted at the cache, password-protected."""
    return "\n".join(
        [
            "use chroot = no",
            # Incoming symlinks are the snapshot's relative links into blobs/; stored as sent.
            "munge symlinks = no",
            "max connections = 8",
            f"log file = {log}",
            # One "recv <path> <length>" line per file, in the order files complete.
            "transfer logging = yes",
            "log format = %o %n %l",
            "timeout = 600",
            f"[{RSYNC_MODULE}]",
            f"path = {cache}",
            "read only = no",
            "write only = yes",
            "list = no",
            f"uid = {os.getuid()}",
            f"gid = {os.getgid()}",
            f"auth users = {RSYNC_USER}",
            f"secrets file = {secrets}",
            "strict modes = yes",
            "refuse options = delete delete-before delete-during delete-after delete-excluded",
            "",
        ]
    )


def receive(
    cache: Path,
    need: int,
    port: int,
    secrets_file: Path,
    address: str | None,
    expect: tuple[str, str] | None,
    timeout: float,
    interval: float,
) -> None:
    try:
        lines = secrets_file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise StepError(f"cannot read --secrets-file {secrets_file}: {exc.strerror}") from None
    if not any(ln.startswith(f"{RSYNC_USER}:") and len(ln) > len(RSYNC_USER) + 1 for ln in lines):
        raise StepError(f"--secrets-file {secrets_file} has no '{RSYNC_USER}:<password>' line")
    if shutil.which("rsync") is None:
        raise StepError("rsync is not installed in this image")
    expected = marker_relpath(*expect) if expect else None
    if expected and read_marker(cache / expected) is not None:
        say("receive", f"{expected} already present: only the marker will be rewritten")
    else:
        check_space(cache, need, "receive")
    cache.mkdir(parents=True, exist_ok=True)
    before = _marker_states(cache)
    with tempfile.TemporaryDirectory(prefix="sparkrack-rsyncd-") as tmp:
        secrets = Path(tmp, "rsyncd.secrets")
        fd = os.open(secrets, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        log = Path(tmp, "rsyncd.log")
        conf = Path(tmp, "rsyncd.conf")
        conf.write_text(rsyncd_config(cache, secrets, log), encoding="utf-8")
        cmd = ["rsync", "--daemon", "--no-detach", f"--config={conf}", f"--port={port}"]
        if address:
            cmd.append(f"--address={address}")
        say("receive", f"rsync daemon on {address or '*'}:{port} module {RSYNC_MODULE} -> {cache}")
        start = time.monotonic()
        daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        try:
            arrived = _serve(cache, daemon, before, expected, log, start, timeout, interval)
        finally:
            _stop(daemon)
    say(
        "receive",
        f"marker {arrived} arrived after {time.monotonic() - start:.0f} s; daemon stopped",
    )
    data = read_marker(cache / arrived)
    if data is None:
        raise StepError(f"{cache / arrived} is not a JSON marker")
    snap = find_snapshot(cache, str(data.get("repo")), str(data.get("revision")))
    if (snap.files, snap.bytes) != (data.get("files"), data.get("bytes")):
        raise StepError(
            f"{arrived} records {data.get('files')} files, {data.get('bytes')} bytes; the cache "
            f"holds {snap.files} files, {snap.bytes} bytes"
        )
    say("receive", f"verified: {snap.files} files, {snap.bytes} bytes as the marker records")


class _LogTail:
    """Echo the daemon's log lines (one per file received) as they are written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.last = ""

    def echo(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        for line in data[:cut].decode(errors="replace").splitlines():
            if line.strip():
                self.last = line.strip()
                say("receive", f"rsyncd: {self.last}")


def _serve(
    cache: Path,
    daemon: subprocess.Popen[bytes],
    before: dict[str, tuple[int, int]],
    expected: str | None,
    log: Path,
    start: float,
    timeout: float,
    interval: float,
) -> str:
    last = start
    tail = _LogTail(log)
    while True:
        tail.echo()
        now = time.monotonic()
        if daemon.poll() is not None:
            tail.echo()
            raise StepError(
                f"rsync daemon exited with code {daemon.returncode} after {now - start:.0f} s"
                + (f": {tail.last}" if tail.last else "")
            )
        for name, state in _marker_states(cache).items():
            if before.get(name) == state:
                continue
            rel = f"{MARKER_DIR}/{name}"
            if expected is None or rel == expected:
                _drain(daemon, 60.0)
                tail.echo()
                return rel
        if now - start >= timeout:
            raise StepError(
                f"no marker pushed after {timeout:.0f} s ({gb(tree_bytes(cache))} in {cache})",
                EXIT_TIMEOUT,
            )
        if now - last >= interval:
            last = now
            say("receive", f"{gb(tree_bytes(cache))} in {cache} after {now - start:.0f} s")
        time.sleep(0.5)


def _drain(daemon: subprocess.Popen[bytes], limit: float) -> None:
    """Let the connection that wrote the marker finish its exchange before the daemon stops."""
    deadline = time.monotonic() + limit
    while _children(daemon.pid) and time.monotonic() < deadline:
        time.sleep(0.2)


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    if daemon.poll() is None:
        daemon.terminate()
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


# --- push -----------------------------------------------------------------------------------

RSYNC_COPY_OPTIONS = (
    # Symlinks stay symlinks (snapshots/<rev>/* -> ../../blobs/<hash>), mtimes make a rerun's
    # quick check skip finished files.
    "--links",
    "--times",
    # An interrupted file is kept in .rsync-partial/ (never under its final name, so a reader
    # of the cache sees a blob complete or absent); the rerun uses it as the delta basis and
    # sends only what is missing, then verifies the whole-file checksum.
    f"--partial-dir={PARTIAL_DIR}",
    "--timeout=300",
    "--contimeout=20",
    "--no-inc-recursive",
    "--info=progress2",
    "--stats",
)
_PROGRESS_RE = re.compile(r"^\s*([\d,]+)\s+(\d+)%\s+(\S+/s)")
_STAT_RE = re.compile(r"^(Total file size|Literal data|Matched data|Total bytes sent):\s+([\d,]+)")


@dataclass
class PushResult:
    host: str
    seconds: float = 0.0
    stats: dict[str, int] | None = None
    error: StepError | None = None


def _rsync(
    cmd: list[str], env: dict[str, str], label: str, interval: float, timeout: float
) -> tuple[int, dict[str, int], str]:
    """Run one rsync client; print throttled progress; return (code, --stats numbers, last error)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env
    )
    errors: list[str] = []

    def drain_stderr() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            errors.append(raw.decode(errors="replace").strip())

    reader = threading.Thread(target=drain_stderr, daemon=True)
    reader.start()
    stats: dict[str, int] = {}
    last = time.monotonic()
    start = last
    assert proc.stdout is not None
    buf = b""
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(timeout, expire)
    timer.start()
    try:
        while True:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            parts = re.split(rb"[\r\n]", buf)
            buf = parts.pop()
            for raw in parts:
                line = raw.decode(errors="replace")
                progress = _PROGRESS_RE.match(line)
                if progress and time.monotonic() - last >= interval:
                    last = time.monotonic()
                    sent = int(progress.group(1).replace(",", ""))
                    say(
                        "push",
                        f"{label}: {gb(sent)} ({progress.group(2)} %) at {progress.group(3)} "
                        f"after {last - start:.0f} s",
                    )
                stat = _STAT_RE.match(line.strip())
                if stat:
                    stats[stat.group(1)] = int(stat.group(2).replace(",", ""))
                    say("push", f"{label}: {line.strip()}")
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    message = next((e for e in reversed(errors) if e), "")
    if expired.is_set():
        return TIMED_OUT, stats, f"stopped after {timeout:.0f} s"
    return proc.returncode, stats, message


def _push_one(
    host: str,
    cache: Path,
    port: int,
    lists: tuple[Path, Path],
    env: dict[str, str],
    bwlimit: int | None,
    deadline: float,
    interval: float,
) -> PushResult:
    result = PushResult(host)
    start = time.monotonic()
    dest = f"rsync://{RSYNC_USER}@{_bracket(host)}:{port}/{RSYNC_MODULE}/"
    base = ["rsync", *RSYNC_COPY_OPTIONS]
    if bwlimit:
        base.append(f"--bwlimit={bwlimit}")
    # The snapshot first; the marker last, always rewritten (-I), so the receiver sees it arrive.
    for what, extra, listing in (("snapshot", [], lists[0]), ("marker", ["-I"], lists[1])):
        cmd = [*base, *extra, f"--files-from={listing}", f"{cache}/", dest]
        attempt = 0
        while True:
            attempt += 1
            left = deadline - time.monotonic()
            if left <= 0:
                result.error = StepError(
                    f"{host}: {what} not pushed within the timeout ({attempt - 1} attempts)",
                    EXIT_TIMEOUT,
                )
                return result
            code, stats, message = _rsync(cmd, env, f"{host} {what}", interval, left)
            if code == 0:
                if what == "snapshot":
                    result.stats = stats
                break
            if code in RSYNC_RETRY and deadline - time.monotonic() > RETRY_PAUSE_S:
                say("push", f"{host}: rsync exit {code} ({message}); retrying (resumes)")
                time.sleep(RETRY_PAUSE_S)
                continue
            if code == TIMED_OUT:
                result.error = StepError(f"{host}: {what} push {message}", EXIT_TIMEOUT)
                return result
            result.error = StepError(f"{host}: rsync of the {what} exited {code}: {message}")
            return result
    result.seconds = time.monotonic() - start
    return result


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def push(
    cache: Path,
    repo: str,
    revision: str,
    hosts: Sequence[str],
    port: int,
    password_file: Path,
    bwlimit: int | None,
    timeout: float,
    interval: float,
) -> None:
    for host in hosts:
        if not _HOST_RE.match(host):
            raise StepError(f"--to {host!r} is not a host name or address")
    marker = marker_relpath(repo, revision)
    if read_marker(cache / marker) is None:
        raise StepError(
            f"{cache / marker} missing: the snapshot is not complete here (download first)"
        )
    try:
        password = password_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise StepError(f"cannot read --password-file {password_file}: {exc.strerror}") from None
    if not password:
        raise StepError(f"--password-file {password_file} is empty")
    snap = find_snapshot(cache, repo, revision)
    if shutil.which("rsync") is None:
        raise StepError("rsync is not installed in this image")
    env = {**os.environ, "RSYNC_PASSWORD": password, "LC_ALL": "C"}
    os.environ["RSYNC_PASSWORD"] = password  # only so that redact() knows it
    say(
        "push",
        f"{repo}@{revision}: {snap.files} files, {gb(snap.bytes)} to {', '.join(hosts)} "
        f"port {port}, in parallel",
    )
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="sparkrack-push-") as tmp:
        files = Path(tmp, "snapshot.list")
        files.write_text("\n".join(snap.paths) + "\n", encoding="utf-8")
        marks = Path(tmp, "marker.list")
        marks.write_text(marker + "\n", encoding="utf-8")
        results: list[PushResult] = []
        threads = []
        for host in hosts:

            def work(h: str = host) -> None:
                results.append(
                    _push_one(h, cache, port, (files, marks), env, bwlimit, deadline, interval)
                )

            thread = threading.Thread(target=work, name=f"push-{host}")
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
    failed = [r for r in results if r.error is not None]
    for r in results:
        if r.error is None and r.stats is not None:
            say(
                "push",
                f"{r.host}: done in {r.seconds:.1f} s; literal {r.stats.get('Literal data', 0)} "
                f"bytes, matched {r.stats.get('Matched data', 0)} bytes of "
                f"{r.stats.get('Total file size', 0)} bytes",
            )
    if failed:
        code = EXIT_TIMEOUT if all(r.error and r.error.code == EXIT_TIMEOUT for r in failed) else 1
        raise StepError("; ".join(str(r.error) for r in failed), code)


# --- waits ----------------------------------------------------------------------------------


def poll(
    step: str,
    check: Callable[[], tuple[bool, str]],
    timeout: float,
    interval: float,
    sleep: float = 1.0,
) -> str:
    """Call ``check`` until it says done; print its status every ``interval`` s; bounded."""
    start = time.monotonic()
    last = start - interval
    while True:
        done, status = check()
        now = time.monotonic()
        if done:
            return status
        if now - start >= timeout:
            raise StepError(f"{status} after {timeout:.0f} s", EXIT_TIMEOUT)
        if now - last >= interval:
            last = now
            say(step, f"{status} ({now - start:.0f} s of {timeout:.0f} s)")
        time.sleep(min(sleep, interval))


def wait(cache: Path, repo: str, revision: str, timeout: float, interval: float) -> None:
    marker = marker_path(cache, repo, revision)

    def check() -> tuple[bool, str]:
        data = read_marker(marker)
        if data is None:
            return False, f"waiting for {marker}"
        if data.get("revision") != revision or data.get("repo") != repo:
            return False, f"{marker} names {data.get('repo')}@{data.get('revision')}"
        return True, f"{marker}: {data.get('files')} files, {gb(float(str(data.get('bytes', 0))))}"

    say("wait", poll("wait", check, timeout, interval))


def mem_available(meminfo: Path) -> int:
    """MemAvailable in bytes from a /proc/meminfo-format file."""
    for line in meminfo.read_text(encoding="utf-8").splitlines():
        if line.startswith("MemAvailable:"):
            value, *unit = line.split()[1:]
            return int(value) * (1024 if unit == ["kB"] else 1)
    raise StepError(f"{meminfo} has no MemAvailable line")


def memwait(need_gb: float, meminfo: Path, timeout: float, interval: float) -> None:
    def check() -> tuple[bool, str]:
        have = mem_available(meminfo)
        verb = ">=" if have >= need_gb * GB else "<"
        return have >= need_gb * GB, f"MemAvailable {have / GB:.1f} GB {verb} need {need_gb:g} GB"

    say("memwait", poll("memwait", check, timeout, interval))


# --- command line ---------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fetch_step.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)

    def common(p: argparse.ArgumentParser, step: str) -> None:
        p.add_argument(
            "--timeout",
            type=_positive_float,
            default=float(DEFAULT_TIMEOUT_S[step]),
            help=f"seconds before giving up (default {DEFAULT_TIMEOUT_S[step]})",
        )
        p.add_argument(
            "--interval",
            type=_positive_float,
            default=DEFAULT_INTERVAL_S,
            help="seconds between progress lines",
        )

    p = sub.add_parser("download", help="download (repo, revision) once into the cache")
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--need-bytes", required=True, type=_positive_int)
    common(p, "download")

    p = sub.add_parser("receive", help="serve the cache to the pusher until its marker arrives")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--need-bytes", required=True, type=_positive_int)
    p.add_argument("--port", type=_port, required=True)
    p.add_argument("--secrets-file", required=True, type=Path, help="lines user:password")
    p.add_argument("--address", help="bind the daemon to this address only (the fabric PF)")
    p.add_argument("--repo", help="with --revision: wait for this marker only")
    p.add_argument("--revision")
    common(p, "receive")

    p = sub.add_parser("push", help="copy the snapshot to the peers, marker last")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--to", required=True, help="HOST[,HOST...] (fabric addresses)")
    p.add_argument("--port", type=_port, required=True)
    p.add_argument("--password-file", required=True, type=Path)
    p.add_argument("--bwlimit", type=_positive_int, help="KiB/s per peer (rsync --bwlimit)")
    common(p, "push")

    p = sub.add_parser("mark", help="record a snapshot already in the cache as complete")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    common(p, "mark")

    p = sub.add_parser("wait", help="wait for the completion marker")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    common(p, "wait")

    p = sub.add_parser("memwait", help="wait until MemAvailable covers the footprint")
    p.add_argument("--need-gb", required=True, type=_positive_float)
    p.add_argument("--meminfo", type=Path, default=Path("/proc/meminfo"))
    common(p, "memwait")
    return parser


def run(args: argparse.Namespace) -> None:
    step = args.step
    if step == "download":
        download(
            check_repo(args.repo),
            check_revision(args.revision),
            args.cache,
            args.need_bytes,
            args.timeout,
            args.interval,
        )
    elif step == "receive":
        if (args.repo is None) != (args.revision is None):
            raise StepError("receive: give --repo and --revision together, or neither")
        expect = (check_repo(args.repo), check_revision(args.revision)) if args.repo else None
        receive(
            args.cache,
            args.need_bytes,
            args.port,
            args.secrets_file,
            args.address,
            expect,
            args.timeout,
            args.interval,
        )
    elif step == "push":
        hosts = [h.strip() for h in args.to.split(",") if h.strip()]
        if not hosts:
            raise StepError("--to names no host")
        push(
            args.cache,
            check_repo(args.repo),
            check_revision(args.revision),
            hosts,
            args.port,
            args.password_file,
            args.bwlimit,
            args.timeout,
            args.interval,
        )
    elif step == "mark":
        mark(check_repo(args.repo), check_revision(args.revision), args.cache)
    elif step == "wait":
        wait(
            args.cache,
            check_repo(args.repo),
            check_revision(args.revision),
            args.timeout,
            args.interval,
        )
    elif step == "memwait":
        memwait(args.need_gb, args.meminfo, args.timeout, args.interval)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except StepError as exc:
        print(f"[fetch {args.step}] FAILED: {redact(str(exc))}", file=sys.stderr, flush=True)
        return exc.code
    except KeyboardInterrupt:
        print(f"[fetch {args.step}] FAILED: interrupted", file=sys.stderr, flush=True)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
