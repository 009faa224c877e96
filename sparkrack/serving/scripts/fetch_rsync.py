"""The copy of a snapshot between Sparks (STDLIB ONLY, plus the rsync binary): ``receive`` serves
the HF cache through a real ``rsync --daemon`` per fabric rail (write-only modules) until a
pushed round verifies; ``push`` rsyncs the snapshot to its peers, one stream per rail per peer
(the files split across the rails, balanced by bytes), resumable, the marker last.

Two shapes: a fan-out (the head pushes to every peer at once) or a chain (the head pushes to
the first peer only; each receiver with a :class:`Relay` passes every file on to the next peer
as soon as the file has arrived whole, then, once its own copy verifies, runs ``push`` to the
next peer, whose verdict ends its step).

Shipped verbatim beside ``fetch_step.py`` (the entry point) and ``fetch_base.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

if __package__:  # imported as sparkrack.serving.scripts.* (the renderer and the tests)
    from . import fetch_base as common
else:  # run in a pod: the switch ConfigMap's files sit side by side
    import fetch_base as common  # type: ignore[import-not-found, no-redef]


# --- receive --------------------------------------------------------------------------------


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


TRANSFER_UID = 65532
"""The unprivileged uid (and gid) the daemon's transfers run as, chrooted into their module.
The HF cache is a hostPath the kubelet creates root-owned, and the engine images (and the
download in them) run as root; the receiver, root only for ``chroot`` and ``chown``, gives this
uid the one model's folder and the shared blob store, nothing else, before it serves."""
MODULE_MODEL = "model"
MODULE_SHARED = "shared"
MODULE_META = "meta"
MODULE_STATUS = "status"
MUNGED = "/rsyncd-munged/"
REFUSED = (
    "delete", "delete-before", "delete-during", "delete-delay", "delete-after",
    "delete-excluded", "delete-missing-args", "remove-source-files", "force",
    "D", "devices", "specials", "copy-devices", "write-devices", "owner", "group", "perms",
    "chown", "chmod", "executability", "acls", "xattrs", "super", "fake-super",
    "inplace", "append", "append-verify", "link-dest", "copy-dest", "compare-dest",
    "backup", "backup-dir", "suffix", "temp-dir",
)  # fmt: skip
"""Everything a pusher never needs: deleting, device nodes and specials, ownership, modes,
writing into files in place, and any option naming a second directory on the receiver."""


def rsyncd_config(
    modules: dict[str, Path],
    status: Path,
    secrets: Path,
    log: Path,
    allow: str | Sequence[str],
    uid: int,
) -> str:
    """rsyncd.conf: write-only modules (the model's folder, the shared blob store, the push's
    manifest), a read-only status module (the verdict), each chrooted, one user, the pushing
    Spark's addresses only (one per rail)."""
    hosts = allow if isinstance(allow, str) else " ".join(allow)
    common_lines = [
        "use chroot = yes",
        # A pushed symlink is stored as /rsyncd-munged/<target>: dead until the receiver has
        # checked that it stays inside the model's folder or the shared store (unmunge()).
        "munge symlinks = yes",
        "numeric ids = yes",
        f"uid = {uid}",
        f"gid = {uid}",
        f"auth users = {common.RSYNC_USER}",
        f"secrets file = {secrets}",
        "strict modes = yes",
        f"hosts allow = {hosts}",
        "hosts deny = *",
        "reverse lookup = no",
        "list = no",
        # Setuid/setgid and world-write bits never land, whatever a client sends.
        "incoming chmod = Du-s,Dg-s,Do-w,Fu-s,Fg-s,Fo-w,Fa-x",
        f"refuse options = {' '.join(REFUSED)}",
    ]
    lines = [
        f"log file = {log}",
        # One "recv <path> <length>" line per file, in the order files complete.
        "transfer logging = yes",
        "log format = %o %m %n %l",
        "timeout = 600",
        "max connections = 16",
        f"lock file = {log.with_suffix('.lock')}",
    ]
    for name, path in modules.items():
        lines += [
            f"[{name}]",
            f"path = {path}",
            "read only = no",
            "write only = yes",
            *common_lines,
        ]
    lines += [f"[{MODULE_STATUS}]", f"path = {status}", "read only = yes", *common_lines, ""]
    return "\n".join(lines)


def unmunge(cache: Path, repo: str) -> list[str]:
    """Turn the pushed (munged) symlinks of the model's folder into real ones where their target
    stays inside the model's folder or the shared store; remove the others. Symlinks in the
    shared store are removed (its entries are files). Returns what was removed and why."""
    base = cache / common.repo_folder(repo)
    store = cache / common.SHARED_STORE
    inside = (base.resolve(), store.resolve())

    def within(path: Path) -> bool:
        return any(path == r or r in path.parents for r in inside)

    removed: list[str] = []
    kept: list[Path] = []
    for root, stay in ((base, True), (store, False)):
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in filenames + dirnames:
                link = Path(dirpath, name)
                if not link.is_symlink():
                    continue
                target = os.readlink(link)
                plain = target[len(MUNGED) :] if target.startswith(MUNGED) else target
                lexical = Path(os.path.normpath(link.parent.resolve() / plain))
                if stay and not os.path.isabs(plain) and within(lexical):
                    if plain != target:
                        tmp = link.with_name(f".{link.name}.unmunge")
                        tmp.unlink(missing_ok=True)
                        os.symlink(plain, tmp)
                        os.replace(tmp, link)
                    kept.append(link)
                else:
                    link.unlink()
                    removed.append(f"{link.relative_to(cache)} -> {plain}")
    # Then, every link made real: where it ends (through the others) must stay inside too.
    for link in kept:
        end = link.resolve()
        if not within(end):
            link.unlink()
            removed.append(f"{link.relative_to(cache)} -> {end}")
    return removed


def _own(paths: list[Path], uid: int) -> None:
    """Give the transfer uid the module directories and what is already in them."""
    for top in paths:
        os.chown(top, uid, uid, follow_symlinks=False)
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def present_bytes(cache: Path, repo: str) -> int:
    """Bytes of the model already on this node: its folder and the shared blobs it links."""
    base = cache / common.repo_folder(repo)
    total = common.tree_bytes(base)
    blobs = base / "blobs"
    if blobs.is_dir():
        for entry in blobs.iterdir():
            if entry.is_symlink() and entry.is_file():
                total += entry.stat().st_size
    return total


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
    relay: Relay | None = None,
) -> list[PushResult]:
    """Serve ``expect`` (repo, revision) to the pusher at ``allow`` (its address on every rail):
    one daemon per address of ``addresses`` (this Spark's rail addresses; empty: one daemon on
    every address), until a round verifies. With ``relay``, pass the model on to the next Spark
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
    for flag, hosts in (("--allow", allow), ("--address", addresses)):
        for host in hosts:
            if not common.HOST_RE.match(host):
                raise common.StepError(f"{flag} {host!r} is not an address")
    if shutil.which("rsync") is None:
        raise common.StepError("rsync is not installed in this image")
    env = _relay_env(relay) if relay is not None else {}
    if os.geteuid() != 0:
        raise common.StepError(
            "receive runs as root (chroot, then every transfer as uid "
            f"{TRANSFER_UID}); it runs as uid {os.geteuid()}"
        )
    repo, revision = expect
    have = present_bytes(cache, repo) if cache.is_dir() else 0
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
            _own([base, store, meta], TRANSFER_UID)
            secrets = Path(tmp, "rsyncd.secrets")
            fd = os.open(secrets, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
            modules = {MODULE_MODEL: base, MODULE_SHARED: store, MODULE_META: meta}
            daemons: list[subprocess.Popen[bytes]] = []
            logs = [Path(tmp, f"rsyncd-{rail}.log") for rail in range(max(1, len(addresses)))]
            start = time.monotonic()
            relayer = (
                None
                if relay is None
                else _Relayer(relay, (base, store), logs, env, began + timeout, interval)
            )
            try:
                # One daemon per rail address (rsync binds one address, or all); they share the
                # modules, each writes its own log.
                for rail, address in enumerate(addresses or [None]):
                    log = logs[rail]
                    conf = Path(tmp, f"rsyncd-{rail}.conf")
                    conf.write_text(
                        rsyncd_config(modules, status, secrets, log, allow, TRANSFER_UID),
                        encoding="utf-8",
                    )
                    cmd = ["rsync", "--daemon", "--no-detach", f"--config={conf}", f"--port={port}"]
                    if address:
                        cmd.append(f"--address={address}")
                    common.say(
                        "receive",
                        f"rsync daemon on {address or '*'}:{port} for {', '.join(allow)} only: "
                        f"modules {MODULE_MODEL} -> {base}, {MODULE_SHARED} -> {store}",
                    )
                    daemons.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL))
                if relayer is not None:
                    relayer.start()
                _serve(cache, repo, revision, daemons, meta, status, logs, start, left, interval)
            finally:
                if relayer is not None:
                    relayer.halt()
                for daemon in daemons:
                    _stop(daemon)
        common.say("receive", f"done after {time.monotonic() - start:.0f} s; daemons stopped")
        if relay is None or relayer is None:
            return []
        # The next Spark's final round: what the relay has not sent, the manifest, the verdict.
        results = push(
            cache, repo, revision, [[host] for host in relay.hosts], relay.port,
            relay.password_file, relay.bwlimit, max(1.0, began + timeout - time.monotonic()),
            interval, sources=relay.sources,
        )  # fmt: skip
        return [relayer.merged(result) for result in results]


RELAY_TICK_S = 0.25
"""How often a relaying receiver looks for files that have arrived whole (its daemons' logs
and a ``stat`` per new file: cheap, and the last files of a copy reach the next Spark while
this one verifies)."""


@dataclass(frozen=True)
class Relay:
    """Where a receiver in a chain passes the model on: the next Spark's address on every rail
    (rail order), its receiver's port, and the file holding the password its daemon takes."""

    hosts: tuple[str, ...]
    port: int
    password_file: Path
    sources: tuple[str, ...] = ()
    """This Spark's own address on every rail: each rail's streams leave from it (the next
    Spark's daemon allows this Spark's addresses only)."""
    bwlimit: int | None = None


def _relay_env(relay: Relay) -> dict[str, str]:
    """The relay's rsync environment, after checking its addresses and password file."""
    if not relay.hosts:
        raise common.StepError("--relay-to names no host")
    for host in (*relay.hosts, *relay.sources):
        if not common.HOST_RE.match(host):
            raise common.StepError(f"--relay-to {host!r} is not a host name or address")
    if relay.sources and len(relay.sources) < len(relay.hosts):
        raise common.StepError(
            f"the relay uses {len(relay.hosts)} rail(s) but this receiver listens on "
            f"{len(relay.sources)} address(es): give one --address per rail"
        )
    password = _read_password(relay.password_file, "--relay-password-file")
    os.environ["RSYNC_PASSWORD"] = password  # only so that redact() knows it
    return {**os.environ, "RSYNC_PASSWORD": password, "LC_ALL": "C"}


def _read_password(path: Path, flag: str) -> str:
    try:
        password = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise common.StepError(f"cannot read {flag} {path}: {exc.strerror}") from None
    if not password:
        raise common.StepError(f"{flag} {path} is empty")
    return password


class _Relayer(threading.Thread):
    """Pass every file the daemons have received whole on to the next Spark, while the copy
    from upstream goes on: every :data:`RELAY_TICK_S`, the files the daemons' logs name as
    received (one ``recv <module> <path> <length>`` line each) that now lie under their final
    name with that length, split across the rails like a push. Only regular files inside the
    model's folder or the shared store, reached through no symlink, are sent (a pusher cannot
    make the relay read anything else); the next Spark verifies every file against the
    manifest the final push brings, so a relayed file that was still bad is sent again then."""

    def __init__(
        self,
        relay: Relay,
        roots: tuple[Path, Path],
        logs: Sequence[Path],
        env: dict[str, str],
        deadline: float,
        interval: float,
    ) -> None:
        super().__init__(name=f"relay-{relay.hosts[0]}", daemon=True)
        self.relay = relay
        self.roots = {MODULE_MODEL: roots[0], MODULE_SHARED: roots[1]}
        self.offsets = {log: 0 for log in logs}
        self.env = env
        self.deadline = deadline
        self.interval = interval
        self.pending: dict[tuple[str, str], int] = {}
        self.stopping = threading.Event()
        self.result = PushResult(
            relay.hosts[0], per_rail={r: RailCopy() for r in range(len(relay.hosts))}
        )
        self.began = 0.0
        self.files = 0

    def run(self) -> None:
        self.began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="sparkrack-relay-") as tmp:
            while not self.stopping.is_set():
                self._read_logs()
                ready = self._ready()
                if ready:
                    common.say(
                        "receive",
                        f"relay to {self.relay.hosts[0]}: sending {len(ready)} file(s) "
                        f"after {time.monotonic() - self.began:.1f} s",
                    )
                if ready and not self._send(ready, Path(tmp)):
                    return
                self.stopping.wait(RELAY_TICK_S)

    def halt(self) -> None:
        """Stop after the batch under way (the final push sends the rest)."""
        self.stopping.set()
        if self.is_alive():
            self.join()
        common.say(
            "receive",
            f"relay to {self.relay.hosts[0]}: {self.files} files passed on while receiving; "
            f"stopped after {time.monotonic() - self.began:.1f} s",
        )

    def _read_logs(self) -> None:
        for log, offset in self.offsets.items():
            try:
                with log.open("rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:
                continue
            cut = data.rfind(b"\n") + 1
            self.offsets[log] = offset + cut
            for line in data[:cut].decode(errors="replace").splitlines():
                words = line.split()
                if "recv" not in words or len(words) < words.index("recv") + 4:
                    continue
                at = words.index("recv")
                module, path, length = words[at + 1 : at + 4]
                if module in self.roots and length.isdigit():
                    self.pending[(module, path)] = int(length)

    def _ready(self) -> list[tuple[str, str]]:
        """The pending files now whole under their final names (the others wait)."""
        ready = []
        for (module, path), length in list(self.pending.items()):
            root = self.roots[module]
            full = root / path
            if _plain_file(root, path) is None:
                del self.pending[(module, path)]  # never relayed: not a plain file inside
                continue
            if not _whole(full, length):
                continue
            del self.pending[(module, path)]
            ready.append((module, path))
        return ready

    def _send(self, ready: list[tuple[str, str]], work: Path) -> bool:
        listing = Listing(
            tuple(sorted(p for m, p in ready if m == MODULE_MODEL)),
            tuple(sorted(p for m, p in ready if m == MODULE_SHARED)),
        )
        rails = len(self.relay.hosts)
        base = ["rsync", *RSYNC_COPY_OPTIONS]
        if self.relay.bwlimit:
            base.append(f"--bwlimit={self.relay.bwlimit}")
        folder, store = self.roots[MODULE_MODEL], self.roots[MODULE_SHARED]
        errors: dict[int, common.StepError] = {}

        def rail_work(rail: int, part: Listing) -> None:
            began = time.monotonic()
            stats: dict[str, int] = {}
            url = (
                f"rsync://{common.RSYNC_USER}@{_bracket(self.relay.hosts[rail])}:{self.relay.port}"
            )
            error = _push_rail(
                self.relay.hosts[0], rail, rails > 1, part, (folder, store), url,
                [*base, *_bind(self.relay.sources, rail)], work, self.env, self.deadline,
                self.interval, stats,
            )  # fmt: skip
            copy = self.result.per_rail[rail]
            copy.files += len(part.model) + len(part.shared)
            copy.sent_bytes += stats.get("Total bytes sent", 0)
            copy.literal_bytes += stats.get("Literal data", 0)
            copy.seconds += time.monotonic() - began
            if error is not None:
                errors[rail] = error

        threads = [
            threading.Thread(target=rail_work, args=(r, part), name=f"relay-rail{r}")
            for r, part in enumerate(split_by_rail(listing, folder, store, rails))
            if part.model or part.shared
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.files += len(ready)
        if errors:
            common.say(
                "receive",
                f"relay to {self.relay.hosts[0]} stopped ({errors[min(errors)]}); "
                "the final push sends the rest",
            )
            return False
        common.say(
            "receive",
            f"relay to {self.relay.hosts[0]}: {len(ready)} file(s) passed on ({self.files} so "
            f"far) after {time.monotonic() - self.began:.1f} s",
        )
        return True

    def merged(self, final: PushResult) -> PushResult:
        """The hop's result: what each rail carried while relaying and in the final push, and
        the final push's wait for the next Spark's verdict (its ``seconds`` beyond its streams)."""
        out = PushResult(
            final.host, stats=dict(final.stats), error=final.error, rounds=final.rounds
        )
        for rail in sorted(set(self.result.per_rail) | set(final.per_rail)):
            mine, theirs = (
                self.result.per_rail.get(rail, RailCopy()),
                final.per_rail.get(rail, RailCopy()),
            )
            out.per_rail[rail] = RailCopy(
                mine.sent_bytes + theirs.sent_bytes,
                mine.literal_bytes + theirs.literal_bytes,
                mine.files + theirs.files,
                mine.seconds + theirs.seconds,
            )
        _add(out.stats, self.result.stats)
        streams = max((c.seconds for c in final.per_rail.values()), default=0.0)
        out.seconds = max(c.seconds for c in out.per_rail.values()) + max(
            0.0, final.seconds - streams
        )
        return out


def _plain_file(root: Path, path: str) -> Path | None:
    """``root / path`` when it is a regular file reached through no symlink and ``path`` is
    relative without ``..``; else None."""
    rel = Path(path)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        return None
    here = root
    for part in rel.parts:
        here = here / part
        try:
            st = here.lstat()
        except OSError:
            return here if here == root / rel else None  # not there yet: wait for it
        if stat.S_ISLNK(st.st_mode):
            return None
    return here if stat.S_ISREG(here.lstat().st_mode) else None


def _whole(full: Path, length: int) -> bool:
    """The file lies under its final name with the logged length, and rsync holds no temporary
    file of it any more (rsync logs a file just before renaming it into place)."""
    try:
        st = full.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != length:
        return False
    prefix = f".{full.name}."
    try:
        return not any(name.startswith(prefix) for name in os.listdir(full.parent))
    except OSError:
        return False


def _bind(sources: Sequence[str], rail: int) -> list[str]:
    """rsync's ``--address``: a rail's streams leave from this Spark's address on that rail."""
    return [f"--address={sources[rail]}"] if rail < len(sources) else []


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


ROUND_FILE = "round"
MANIFEST_FILE = "manifest.json"
VERDICT_FILE = "verdict.json"


def _state(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


def _serve(
    cache: Path,
    repo: str,
    revision: str,
    daemons: Sequence[subprocess.Popen[bytes]],
    meta: Path,
    status: Path,
    logs: Sequence[Path],
    start: float,
    timeout: float,
    interval: float,
) -> None:
    """Serve until a round's files verify: per round (the pusher's ``meta/round``), check the
    pushed files against the pushed manifest (every file the first time, the bad ones after),
    answer in ``status/verdict.json``; when nothing is bad write manifest and marker."""
    last = start
    tail = _LogTail(logs)
    seen = _state(meta / ROUND_FILE)
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
        state = _state(meta / ROUND_FILE)
        if state is not None and state != seen:
            seen = state
            _drain(daemons, 60.0)
            tail.echo()
            tail.sent.clear()  # from here on, a "send verdict.json" is this round's
            bad, raw, snap = _check_round(cache, repo, revision, meta, bad)
            round_ = (meta / ROUND_FILE).read_text(encoding="utf-8").strip()
            verdict = {"round": round_, "bad": sorted(bad)}
            common.write_atomic(status / VERDICT_FILE, json.dumps(verdict).encode())
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
                f"({common.gb(present_bytes(cache, repo))} of {repo} here)",
                common.EXIT_TIMEOUT,
            )
        if now - last >= interval:
            last = now
            common.say(
                "receive",
                f"{common.gb(present_bytes(cache, repo))} of {repo} here after {now - start:.0f} s",
            )
        time.sleep(0.2)


def _check_round(
    cache: Path, repo: str, revision: str, meta: Path, bad: dict[str, str]
) -> tuple[dict[str, str], bytes, common.Snapshot | None]:
    """(bad files, manifest bytes, snapshot) of one round: links checked, files verified."""
    raw = (meta / MANIFEST_FILE).read_bytes() if (meta / MANIFEST_FILE).is_file() else b""
    files = common.read_manifest(raw, "the pushed manifest")
    doc = json.loads(raw)
    if (doc.get("repo"), doc.get("revision")) != (repo, revision):
        raise common.StepError(
            f"the pushed manifest is of {doc.get('repo')}@{doc.get('revision')}, "
            f"this receiver takes {repo}@{revision}"
        )
    commit = str(doc.get("commit", ""))
    for removed in unmunge(cache, repo):
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
        if VERDICT_FILE in tail.sent:
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
class RailCopy:
    """What one rail carried to one peer over all rounds."""

    sent_bytes: int = 0
    """Bytes rsync put on the wire on this rail (its ``Total bytes sent``)."""
    literal_bytes: int = 0
    """File data sent as literal data (the rest was matched against partial files)."""
    files: int = 0
    """Paths this rail was given (the snapshot's entries and blobs, split by bytes)."""
    seconds: float = 0.0
    """Wall time of this rail's streams, summed over the rounds."""


@dataclass
class PushResult:
    host: str
    """The peer, by its address on the first rail."""
    seconds: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)
    error: common.StepError | None = None
    rounds: int = 0
    per_rail: dict[int, RailCopy] = field(default_factory=dict)
    """Rail index (position in the address plan's ``fabric.rails``) -> what it carried."""


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
                counted = _STAT_RE.match(line.strip())
                if counted:
                    stats[counted.group(1)] = int(counted.group(2).replace(",", ""))
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


PUSH_ROUNDS = 3
"""Rounds per peer: the copy, then the files the peer found bad, sent again."""
VERDICT_WAIT_S = 600.0
"""Bound on one round's verification on the peer (sha256 of the whole model: minutes)."""


@dataclass(frozen=True)
class Listing:
    """What one round sends to a peer: paths per module (relative to the module's folder)."""

    model: tuple[str, ...]
    shared: tuple[str, ...]


def round_listing(snap: common.Snapshot, names: set[str] | None, cache: Path) -> Listing:
    """Every path of the snapshot (``names`` None), or only those behind the snapshot's files
    ``names``: the snapshot entry, the repo blob (a link in hub 1.x) and the bytes."""
    if names is None:
        return Listing(snap.model_paths, snap.shared_paths)
    folder = common.repo_folder(snap.repo)
    blobs = dict(snap.contents)
    wanted: set[str] = set()
    snapdir = cache / folder / "snapshots" / snap.commit
    for name in names:
        if name.startswith("refs/"):
            wanted.add(f"{folder}/{name}")
            continue
        entry = snapdir / name
        wanted.add(str(entry.relative_to(cache)))
        if name in blobs:
            wanted.add(blobs[name])
        here = entry
        for _ in range(4):
            if not here.is_symlink():
                break
            here = Path(os.path.normpath(here.parent / os.readlink(here)))
            if here.is_symlink():
                wanted.add(str(here.relative_to(cache)))
    keep = [p for p in snap.paths if p in wanted]
    part = common.Snapshot(snap.repo, snap.revision, snap.commit, tuple(keep), 0, 0)
    return Listing(part.model_paths, part.shared_paths)


def split_by_rail(listing: Listing, folder: Path, store: Path, rails: int) -> list[Listing]:
    """``listing`` split into ``rails`` parts of about equal bytes (largest file first, each to
    the rail with the fewest bytes so far). Deterministic, so an interrupted copy's rerun sends a
    file on the same rail again (its partial file is found either way: it lies in the peer's
    ``.rsync-partial/`` beside the file)."""
    items = [(MODULE_MODEL, p, _size(folder / p)) for p in listing.model]
    items += [(MODULE_SHARED, p, _size(store / p)) for p in listing.shared]
    items.sort(key=lambda item: (-item[2], item[0], item[1]))
    load = [0] * rails
    parts: list[dict[str, list[str]]] = [
        {MODULE_MODEL: [], MODULE_SHARED: []} for _ in range(rails)
    ]
    for module, path, size in items:
        rail = min(range(rails), key=lambda r: (load[r], r))
        load[rail] += size
        parts[rail][module].append(path)
    return [
        Listing(tuple(sorted(part[MODULE_MODEL])), tuple(sorted(part[MODULE_SHARED])))
        for part in parts
    ]


def _size(path: Path) -> int:
    """Bytes of a file to send (a symlink is sent as a link: nothing)."""
    try:
        st = path.lstat()
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


_Outcome = dict[int, tuple[dict[str, int], common.StepError | None]]
"""Per rail: rsync's ``--stats`` summed, and the error that stopped it (None: done)."""


def _push_rail(
    host: str,
    rail: int,
    several: bool,
    part: Listing,
    sources: tuple[Path, Path],
    url: str,
    opts: list[str],
    work: Path,
    env: dict[str, str],
    deadline: float,
    interval: float,
    stats: dict[str, int],
) -> common.StepError | None:
    """One rail's stream to one peer: its part of the model's folder, then of the shared store
    (``sources``), adding rsync's ``--stats`` to ``stats``."""
    folder, store = sources
    for what, src, module, paths in (
        ("snapshot", folder, MODULE_MODEL, part.model),
        ("shared blobs", store, MODULE_SHARED, part.shared),
    ):
        if not paths:
            continue
        lst = work / f"{module}-{rail}.list"
        lst.write_text("\n".join(paths) + "\n", encoding="utf-8")
        cmd = [*opts, f"--files-from={lst}", f"{src}/", f"{url}/{module}/"]
        label = f"{what} rail {rail}" if several else what
        error = _run_retrying(host, label, cmd, env, deadline, interval, stats)
        if error is not None:
            return error
    return None


def _push_one(
    hosts: Sequence[str],
    cache: Path,
    port: int,
    snap: common.Snapshot,
    manifest: Path,
    env: dict[str, str],
    bwlimit: int | None,
    deadline: float,
    interval: float,
    sources: Sequence[str] = (),
) -> PushResult:
    """Push ``snap`` to one peer, ``hosts`` its address on every rail (rail order): each round's
    files split across the rails, one rsync stream per rail at once; the manifest, the round and
    the verdict over the first rail once every rail is done (from ``sources[r]`` on rail r where
    given)."""
    host = hosts[0]
    result = PushResult(host, per_rail={r: RailCopy() for r in range(len(hosts))})
    start = time.monotonic()
    urls = [f"rsync://{common.RSYNC_USER}@{_bracket(h)}:{port}" for h in hosts]
    url = urls[0]
    opts = ["rsync", *RSYNC_COPY_OPTIONS]
    if bwlimit:
        opts.append(f"--bwlimit={bwlimit}")
    base = [*opts, *_bind(sources, 0)]
    folder = cache / common.repo_folder(snap.repo)
    store = cache / common.SHARED_STORE
    names: set[str] | None = None
    with tempfile.TemporaryDirectory(prefix=f"sparkrack-push-{host}-") as tmp:
        work = Path(tmp)
        for round_ in range(1, PUSH_ROUNDS + 1):
            listing = round_listing(snap, names, cache)
            again = [] if names is None else ["-I"]  # a file found bad is sent whatever its times
            (work / ROUND_FILE).write_text(f"{round_}\n", encoding="utf-8")
            outcome: _Outcome = {}

            def rail_work(rail: int, part: Listing, opts: list[str], outcome: _Outcome) -> None:
                began = time.monotonic()
                stats: dict[str, int] = {}
                error = _push_rail(
                    host, rail, len(hosts) > 1, part, (folder, store), urls[rail], opts, work,
                    env, deadline, interval, stats,
                )  # fmt: skip
                copy = result.per_rail[rail]
                copy.files += len(part.model) + len(part.shared)
                copy.sent_bytes += stats.get("Total bytes sent", 0)
                copy.literal_bytes += stats.get("Literal data", 0)
                copy.seconds += time.monotonic() - began
                outcome[rail] = (stats, error)

            threads = [
                threading.Thread(
                    target=rail_work,
                    args=(r, part, [*opts, *_bind(sources, r), *again], outcome),
                    name=f"push-{host}-rail{r}",
                )
                for r, part in enumerate(split_by_rail(listing, folder, store, len(hosts)))
                if part.model or part.shared
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for stats, _error in outcome.values():
                _add(result.stats, stats)
            errors = {r: e for r, (_s, e) in outcome.items() if e is not None}
            if errors:
                result.error = errors[min(errors)]
                return result
            for what, cmd in (
                ("manifest", [*base, "-I", str(manifest), f"{url}/{MODULE_META}/{MANIFEST_FILE}"]),
                (
                    "round",
                    [*base, "-I", str(work / ROUND_FILE), f"{url}/{MODULE_META}/{ROUND_FILE}"],
                ),
            ):
                error = _run_retrying(host, what, cmd, env, deadline, interval, result.stats)
                if error is not None:
                    result.error = error
                    return result
            verdict = _verdict(host, url, base, env, work, str(round_), deadline)
            if isinstance(verdict, common.StepError):
                result.error = verdict
                return result
            if not verdict:
                result.seconds = time.monotonic() - start
                result.rounds = round_
                return result
            common.say(
                "push", f"{host}: round {round_}: the peer found {len(verdict)} bad: "
                + ", ".join(verdict[:5]) + "; sending those again",
            )  # fmt: skip
            names = set(verdict)
    result.error = common.StepError(
        f"{host}: files still bad after {PUSH_ROUNDS} rounds: {', '.join(sorted(names or []))}"
    )
    return result


def _add(total: dict[str, int], stats: dict[str, int]) -> None:
    for key, value in stats.items():
        total[key] = total.get(key, 0) + value


def _run_retrying(
    host: str,
    what: str,
    cmd: list[str],
    env: dict[str, str],
    deadline: float,
    interval: float,
    totals: dict[str, int],
) -> common.StepError | None:
    """Run one rsync until it succeeds (a retry resumes), adding its ``--stats`` to ``totals``."""
    attempt = 0
    while True:
        attempt += 1
        left = deadline - time.monotonic()
        if left <= 0:
            return common.StepError(
                f"{host}: {what} not pushed within the timeout ({attempt - 1} attempts)",
                common.EXIT_TIMEOUT,
            )
        code, stats, message = _rsync(cmd, env, f"{host} {what}", interval, left)
        if code == 0:
            _add(totals, stats)
            return None
        if code in common.RSYNC_RETRY and deadline - time.monotonic() > common.RETRY_PAUSE_S:
            common.say("push", f"{host}: rsync exit {code} ({message}); retrying (resumes)")
            time.sleep(common.RETRY_PAUSE_S)
            continue
        if code == common.TIMED_OUT:
            return common.StepError(f"{host}: {what} push {message}", common.EXIT_TIMEOUT)
        return common.StepError(f"{host}: rsync of the {what} exited {code}: {message}")


def _verdict(
    host: str,
    url: str,
    base: list[str],
    env: dict[str, str],
    work: Path,
    round_: str,
    deadline: float,
) -> list[str] | common.StepError:
    """The peer's verdict on ``round_``: the files it found bad (empty: all verified)."""
    local = work / VERDICT_FILE
    until = min(deadline, time.monotonic() + VERDICT_WAIT_S)
    quiet = [a for a in base if not a.startswith("--info") and a != "--stats"]
    while time.monotonic() < until:
        local.unlink(missing_ok=True)
        got = subprocess.run(
            [*quiet, "-q", f"{url}/{MODULE_STATUS}/{VERDICT_FILE}", str(local)],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if got.returncode == 0 and local.is_file():
            try:
                data = json.loads(local.read_text(encoding="utf-8"))
            except ValueError:
                data = {}
            if str(data.get("round")) == round_:
                bad = data.get("bad")
                return [str(b) for b in bad] if isinstance(bad, list) else []
        time.sleep(0.5)
    return common.StepError(
        f"{host}: no verdict on round {round_} from the peer", common.EXIT_TIMEOUT
    )


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


RAIL_SUMMARY = "copy per rail"
"""The push's last progress lines start with this: one per rail (bytes, seconds, rate) for a
person, then ``copy per rail json: {...}`` (:func:`rail_summary`) for the serve play's timeline."""


def rail_summary(results: Sequence[PushResult]) -> dict[int, RailCopy]:
    """Per rail over every peer: bytes and files summed, seconds the slowest peer's."""
    out: dict[int, RailCopy] = {}
    for result in results:
        for rail, copy in result.per_rail.items():
            total = out.setdefault(rail, RailCopy())
            total.sent_bytes += copy.sent_bytes
            total.literal_bytes += copy.literal_bytes
            total.files += copy.files
            total.seconds = max(total.seconds, copy.seconds)
    return dict(sorted(out.items()))


def _say_rails(results: Sequence[PushResult], seconds: float) -> None:
    summary = rail_summary(results)
    for rail, copy in summary.items():
        rate = copy.sent_bytes / copy.seconds / 1e6 if copy.seconds else 0.0
        common.say(
            "push",
            f"{RAIL_SUMMARY}: rail {rail}: {common.gb(copy.sent_bytes)} to {len(results)} "
            f"peer(s) in {copy.seconds:.1f} s ({rate:.1f} MB/s)",
        )
    total = sum(c.sent_bytes for c in summary.values())
    doc = {
        "seconds": round(seconds, 3),
        "sent_bytes": total,
        "rails": {
            str(r): {**asdict(c), "seconds": round(c.seconds, 3)} for r, c in summary.items()
        },
    }
    common.say("push", f"{RAIL_SUMMARY} json: {json.dumps(doc, sort_keys=True)}")


def push(
    cache: Path,
    repo: str,
    revision: str,
    rails: Sequence[Sequence[str]],
    port: int,
    password_file: Path,
    bwlimit: int | None,
    timeout: float,
    interval: float,
    sources: Sequence[str] = (),
) -> list[PushResult]:
    """Push the snapshot to every peer at once; ``rails[r][p]`` is peer p's address on rail r
    (the address plan's ``fabric.rails`` order). One rsync stream per rail per peer, leaving
    from ``sources[r]`` where given (a relaying receiver: the next daemon allows those only)."""
    if not rails or not rails[0]:
        raise common.StepError("--to names no host")
    if any(len(hosts) != len(rails[0]) for hosts in rails):
        raise common.StepError(
            "every --to (one per rail) must name the same peers in the same order: "
            + " / ".join(",".join(hosts) for hosts in rails)
        )
    for hosts in rails:
        for host in hosts:
            if not common.HOST_RE.match(host):
                raise common.StepError(f"--to {host!r} is not a host name or address")
    peers = [tuple(hosts[p] for hosts in rails) for p in range(len(rails[0]))]
    ok, why = common.check_marker(cache, repo, revision)
    if not ok:
        raise common.StepError(f"{why}: the snapshot is not complete here (download first)")
    password = _read_password(password_file, "--password-file")
    snap = common.find_snapshot(cache, repo, revision)
    manifest = cache / common.manifest_relpath(repo, revision)
    if shutil.which("rsync") is None:
        raise common.StepError("rsync is not installed in this image")
    env = {**os.environ, "RSYNC_PASSWORD": password, "LC_ALL": "C"}
    os.environ["RSYNC_PASSWORD"] = password  # only so that redact() knows it
    common.say(
        "push",
        f"{repo}@{revision}: {snap.files} files, {common.gb(snap.bytes)} to "
        f"{', '.join('/'.join(peer) for peer in peers)} port {port}, in parallel, "
        f"{len(rails)} rail(s) per peer",
    )
    start = time.monotonic()
    deadline = start + timeout
    results: list[PushResult] = []
    threads = []
    for peer in peers:

        def work(hosts: tuple[str, ...] = peer) -> None:
            results.append(
                _push_one(
                    hosts, cache, port, snap, manifest, env, bwlimit, deadline, interval, sources
                )
            )

        thread = threading.Thread(target=work, name=f"push-{peer[0]}")
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    failed = [r for r in results if r.error is not None]
    for r in results:
        if r.error is None:
            common.say(
                "push",
                f"{r.host}: verified by the peer in {r.seconds:.1f} s, {r.rounds} round(s); "
                f"literal {r.stats.get('Literal data', 0)} bytes, matched "
                f"{r.stats.get('Matched data', 0)} bytes",
            )
    _say_rails(results, time.monotonic() - start)
    if failed:
        code = (
            common.EXIT_TIMEOUT
            if all(r.error and r.error.code == common.EXIT_TIMEOUT for r in failed)
            else 1
        )
        raise common.StepError("; ".join(str(r.error) for r in failed), code)
    return results
