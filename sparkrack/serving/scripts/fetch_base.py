"""What every step of the fetch step shares (STDLIB ONLY): its names, the HF cache's snapshots
and the completion marker, free space, bounded waits, and the errors and lines it prints.

Shipped verbatim beside ``fetch_step.py`` (the entry point) and the other ``fetch_*.py`` in the
switch ConfigMap. The completion marker is ``<cache>/.sparkrack/models--<org>--<name>@<revision>.done``,
a JSON file with repo, revision, commit, bytes, files and the sha256 of the manifest beside it
(``….manifest.json``: per file its size and the Hub's hash); :func:`marker_relpath` and
:func:`manifest_relpath` own the names, :func:`check_marker` what a valid marker is.

Phase records: each step records the phases it ran (:func:`phase`: wall seconds, bytes, peer
and rail of a copy) as ``sparkrack-phase {json}`` log lines and, with ``--phases FILE`` (the
container's termination message file), in that file, where the serve play reads them through the
API; :func:`read_phases` is the one parser of that format.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

if __package__:  # imported as sparkrack.serving.scripts.* (the renderer and the tests)
    from . import memsettle as settle
else:  # run in a pod: the switch ConfigMap's files sit side by side
    import memsettle as settle  # type: ignore[import-not-found, no-redef]

PROC_MEMINFO = settle.PROC_MEMINFO
PROC_VM = settle.PROC_VM
GB = 1_000_000_000
MARKER_DIR = ".sparkrack"
MARKER_SUFFIX = ".done"
RSYNC_USER = "sparkrack"
RSYNC_MODULE = "hf"
PARTIAL_DIR = ".rsync-partial"
"""Where rsync keeps the part of a file an interrupted push already sent (per directory)."""
SPACE_MARGIN_BYTES = 5 * GB
"""The most free space demanded on top of the missing bytes (:func:`space_margin`): an
interrupted blob is kept as the resume basis while its complete copy is written beside it (HF
shards are at most 5 GB by default)."""
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
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]*$")


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


# --- phase records --------------------------------------------------------------------------

PHASE_TAG = "sparkrack-phase"
"""Opens every phase record line: ``sparkrack-phase {"phase": ..., "seconds": ..., ...}``."""
PHASES = ("download", "verify", "copy", "peer-verify", "wait-weights", "wait-memory")
"""The phases the fetch step measures in a pod (the serve play's timeline reads them)."""
PHASE_MESSAGE_MAX = 4096
"""Kubernetes keeps at most this many bytes of a container's termination message."""
MANIFEST_TAG = "sparkrack-manifest"
"""Opens the line by which the head's ``download`` reports the sha256 of the manifest it
computed from the Hub's metadata: ``sparkrack-manifest <64 hex>``. The serve play reads it from
that container's termination message and hands it to the receivers (never through the pusher)."""
_recorded: list[dict[str, object]] = []
_reported: list[str] = []


def phase(
    name: str,
    seconds: float,
    nbytes: int | None = None,
    peer: str = "",
    rail: int | None = None,
    via: str = "",
    memfree: list[int] | None = None,
) -> dict[str, object]:
    """Record one phase this process ran (wall ``seconds``, ``nbytes`` moved or checked; the
    ``peer`` and ``rail`` of a copy, ``via`` the Spark that relayed it in a chain) and print it
    as a log line; :func:`write_phases` saves every record of the process where the API shows
    it."""
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}")
    record: dict[str, object] = {"phase": name, "seconds": round(max(0.0, seconds), 3)}
    if nbytes is not None:
        record["bytes"] = int(nbytes)
    if peer:
        record["peer"] = peer
    if rail is not None:
        record["rail"] = int(rail)
    if via:
        record["via"] = via
    if memfree:
        # The last readings only: the termination message keeps 4 KiB.
        record["memfree_gib"] = [round(f / settle.GIB, 2) for f in memfree[-8:]]
    _recorded.append(record)
    print(f"{PHASE_TAG} {json.dumps(record, sort_keys=True)}", flush=True)
    return record


def report_manifest(digest: str) -> None:
    """Report a manifest's sha256: a log line, and the first line :func:`write_phases` writes."""
    _reported.append(f"{MANIFEST_TAG} {digest}")
    print(_reported[-1], flush=True)


def read_manifest_digest(text: str) -> str | None:
    """The manifest sha256 a termination message or log reports (the last well-formed one)."""
    found = None
    for line in text.splitlines():
        head, _, body = line.strip().partition(" ")
        if head == MANIFEST_TAG and is_sha256(body.strip()):
            found = body.strip()
    return found


def recorded_phases() -> list[dict[str, object]]:
    return list(_recorded)


def write_phases(path: Path) -> None:
    """Every record of this process into ``path`` (the container's termination message file),
    one line each, whole lines only, at most :data:`PHASE_MESSAGE_MAX` bytes. A path that cannot
    be written costs the records, never the step."""
    text = "".join(line + "\n" for line in _reported[-1:])
    for record in _recorded:
        line = f"{PHASE_TAG} {json.dumps(record, sort_keys=True)}\n"
        if len(text) + len(line) > PHASE_MESSAGE_MAX:
            break
        text += line
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        print(f"[fetch] phase records not written to {path}: {exc.strerror}", flush=True)


def read_phases(text: str) -> list[dict[str, object]]:
    """The well-formed phase records in ``text`` (a termination message or a log); anything
    else is skipped: a pod's message is data, never trusted to have a shape."""
    found: list[dict[str, object]] = []
    for line in text.splitlines():
        head, _, body = line.strip().partition(" ")
        if head != PHASE_TAG:
            continue
        try:
            data = json.loads(body)
        except ValueError:
            continue
        if not isinstance(data, dict) or data.get("phase") not in PHASES:
            continue
        seconds, nbytes = data.get("seconds"), data.get("bytes", 0)
        peer, rail = data.get("peer", ""), data.get("rail", 0)
        if (
            isinstance(seconds, (int, float))
            and not isinstance(seconds, bool)
            and 0 <= seconds < 1e7
            and isinstance(nbytes, int)
            and not isinstance(nbytes, bool)
            and nbytes >= 0
            and isinstance(peer, str)
            and len(peer) <= 253
            and isinstance(rail, int)
            and not isinstance(rail, bool)
            and 0 <= rail < 64
        ):
            found.append(data)
    return found


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

SHARED_STORE = "blobs"
"""huggingface_hub 1.x's cache-wide store of Xet-backed files: ``<cache>/blobs/<xx>/<hash>``
(regular files); a repo's ``blobs/<etag>`` is then a relative symlink into it."""
SHARED_STORE_MARKER = ".huggingface-shared-blobs"
"""The file (content ``1\n``) by which huggingface_hub recognises its shared store."""
_STORE_HASH_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Snapshot:
    """A snapshot in an HF cache: its commit and the paths (relative to the cache) it consists of.

    ``files`` maps each file of the snapshot (relative to the snapshot folder, as the Hub names
    it) to the cache-relative path of the regular file holding its bytes."""

    repo: str
    revision: str
    commit: str
    paths: tuple[str, ...]
    files: int
    bytes: int
    contents: tuple[tuple[str, str], ...] = ()

    @property
    def model_paths(self) -> tuple[str, ...]:
        """The paths inside the model's own folder (relative to it)."""
        prefix = repo_folder(self.repo) + "/"
        return tuple(p[len(prefix) :] for p in self.paths if p.startswith(prefix))

    @property
    def shared_paths(self) -> tuple[str, ...]:
        """The shared store's files this snapshot uses (relative to ``<cache>/blobs``)."""
        prefix = SHARED_STORE + "/"
        return tuple(p[len(prefix) :] for p in self.paths if p.startswith(prefix))


def shared_store(cache: Path) -> Path | None:
    """``<cache>/blobs`` when it is huggingface_hub's marked shared store, else None."""
    store = cache / SHARED_STORE
    marker = store / SHARED_STORE_MARKER
    if store.is_dir() and not store.is_symlink() and marker.is_file() and not marker.is_symlink():
        return store
    return None


def _in_store(rel: Path) -> bool:
    """``rel`` (relative to the store) is ``<xx>/<64 hex>`` with ``xx`` its first two digits."""
    parts = rel.parts
    return len(parts) == 2 and bool(_STORE_HASH_RE.match(parts[1])) and parts[0] == parts[1][:2]


def find_snapshot(cache: Path, repo: str, revision: str) -> Snapshot:
    """The files of (repo, revision): the snapshot's entries, the blobs they link (in the model's
    folder or in the shared store), the refs naming it."""
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
    contents: list[tuple[str, str]] = []
    root, croot = base.resolve(), cache.resolve()
    store = shared_store(cache)
    sroot = store.resolve() if store else None
    for dirpath, dirnames, filenames in os.walk(snap):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if Path(dirpath, d).is_symlink()]:
            entry = Path(dirpath, name)
            paths.append(str(entry.relative_to(cache)))
            if entry.is_symlink():
                target = entry.resolve()
                inside = root in target.parents
                shared = (
                    sroot is not None
                    and sroot in target.parents
                    and _in_store(target.relative_to(sroot))
                )
                if not target.is_file() or not (inside or shared):
                    raise StepError(
                        f"snapshot entry {entry} points to {target}, which is missing or outside "
                        f"{base} and the shared blob store: the snapshot is incomplete "
                        "(download it again)"
                    )
                # The repo's own blobs/<etag>, a link into the shared store in hub 1.x: it goes along.
                hop = Path(os.path.normpath(entry.parent / os.readlink(entry)))
                if hop != target and hop.is_symlink() and base in hop.parents:
                    paths.append(str(hop.relative_to(cache)))
                blob = str(target.relative_to(croot))
            else:
                blob = str(entry.relative_to(cache))
            blobs[blob] = Path(cache, blob).stat().st_size
            contents.append((str(entry.relative_to(snap)), blob))
    if not contents:
        raise StepError(f"snapshot {snap} is empty")
    extra = [b for b in blobs if b not in paths]
    if any(b.startswith(SHARED_STORE + "/") for b in blobs):
        extra.append(f"{SHARED_STORE}/{SHARED_STORE_MARKER}")
    # Every ref (main, a tag, refs/pr/N) that names this commit goes along, so an offline load
    # by that name resolves on the peer as it does here.
    for path in sorted((base / "refs").rglob("*")):
        if path.is_file() and path.read_text(encoding="utf-8").strip() == commit:
            extra.append(str(path.relative_to(cache)))
    return Snapshot(
        repo,
        revision,
        commit,
        tuple(dict.fromkeys(extra + paths)),
        len(contents),
        sum(blobs.values()),
        tuple(contents),
    )


# --- manifest -------------------------------------------------------------------------------

MANIFEST_SUFFIX = ".manifest.json"
HASH_CHUNK = 8 * 1024 * 1024


def manifest_relpath(repo: str, revision: str) -> str:
    """The manifest of (repo, revision), relative to the HF cache directory."""
    return f"{MARKER_DIR}/{repo_folder(repo)}@{check_revision(revision)}{MANIFEST_SUFFIX}"


def manifest_bytes(
    repo: str, revision: str, commit: str, files: dict[str, dict[str, object]]
) -> bytes:
    """The manifest's canonical bytes (its sha256 is what the marker names).

    ``files``: per file of the snapshot (as the Hub names it) its ``size`` and the Hub's own hash
    of it: ``sha256`` (an LFS or Xet-backed file: the LFS object id) or ``git_sha1`` (a file kept
    in git: its blob id); ``xet_hash`` where the Hub gives one."""
    data = {"repo": repo, "revision": revision, "commit": commit, "files": files}
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def read_manifest(data: bytes, where: str) -> dict[str, dict[str, object]]:
    """The ``files`` of a manifest, checked for shape; refuses anything else."""
    try:
        doc = json.loads(data)
        files = doc["files"]
        ok = isinstance(files, dict) and all(
            isinstance(k, str)
            and isinstance(v, dict)
            and isinstance(v.get("size"), int)
            and (isinstance(v.get("sha256"), str) or isinstance(v.get("git_sha1"), str))
            for k, v in files.items()
        )
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok or not files:
        raise StepError(f"{where} is not a manifest (per file: size and sha256 or git_sha1)")
    for name in files:
        if name.startswith("/") or ".." in Path(name).parts:
            raise StepError(f"{where} names {name!r}, which is not a path inside a snapshot")
    return dict(files)


def is_sha256(text: str) -> bool:
    """``text`` is a sha256 in hex (64 lowercase digits)."""
    return bool(_STORE_HASH_RE.match(text))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path, entry: dict[str, object]) -> tuple[str, str]:
    """(kind, hex digest) of ``path`` in the form ``entry`` records."""
    if isinstance(entry.get("sha256"), str):
        h = hashlib.sha256()
        kind = "sha256"
    else:
        h = hashlib.sha1()  # git's blob id: sha1 over "blob <size>\0" + the bytes
        h.update(b"blob %d\0" % path.stat().st_size)
        kind = "git_sha1"
    with path.open("rb", buffering=0) as f:
        buf = bytearray(HASH_CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return kind, h.hexdigest()


def verify(
    cache: Path,
    snap: Snapshot,
    files: dict[str, dict[str, object]],
    only: set[str] | None = None,
    workers: int | None = None,
) -> dict[str, str]:
    """Every file of the manifest (or of ``only``) checked against ``snap``: size, then the Hub's
    hash. Returns {file: what is wrong}; empty when every byte is right. Hashes in parallel
    (hashlib releases the GIL), one thread per core."""
    have = dict(snap.contents)
    bad: dict[str, str] = {}
    for name in set(have) - set(files):
        bad[name] = "not in the manifest"
    todo: list[tuple[str, Path, dict[str, object]]] = []
    for name, entry in sorted(files.items()):
        if only is not None and name not in only:
            continue
        if name not in have:
            bad[name] = "missing"
            continue
        path = cache / have[name]
        size = path.stat().st_size
        if size != entry["size"]:
            bad[name] = f"{size} bytes, the manifest says {entry['size']}"
            continue
        todo.append((name, path, entry))

    def check(item: tuple[str, Path, dict[str, object]]) -> tuple[str, str | None]:
        name, path, entry = item
        kind, digest = file_digest(path, entry)
        return name, None if digest == entry[
            kind
        ] else f"{kind} {digest}, the manifest says {entry[kind]}"

    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        for name, problem in pool.map(check, todo):
            if problem:
                bad[name] = problem
    return bad


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_marker(cache: Path, snap: Snapshot, manifest: bytes) -> Path:
    """The manifest, then the marker naming its sha256: written last, after verification."""
    write_atomic(cache / manifest_relpath(snap.repo, snap.revision), manifest)
    path = marker_path(cache, snap.repo, snap.revision)
    data = {
        "repo": snap.repo,
        "revision": snap.revision,
        "commit": snap.commit,
        "bytes": snap.bytes,
        "files": snap.files,
        "manifest_sha256": sha256_hex(manifest),
    }
    write_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
    return path


def read_marker(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_marker(cache: Path, repo: str, revision: str, content: bool = False) -> tuple[bool, str]:
    """(ok, why): the marker names this (repo, revision) and the sha256 of the manifest beside
    it, and every file of that manifest is in the snapshot with its recorded size. With
    ``content``, every byte too: each file hashed against the manifest, and each blob the Hub
    names by its sha256 (``blobs/<sha256>``, the shared store's files behind them included)
    against its name. What ``wait`` and a cached ``download`` accept; a marker alone proves
    nothing, and sizes alone prove nothing of a file another writer of the cache replaced."""
    marker = marker_path(cache, repo, revision)
    data = read_marker(marker)
    if data is None:
        return False, f"waiting for {marker}"
    if data.get("revision") != revision or data.get("repo") != repo:
        return False, f"{marker} names {data.get('repo')}@{data.get('revision')}"
    manifest = cache / manifest_relpath(repo, revision)
    try:
        raw = manifest.read_bytes()
    except OSError:
        return False, f"{marker} refused: its manifest {manifest} is missing"
    if data.get("manifest_sha256") != sha256_hex(raw):
        return False, f"{marker} refused: it does not name the sha256 of {manifest}"
    try:
        files = read_manifest(raw, str(manifest))
        snap = find_snapshot(cache, repo, revision)
    except StepError as problem:
        return False, f"{marker} refused: {problem}"
    have = dict(snap.contents)
    for name, entry in sorted(files.items()):
        if name not in have:
            return False, f"{marker} refused: {name} of the manifest is not in the snapshot"
        size = (cache / have[name]).stat().st_size
        if size != entry["size"]:
            return False, f"{marker} refused: {name} has {size} bytes, the manifest {entry['size']}"
    if set(have) - set(files):
        return False, f"{marker} refused: the snapshot has files the manifest does not list"
    if content:
        bad = content_problems(cache, snap, files)
        if bad:
            return False, f"{marker} refused: " + "; ".join(
                f"{name} ({have.get(name, '?')}): {why}" for name, why in sorted(bad.items())[:3]
            )
    return (
        True,
        f"{marker}: {snap.files} files, {gb(snap.bytes)}, manifest {data['manifest_sha256']}"
        + (", every byte verified" if content else ""),
    )


def content_problems(
    cache: Path, snap: Snapshot, files: dict[str, dict[str, object]]
) -> dict[str, str]:
    """{file: what is wrong} of every byte of ``snap``: :func:`verify` against the manifest, and
    each blob named by a sha256 against that name (hashed once: where the manifest's sha256 is
    the name, verifying against the manifest checks the name)."""
    bad, have = verify(cache, snap, files), dict(snap.contents)
    for name in sorted(set(have) - set(bad)):
        # The Hub's name of the blob: the entry's link target in the model's blobs/<etag>.
        entry = cache / repo_folder(snap.repo) / "snapshots" / snap.commit / name
        etag = Path(os.readlink(entry)).name if entry.is_symlink() else ""
        listed = files.get(name, {}).get("sha256")
        if not is_sha256(etag) or listed == etag:
            continue
        if isinstance(listed, str):
            bad[name] = f"blob named {etag}, the manifest says sha256 {listed}"
        elif (digest := file_digest(cache / have[name], {"sha256": etag})[1]) != etag:
            bad[name] = f"blob named by sha256 {etag} holds sha256 {digest}"
    return bad


# --- free space -----------------------------------------------------------------------------


def free_bytes(path: Path) -> tuple[Path, int]:
    """Free bytes for an unprivileged writer on the filesystem of ``path`` (or its nearest parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    return probe, st.f_bavail * st.f_frsize


def space_margin(largest: int) -> int:
    """Free space demanded on top of the missing bytes: room for the largest file twice (an
    interrupted file is kept as the resume basis while its complete copy is written), at most
    :data:`SPACE_MARGIN_BYTES`."""
    return min(SPACE_MARGIN_BYTES, max(0, largest))


def check_space(cache: Path, need: int, step: str, margin: int = SPACE_MARGIN_BYTES) -> None:
    """Refuse, before anything is written, unless ``need`` + ``margin`` fits on ``cache``."""
    probe, free = free_bytes(cache)
    want = need + margin
    if free < want:
        raise StepError(
            f"need {gb(want)} ({gb(need)} missing + {gb(margin)} margin), "
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
    """Wait for the marker, then check every byte it vouches for once (:func:`check_marker`
    with ``content``): a file replaced in the cache after it was marked is refused, by name."""
    start = time.monotonic()
    say("wait", poll("wait", lambda: check_marker(cache, repo, revision), timeout, interval))
    ok, why = check_marker(cache, repo, revision, content=True)
    phase("wait-weights", time.monotonic() - start)
    if not ok:
        raise StepError(why)
    say("wait", why)


@contextmanager
def node_lock(
    cache: Path, repo: str, revision: str, timeout: float, interval: float, step: str
) -> Iterator[None]:
    """An exclusive lock on (repo, revision) in this cache: co-located deployments of one model
    (one node, one hostPath cache) download it once; the second waits, then finds the marker.
    ``flock`` on a file beside the markers: the kernel drops it when the holder dies."""
    path = cache / MARKER_DIR / "locks" / f"{repo_folder(repo)}@{check_revision(revision)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:

        def take() -> tuple[bool, str]:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False, f"{path} is held (another deployment fetches {repo}@{revision})"
            return True, f"lock {path} taken"

        say(step, poll(step, take, timeout, interval, sleep=0.2))
        yield
    finally:
        os.close(fd)


def memwait(need_gb: float, meminfo: Path, vm: Path, timeout: float, interval: float) -> list[int]:
    """The settle step's gate (``memsettle.gate``): flush, then wait until ``MemFree`` covers
    ``need_gb``, for at most ``timeout`` s; ``MemFree`` at each attempt goes into the phase
    record (the container's termination message), also when it fails."""
    attempts = max(1, int(timeout // max(interval, 1.0)))
    start = time.monotonic()
    try:
        frees = settle.gate(need_gb * GB, meminfo, vm, attempts, interval)
    except settle.SettleError as exc:
        phase("wait-memory", time.monotonic() - start, memfree=exc.readings)
        raise StepError(str(exc), exc.code) from exc
    phase("wait-memory", time.monotonic() - start, memfree=frees)
    return frees
