"""The receiving side of a copy between Sparks (STDLIB ONLY, plus the rsync binary): ``receive``
serves the HF cache through a real ``rsync --daemon`` per fabric rail (``fetch_daemon.py``'s
configuration) until a pushed round verifies, then writes the marker. The pushed manifest is
taken only when its sha256 is the one the head's download computed, which reaches the receiver
out of band (``--manifest-sha256-file``: a ConfigMap the serve play writes from the head's
download container's termination message; the pusher cannot write it). With a :class:`fetch_relay.Relay` (a chain), it passes every file on to the next Spark
while it arrives, and once its own copy verifies runs ``fetch_push.push`` to that Spark.

Shipped verbatim beside ``fetch_step.py`` (the entry point) and the other ``fetch_*.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

if __package__:  # imported as sparkrack.serving.scripts.* (the renderer and the tests)
    from . import fetch_base as common
    from . import fetch_daemon as rsyncd
    from . import fetch_push as pushing
    from . import fetch_relay as relaying
else:  # run in a pod: the switch ConfigMap's files sit side by side
    import fetch_base as common  # type: ignore[import-not-found, no-redef]
    import fetch_daemon as rsyncd  # type: ignore[import-not-found, no-redef]
    import fetch_push as pushing  # type: ignore[import-not-found, no-redef]
    import fetch_relay as relaying  # type: ignore[import-not-found, no-redef]


def _children(pid: int) -> list[int]:
    kids = []
    for proc in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = proc.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            kids.append(int(proc.parent.name))
    return kids


def receive(
    cache: Path,
    need: int,
    port: int,
    secrets_file: Path,
    addresses: Sequence[str],
    expect: tuple[str, str],
    allow: Sequence[str],
    timeout: float,
    interval: float,
    relay: relaying.Relay | None = None,
    expect_file: Path | None = None,
) -> list[pushing.PushResult]:
    """Serve ``expect`` (repo, revision) to the pusher at ``allow`` (its address on every rail):
    one daemon per address of ``addresses`` (this Spark's rail addresses; empty: one daemon on
    every address), until a round verifies against the manifest whose sha256 ``expect_file``
    holds (``None``: refused, there is nothing to verify against). With ``relay``, pass the model on to the next Spark
    of a chain while it arrives, then push it there; returns that hop's result (none without)."""
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
    if not allow:
        raise common.StepError("--allow names no address")
    if expect_file is None:
        raise common.StepError("no --manifest-sha256-file: nothing to verify the push against")
    for flag, hosts in (("--allow", allow), ("--address", addresses)):
        for host in hosts:
            if not common.HOST_RE.match(host):
                raise common.StepError(f"{flag} {host!r} is not an address")
    env = relaying.relay_env(relay) if relay is not None else {}
    if shutil.which("rsync") is None:
        raise common.StepError("rsync is not installed in this image")
    if os.geteuid() != 0:
        raise common.StepError(
            "receive runs as root (chroot, then every transfer as uid "
            f"{rsyncd.TRANSFER_UID}); it runs as uid {os.geteuid()}"
        )
    repo, revision = expect
    have = rsyncd.present_bytes(cache, repo) if cache.is_dir() else 0
    common.say("receive", f"{common.gb(have)} of {repo} already here")
    missing = max(0, need - have)
    common.check_space(cache, missing, "receive", common.space_margin(need))
    began = time.monotonic()
    # Co-located deployments of one model push it to this Spark at once: the second receiver
    # waits here (its pusher retries the refused connection), then finds most of it present.
    with common.node_lock(cache, repo, revision, timeout, interval, "receive"):
        left = max(1.0, timeout - (time.monotonic() - began))
        base = cache / common.repo_folder(repo)
        store = cache / common.SHARED_STORE
        for folder in (base, store):
            folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="sparkrack-rsyncd-") as tmp:
            meta, status = Path(tmp, "meta"), Path(tmp, "status")
            meta.mkdir()
            status.mkdir()
            os.chmod(tmp, 0o755)  # the chrooted transfers must reach meta/ and status/
            rsyncd.own([base, store, meta], rsyncd.TRANSFER_UID)
            secrets = Path(tmp, "rsyncd.secrets")
            fd = os.open(secrets, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
            modules = {
                rsyncd.MODULE_MODEL: base,
                rsyncd.MODULE_SHARED: store,
                rsyncd.MODULE_META: meta,
            }
            daemons: list[subprocess.Popen[bytes]] = []
            logs = [Path(tmp, f"rsyncd-{rail}.log") for rail in range(max(1, len(addresses)))]
            start = time.monotonic()
            relayer = (
                None
                if relay is None
                else relaying.Relayer(relay, (base, store), logs, env, began + timeout, interval)
            )
            try:
                # One daemon per rail address (rsync binds one address, or all); they share the
                # modules, each writes its own log.
                for rail, address in enumerate(addresses or [None]):
                    log = logs[rail]
                    conf = Path(tmp, f"rsyncd-{rail}.conf")
                    conf.write_text(
                        rsyncd.rsyncd_config(
                            modules, status, secrets, log, allow, rsyncd.TRANSFER_UID
                        ),
                        encoding="utf-8",
                    )
                    cmd = ["rsync", "--daemon", "--no-detach", f"--config={conf}", f"--port={port}"]
                    if address:
                        cmd.append(f"--address={address}")
                    common.say(
                        "receive",
                        f"rsync daemon on {address or '*'}:{port} for {', '.join(allow)} only: "
                        f"modules {rsyncd.MODULE_MODEL} -> {base}, {rsyncd.MODULE_SHARED} -> {store}",
                    )
                    daemons.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL))
                if relayer is not None:
                    relayer.start()
                _serve(
                    cache, (repo, revision), expect_file, daemons, meta, status, logs, start,
                    left, interval,
                )  # fmt: skip
            finally:
                if relayer is not None:
                    relayer.halt()
                for daemon in daemons:
                    _stop(daemon)
        common.say("receive", f"done after {time.monotonic() - start:.0f} s; daemons stopped")
        if relay is None or relayer is None:
            return []
        # The next Spark's final round: what the relay has not sent, the manifest, the verdict.
        results = pushing.push(
            cache, repo, revision, [[host] for host in relay.hosts], relay.port,
            relay.password_file, relay.bwlimit, max(1.0, began + timeout - time.monotonic()),
            interval, sources=relay.sources,
        )  # fmt: skip
        return [relayer.merged(result) for result in results]


class _LogTail:
    """Echo the daemons' log lines (one per file received) as they are written."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.offsets = {path: 0 for path in paths}
        self.last = ""
        self.sent: set[str] = set()

    def echo(self) -> None:
        for path in self.offsets:
            self._echo(path)

    def _echo(self, path: Path) -> None:
        if not path.exists():
            return
        with path.open("rb") as f:
            f.seek(self.offsets[path])
            data = f.read()
        cut = data.rfind(b"\n") + 1
        self.offsets[path] += cut
        for line in data[:cut].decode(errors="replace").splitlines():
            if line.strip():
                self.last = line.strip()
                common.say("receive", f"rsyncd: {self.last}")
                words = self.last.split()
                if "send" in words:
                    self.sent.add(Path(words[words.index("send") + 2]).name)


def _state(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


def expected_digest(path: Path) -> str | None:
    """The manifest sha256 in ``path`` (64 hex digits), or None while it is not there."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text if common.is_sha256(text) else None


def _serve(
    cache: Path,
    expect: tuple[str, str],
    expect_file: Path,
    daemons: Sequence[subprocess.Popen[bytes]],
    meta: Path,
    status: Path,
    logs: Sequence[Path],
    start: float,
    timeout: float,
    interval: float,
) -> None:
    """Serve until a round's files verify: per round (the pusher's ``meta/round``), once
    ``expect_file`` holds the head's manifest sha256, refuse a pushed manifest with another,
    check the pushed files against it (every file the first time, the bad ones after), answer in
    ``status/verdict.json``; when nothing is bad write manifest and marker."""
    repo, revision = expect
    last = start
    tail = _LogTail(logs)
    seen = _state(meta / rsyncd.ROUND_FILE)
    held = seen
    bad: dict[str, str] = {}
    while True:
        tail.echo()
        now = time.monotonic()
        gone = next((d for d in daemons if d.poll() is not None), None)
        if gone is not None:
            tail.echo()
            raise common.StepError(
                f"rsync daemon exited with code {gone.returncode} after {now - start:.0f} s"
                + (f": {tail.last}" if tail.last else "")
            )
        state = _state(meta / rsyncd.ROUND_FILE)
        digest = expected_digest(expect_file)
        if state is not None and state != seen and digest is None and state != held:
            held = state
            common.say("receive", f"a round waits for the head's manifest sha256 in {expect_file}")
        if state is not None and state != seen and digest is not None:
            seen = state
            _drain(daemons, 60.0)
            tail.echo()
            tail.sent.clear()  # from here on, a "send verdict.json" is this round's
            bad, raw, snap = _check_round(cache, repo, revision, meta, bad, digest)
            round_ = (meta / rsyncd.ROUND_FILE).read_text(encoding="utf-8").strip()
            verdict = {"round": round_, "bad": sorted(bad)}
            common.write_atomic(status / rsyncd.VERDICT_FILE, json.dumps(verdict).encode())
            if not bad and snap is not None:
                path = common.write_marker(cache, snap, raw)
                common.say(
                    "receive",
                    f"round {round_}: every file verified after {time.monotonic() - start:.1f} s; "
                    f"marker {path}",
                )
                _await_fetch(tail, daemons, 60.0)
                return
            common.say("receive", f"round {round_}: {len(bad)} files to send again")
        if now - start >= timeout:
            raise common.StepError(
                f"no verified push after {timeout:.0f} s "
                f"({common.gb(rsyncd.present_bytes(cache, repo))} of {repo} here)",
                common.EXIT_TIMEOUT,
            )
        if now - last >= interval:
            last = now
            common.say(
                "receive",
                f"{common.gb(rsyncd.present_bytes(cache, repo))} of {repo} here after {now - start:.0f} s",
            )
        time.sleep(0.2)


def _check_round(
    cache: Path, repo: str, revision: str, meta: Path, bad: dict[str, str], digest: str
) -> tuple[dict[str, str], bytes, common.Snapshot | None]:
    """(bad files, manifest bytes, snapshot) of one round: the pushed manifest refused unless
    its sha256 is ``digest`` (the head's), links checked, files verified against it."""
    raw = (
        (meta / rsyncd.MANIFEST_FILE).read_bytes()
        if (meta / rsyncd.MANIFEST_FILE).is_file()
        else b""
    )
    if common.sha256_hex(raw) != digest:
        raise common.StepError(
            f"the pushed manifest has sha256 {common.sha256_hex(raw)}, the head computed "
            f"{digest}: refused, nothing of this push is marked"
        )
    files = common.read_manifest(raw, "the pushed manifest")
    doc = json.loads(raw)
    if (doc.get("repo"), doc.get("revision")) != (repo, revision):
        raise common.StepError(
            f"the pushed manifest is of {doc.get('repo')}@{doc.get('revision')}, "
            f"this receiver takes {repo}@{revision}"
        )
    commit = str(doc.get("commit", ""))
    for removed in rsyncd.unmunge(cache, repo):
        common.say("receive", f"removed a symlink leaving the model's folder: {removed}")
    if commit and revision != commit:
        common.check_revision(commit)
        ref = cache / common.repo_folder(repo) / "refs" / revision
        if not ref.is_file() or ref.read_text(encoding="utf-8").strip() != commit:
            return {"refs/" + revision: "missing or not the manifest's commit"}, raw, None
    try:
        snap = common.find_snapshot(cache, repo, revision)
    except common.StepError as problem:
        return {name: str(problem) for name in files}, raw, None
    began = time.monotonic()
    only = set(bad) if bad else None
    found = common.verify(cache, snap, files, only=only)
    names = only if only is not None else set(files)
    size = sum(int(str(files[n]["size"])) for n in names if n in files)
    seconds = time.monotonic() - began
    common.say(
        "receive",
        f"verify: {len(names)} files, {common.gb(size)} against the manifest in {seconds:.1f} s; "
        f"{len(found)} bad" + "".join(f"; {n}: {p}" for n, p in sorted(found.items())[:5]),
    )
    return found, raw, snap


def _await_fetch(tail: _LogTail, daemons: Sequence[subprocess.Popen[bytes]], limit: float) -> None:
    """Keep serving until the pusher has read the final verdict (or ``limit`` s)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        tail.echo()
        if rsyncd.VERDICT_FILE in tail.sent:
            break
        time.sleep(0.2)
    _drain(daemons, 10.0)


def _drain(daemons: Sequence[subprocess.Popen[bytes]], limit: float) -> None:
    """Let the connections of a round finish their exchange (before the check, or the stop)."""
    deadline = time.monotonic() + limit
    while any(_children(d.pid) for d in daemons) and time.monotonic() < deadline:
        time.sleep(0.2)


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    if daemon.poll() is None:
        daemon.terminate()
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
