"""The relay of a chain copy (STDLIB ONLY, plus the rsync binary): a receiver with a
:class:`Relay` passes every file on to the next Spark as soon as the file has arrived whole
(:class:`Relayer`, a thread beside the daemons), split across the rails like a push; the next
Spark verifies it all once the final push brings the manifest.

Shipped verbatim beside ``fetch_step.py`` (the entry point) and the other ``fetch_*.py``.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__:  # imported as sparkrack.serving.scripts.* (the renderer and the tests)
    from . import fetch_base as common
    from . import fetch_daemon as rsyncd
    from . import fetch_push as pushing
else:  # run in a pod: the switch ConfigMap's files sit side by side
    import fetch_base as common  # type: ignore[import-not-found, no-redef]
    import fetch_daemon as rsyncd  # type: ignore[import-not-found, no-redef]
    import fetch_push as pushing  # type: ignore[import-not-found, no-redef]


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


def relay_env(relay: Relay) -> dict[str, str]:
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
    password = pushing.read_password(relay.password_file, "--relay-password-file")
    os.environ["RSYNC_PASSWORD"] = password  # only so that redact() knows it
    return {**os.environ, "RSYNC_PASSWORD": password, "LC_ALL": "C"}


class Relayer(threading.Thread):
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
        self.roots = {rsyncd.MODULE_MODEL: roots[0], rsyncd.MODULE_SHARED: roots[1]}
        self.offsets = {log: 0 for log in logs}
        self.env = env
        self.deadline = deadline
        self.interval = interval
        self.pending: dict[tuple[str, str], int] = {}
        self.stopping = threading.Event()
        self.result = pushing.PushResult(
            relay.hosts[0], per_rail={r: pushing.RailCopy() for r in range(len(relay.hosts))}
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
        listing = pushing.Listing(
            tuple(sorted(p for m, p in ready if m == rsyncd.MODULE_MODEL)),
            tuple(sorted(p for m, p in ready if m == rsyncd.MODULE_SHARED)),
        )
        rails = len(self.relay.hosts)
        base = ["rsync", *pushing.RSYNC_COPY_OPTIONS]
        if self.relay.bwlimit:
            base.append(f"--bwlimit={self.relay.bwlimit}")
        folder, store = self.roots[rsyncd.MODULE_MODEL], self.roots[rsyncd.MODULE_SHARED]
        errors: dict[int, common.StepError] = {}

        def rail_work(rail: int, part: pushing.Listing) -> None:
            began = time.monotonic()
            stats: dict[str, int] = {}
            url = f"rsync://{common.RSYNC_USER}@{pushing.bracket(self.relay.hosts[rail])}:{self.relay.port}"
            error = pushing.push_rail(
                self.relay.hosts[0], rail, rails > 1, part, (folder, store), url,
                [*base, *pushing.bind(self.relay.sources, rail)], work, self.env, self.deadline,
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
            for r, part in enumerate(pushing.split_by_rail(listing, folder, store, rails))
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

    def merged(self, final: pushing.PushResult) -> pushing.PushResult:
        """The hop's result: what each rail carried while relaying and in the final push, and
        the final push's wait for the next Spark's verdict (its ``seconds`` beyond its streams)."""
        out = pushing.PushResult(
            final.host, stats=dict(final.stats), error=final.error, rounds=final.rounds
        )
        for rail in sorted(set(self.result.per_rail) | set(final.per_rail)):
            mine, theirs = (
                self.result.per_rail.get(rail, pushing.RailCopy()),
                final.per_rail.get(rail, pushing.RailCopy()),
            )
            out.per_rail[rail] = pushing.RailCopy(
                mine.sent_bytes + theirs.sent_bytes,
                mine.literal_bytes + theirs.literal_bytes,
                mine.files + theirs.files,
                mine.seconds + theirs.seconds,
            )
        pushing.add_stats(out.stats, self.result.stats)
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
