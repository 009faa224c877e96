"""The copy of a snapshot between Sparks (STDLIB ONLY, plus the rsync binary): ``receive`` serves
the HF cache through a real ``rsync --daemon`` (one write-only module) until the pusher's marker
arrives; ``push`` rsyncs the snapshot to every peer in parallel, resumable, the marker last.

Shipped verbatim beside ``fetch_step.py`` (the entry point) and ``fetch_base.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__:  # imported as sparkrack.serving.scripts.* (the renderer and the tests)
    from . import fetch_base as common
else:  # run in a pod: the switch ConfigMap's files sit side by side
    import fetch_base as common  # type: ignore[import-not-found, no-redef]


# --- receive --------------------------------------------------------------------------------


def _marker_states(cache: Path) -> dict[str, tuple[int, int]]:
    states: dict[str, tuple[int, int]] = {}
    folder = cache / common.MARKER_DIR
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.name.endswith(common.MARKER_SUFFIX):
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
            f"[{common.RSYNC_MODULE}]",
            f"path = {cache}",
            "read only = no",
            "write only = yes",
            "list = no",
            f"uid = {os.getuid()}",
            f"gid = {os.getgid()}",
            f"auth users = {common.RSYNC_USER}",
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
        raise common.StepError(
            f"cannot read --secrets-file {secrets_file}: {exc.strerror}"
        ) from None
    if not any(
        ln.startswith(f"{common.RSYNC_USER}:") and len(ln) > len(common.RSYNC_USER) + 1
        for ln in lines
    ):
        raise common.StepError(
            f"--secrets-file {secrets_file} has no '{common.RSYNC_USER}:<password>' line"
        )
    if shutil.which("rsync") is None:
        raise common.StepError("rsync is not installed in this image")
    expected = common.marker_relpath(*expect) if expect else None
    if expected and common.read_marker(cache / expected) is not None:
        common.say("receive", f"{expected} already present: only the marker will be rewritten")
    else:
        common.check_space(cache, need, "receive")
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
        common.say(
            "receive",
            f"rsync daemon on {address or '*'}:{port} module {common.RSYNC_MODULE} -> {cache}",
        )
        start = time.monotonic()
        daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        try:
            arrived = _serve(cache, daemon, before, expected, log, start, timeout, interval)
        finally:
            _stop(daemon)
    common.say(
        "receive",
        f"marker {arrived} arrived after {time.monotonic() - start:.0f} s; daemon stopped",
    )
    data = common.read_marker(cache / arrived)
    if data is None:
        raise common.StepError(f"{cache / arrived} is not a JSON marker")
    snap = common.find_snapshot(cache, str(data.get("repo")), str(data.get("revision")))
    if (snap.files, snap.bytes) != (data.get("files"), data.get("bytes")):
        raise common.StepError(
            f"{arrived} records {data.get('files')} files, {data.get('bytes')} bytes; the cache "
            f"holds {snap.files} files, {snap.bytes} bytes"
        )
    common.say("receive", f"verified: {snap.files} files, {snap.bytes} bytes as the marker records")


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
                common.say("receive", f"rsyncd: {self.last}")


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
            raise common.StepError(
                f"rsync daemon exited with code {daemon.returncode} after {now - start:.0f} s"
                + (f": {tail.last}" if tail.last else "")
            )
        for name, state in _marker_states(cache).items():
            if before.get(name) == state:
                continue
            rel = f"{common.MARKER_DIR}/{name}"
            if expected is None or rel == expected:
                _drain(daemon, 60.0)
                tail.echo()
                return rel
        if now - start >= timeout:
            raise common.StepError(
                f"no marker pushed after {timeout:.0f} s ({common.gb(common.tree_bytes(cache))} in {cache})",
                common.EXIT_TIMEOUT,
            )
        if now - last >= interval:
            last = now
            common.say(
                "receive",
                f"{common.gb(common.tree_bytes(cache))} in {cache} after {now - start:.0f} s",
            )
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
    f"--partial-dir={common.PARTIAL_DIR}",
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
    error: common.StepError | None = None


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
                    common.say(
                        "push",
                        f"{label}: {common.gb(sent)} ({progress.group(2)} %) at {progress.group(3)} "
                        f"after {last - start:.0f} s",
                    )
                stat = _STAT_RE.match(line.strip())
                if stat:
                    stats[stat.group(1)] = int(stat.group(2).replace(",", ""))
                    common.say("push", f"{label}: {line.strip()}")
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    message = next((e for e in reversed(errors) if e), "")
    if expired.is_set():
        return common.TIMED_OUT, stats, f"stopped after {timeout:.0f} s"
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
    dest = f"rsync://{common.RSYNC_USER}@{_bracket(host)}:{port}/{common.RSYNC_MODULE}/"
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
                result.error = common.StepError(
                    f"{host}: {what} not pushed within the timeout ({attempt - 1} attempts)",
                    common.EXIT_TIMEOUT,
                )
                return result
            code, stats, message = _rsync(cmd, env, f"{host} {what}", interval, left)
            if code == 0:
                if what == "snapshot":
                    result.stats = stats
                break
            if code in common.RSYNC_RETRY and deadline - time.monotonic() > common.RETRY_PAUSE_S:
                common.say("push", f"{host}: rsync exit {code} ({message}); retrying (resumes)")
                time.sleep(common.RETRY_PAUSE_S)
                continue
            if code == common.TIMED_OUT:
                result.error = common.StepError(
                    f"{host}: {what} push {message}", common.EXIT_TIMEOUT
                )
                return result
            result.error = common.StepError(f"{host}: rsync of the {what} exited {code}: {message}")
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
        if not common.HOST_RE.match(host):
            raise common.StepError(f"--to {host!r} is not a host name or address")
    marker = common.marker_relpath(repo, revision)
    if common.read_marker(cache / marker) is None:
        raise common.StepError(
            f"{cache / marker} missing: the snapshot is not complete here (download first)"
        )
    try:
        password = password_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise common.StepError(
            f"cannot read --password-file {password_file}: {exc.strerror}"
        ) from None
    if not password:
        raise common.StepError(f"--password-file {password_file} is empty")
    snap = common.find_snapshot(cache, repo, revision)
    if shutil.which("rsync") is None:
        raise common.StepError("rsync is not installed in this image")
    env = {**os.environ, "RSYNC_PASSWORD": password, "LC_ALL": "C"}
    os.environ["RSYNC_PASSWORD"] = password  # only so that redact() knows it
    common.say(
        "push",
        f"{repo}@{revision}: {snap.files} files, {common.gb(snap.bytes)} to {', '.join(hosts)} "
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
            common.say(
                "push",
                f"{r.host}: done in {r.seconds:.1f} s; literal {r.stats.get('Literal data', 0)} "
                f"bytes, matched {r.stats.get('Matched data', 0)} bytes of "
                f"{r.stats.get('Total file size', 0)} bytes",
            )
    if failed:
        code = (
            common.EXIT_TIMEOUT
            if all(r.error and r.error.code == common.EXIT_TIMEOUT for r in failed)
            else 1
        )
        raise common.StepError("; ".join(str(r.error) for r in failed), code)
