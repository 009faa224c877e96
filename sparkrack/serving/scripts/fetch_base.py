"""What every step of the fetch step shares (STDLIB ONLY): its names, the HF cache's snapshots
and the completion marker, free space, bounded waits, and the errors and lines it prints.

Shipped verbatim beside ``fetch_step.py`` (the entry point) and ``fetch_rsync.py`` in the switch
ConfigMap. The completion marker is ``<cache>/.sparkrack/models--<org>--<name>@<revision>.done``,
a JSON file with repo, revision, commit, bytes and files (:func:`marker_relpath` owns the name).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
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
