"""The pushing side of a copy between Sparks (STDLIB ONLY, plus the rsync binary): ``push``
rsyncs a snapshot to its peers' daemons (``fetch_receive.py``), one stream per rail per peer (the
files split across the rails, balanced by bytes), resumable, in rounds until the peer's verdict
finds nothing bad, the marker last.

Two shapes: a fan-out (the head pushes to every peer at once) or a chain (the head pushes to the
first peer only; each receiver relays to the next, ``fetch_relay.py``).

Shipped verbatim beside ``fetch_step.py`` (the entry point) and the other ``fetch_*.py``.
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
    from . import fetch_daemon as rsyncd
else:  # run in a pod: the switch ConfigMap's files sit side by side
    import fetch_base as common  # type: ignore[import-not-found, no-redef]
    import fetch_daemon as rsyncd  # type: ignore[import-not-found, no-redef]


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
    items = [(rsyncd.MODULE_MODEL, p, _size(folder / p)) for p in listing.model]
    items += [(rsyncd.MODULE_SHARED, p, _size(store / p)) for p in listing.shared]
    items.sort(key=lambda item: (-item[2], item[0], item[1]))
    load = [0] * rails
    parts: list[dict[str, list[str]]] = [
        {rsyncd.MODULE_MODEL: [], rsyncd.MODULE_SHARED: []} for _ in range(rails)
    ]
    for module, path, size in items:
        rail = min(range(rails), key=lambda r: (load[r], r))
        load[rail] += size
        parts[rail][module].append(path)
    return [
        Listing(tuple(sorted(part[rsyncd.MODULE_MODEL])), tuple(sorted(part[rsyncd.MODULE_SHARED])))
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


def push_rail(
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
        ("snapshot", folder, rsyncd.MODULE_MODEL, part.model),
        ("shared blobs", store, rsyncd.MODULE_SHARED, part.shared),
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
    urls = [f"rsync://{common.RSYNC_USER}@{bracket(h)}:{port}" for h in hosts]
    url = urls[0]
    opts = ["rsync", *RSYNC_COPY_OPTIONS]
    if bwlimit:
        opts.append(f"--bwlimit={bwlimit}")
    base = [*opts, *bind(sources, 0)]
    folder = cache / common.repo_folder(snap.repo)
    store = cache / common.SHARED_STORE
    names: set[str] | None = None
    with tempfile.TemporaryDirectory(prefix=f"sparkrack-push-{host}-") as tmp:
        work = Path(tmp)
        for round_ in range(1, PUSH_ROUNDS + 1):
            listing = round_listing(snap, names, cache)
            again = [] if names is None else ["-I"]  # a file found bad is sent whatever its times
            (work / rsyncd.ROUND_FILE).write_text(f"{round_}\n", encoding="utf-8")
            outcome: _Outcome = {}

            def rail_work(rail: int, part: Listing, opts: list[str], outcome: _Outcome) -> None:
                began = time.monotonic()
                stats: dict[str, int] = {}
                error = push_rail(
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
                    args=(r, part, [*opts, *bind(sources, r), *again], outcome),
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
                add_stats(result.stats, stats)
            errors = {r: e for r, (_s, e) in outcome.items() if e is not None}
            if errors:
                result.error = errors[min(errors)]
                return result
            for what, cmd in (
                (
                    "manifest",
                    [
                        *base,
                        "-I",
                        str(manifest),
                        f"{url}/{rsyncd.MODULE_META}/{rsyncd.MANIFEST_FILE}",
                    ],
                ),
                (
                    "round",
                    [
                        *base,
                        "-I",
                        str(work / rsyncd.ROUND_FILE),
                        f"{url}/{rsyncd.MODULE_META}/{rsyncd.ROUND_FILE}",
                    ],
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


def add_stats(total: dict[str, int], stats: dict[str, int]) -> None:
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
            add_stats(totals, stats)
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
    local = work / rsyncd.VERDICT_FILE
    until = min(deadline, time.monotonic() + VERDICT_WAIT_S)
    quiet = [a for a in base if not a.startswith("--info") and a != "--stats"]
    while time.monotonic() < until:
        local.unlink(missing_ok=True)
        got = subprocess.run(
            [*quiet, "-q", f"{url}/{rsyncd.MODULE_STATUS}/{rsyncd.VERDICT_FILE}", str(local)],
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


def bracket(host: str) -> str:
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
    password = read_password(password_file, "--password-file")
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


def read_password(path: Path, flag: str) -> str:
    try:
        password = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise common.StepError(f"cannot read {flag} {path}: {exc.strerror}") from None
    if not password:
        raise common.StepError(f"{flag} {path} is empty")
    return password


def bind(sources: Sequence[str], rail: int) -> list[str]:
    """rsync's ``--address``: a rail's streams leave from this Spark's address on that rail."""
    return [f"--address={sources[rail]}"] if rail < len(sources) else []
