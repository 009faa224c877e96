#!/usr/bin/env python3
"""The fetch step of a model switch: download once, copy over the fabric, mark, wait (STDLIB ONLY).

Shipped verbatim to pods (ConfigMap) and run there as ``python3 fetch_step.py SUBCOMMAND ...``
in an image that has python3, rsync and huggingface_hub; sparkrack itself is not installed there,
so these files import nothing but the standard library (huggingface_hub only inside
``download``). This is the entry point; ``fetch_base.py`` (names, snapshots, the marker, waits)
and ``fetch_rsync.py`` (``receive``, ``push``) are shipped beside it.

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

Exit status: 0 success, 1 refused or failed, 2 bad arguments, 3 timed out.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

if __package__:  # imported as sparkrack.serving.scripts.* (the renderer and the tests)
    from . import fetch_base as common
    from . import fetch_rsync as copy
else:  # run in a pod: the switch ConfigMap's files sit side by side
    import fetch_base as common  # type: ignore[import-not-found, no-redef]
    import fetch_rsync as copy  # type: ignore[import-not-found, no-redef]


# --- download -------------------------------------------------------------------------------


def download(
    repo: str, revision: str, cache: Path, need: int, timeout: float, interval: float
) -> None:
    marker = common.marker_path(cache, repo, revision)
    done = common.read_marker(marker)
    if done is not None:
        try:
            cached = common.find_snapshot(cache, repo, revision)
        except common.StepError as problem:
            common.say("download", f"{marker} exists but {problem}: downloading again")
        else:
            if cached.bytes == done.get("bytes"):
                common.say(
                    "download",
                    f"cached: {marker} records {cached.files} files, {common.gb(cached.bytes)}"
                    " - no download",
                )
                return
            common.say(
                "download", f"{marker} records {done.get('bytes')} bytes, cache has {cached.bytes}"
            )
    common.check_space(cache, need, "download")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from huggingface_hub import snapshot_download  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise common.StepError(f"huggingface_hub is not importable in this image ({exc})") from None
    cache.mkdir(parents=True, exist_ok=True)
    outcome: dict[str, object] = {}

    def fetch() -> None:
        try:
            outcome["path"] = snapshot_download(repo, revision=revision, cache_dir=str(cache))
        except BaseException as exc:  # reported by the main thread
            outcome["error"] = exc

    common.say("download", f"downloading {repo}@{revision} into {cache} (expect {common.gb(need)})")
    start = time.monotonic()
    worker = threading.Thread(target=fetch, name="snapshot_download", daemon=True)
    worker.start()
    repo_dir = cache / common.repo_folder(repo)
    while worker.is_alive():
        worker.join(min(interval, max(0.0, start + timeout - time.monotonic())))
        elapsed = time.monotonic() - start
        if worker.is_alive() and elapsed >= timeout:
            raise common.StepError(
                f"download of {repo}@{revision} not done after {timeout:.0f} s "
                f"({common.gb(common.tree_bytes(repo_dir))} of {common.gb(need)} on disk)",
                common.EXIT_TIMEOUT,
            )
        if worker.is_alive():
            have = common.tree_bytes(repo_dir)
            pct = 100 * have / need if need else 0.0
            common.say(
                "download",
                f"{common.gb(have)} of {common.gb(need)} ({pct:.0f} %) after {elapsed:.0f} s",
            )
    if "error" in outcome:
        error = outcome["error"]
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise common.StepError(f"snapshot_download failed: {type(error).__name__}: {first}")
    snap = common.find_snapshot(cache, repo, revision)
    path = common.write_marker(cache, snap)
    common.say(
        "download",
        f"done in {time.monotonic() - start:.0f} s: {snap.files} files, {common.gb(snap.bytes)} "
        f"(commit {snap.commit}); marker {path}",
    )


def mark(repo: str, revision: str, cache: Path) -> None:
    snap = common.find_snapshot(cache, repo, revision)
    path = common.write_marker(cache, snap)
    common.say(
        "mark", f"{repo}@{revision}: {snap.files} files, {common.gb(snap.bytes)}; marker {path}"
    )


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

    def bounded(p: argparse.ArgumentParser, step: str) -> None:
        p.add_argument(
            "--timeout",
            type=_positive_float,
            default=float(common.DEFAULT_TIMEOUT_S[step]),
            help=f"seconds before giving up (default {common.DEFAULT_TIMEOUT_S[step]})",
        )
        p.add_argument(
            "--interval",
            type=_positive_float,
            default=common.DEFAULT_INTERVAL_S,
            help="seconds between progress lines",
        )

    p = sub.add_parser("download", help="download (repo, revision) once into the cache")
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--need-bytes", required=True, type=_positive_int)
    bounded(p, "download")

    p = sub.add_parser("receive", help="serve the cache to the pusher until its marker arrives")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--need-bytes", required=True, type=_positive_int)
    p.add_argument("--port", type=_port, required=True)
    p.add_argument("--secrets-file", required=True, type=Path, help="lines user:password")
    p.add_argument("--address", help="bind the daemon to this address only (the fabric PF)")
    p.add_argument("--repo", help="with --revision: wait for this marker only")
    p.add_argument("--revision")
    bounded(p, "receive")

    p = sub.add_parser("push", help="copy the snapshot to the peers, marker last")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--to", required=True, help="HOST[,HOST...] (fabric addresses)")
    p.add_argument("--port", type=_port, required=True)
    p.add_argument("--password-file", required=True, type=Path)
    p.add_argument("--bwlimit", type=_positive_int, help="KiB/s per peer (rsync --bwlimit)")
    bounded(p, "push")

    p = sub.add_parser("mark", help="record a snapshot already in the cache as complete")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    bounded(p, "mark")

    p = sub.add_parser("wait", help="wait for the completion marker")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    bounded(p, "wait")

    p = sub.add_parser("memwait", help="wait until MemAvailable covers the footprint")
    p.add_argument("--need-gb", required=True, type=_positive_float)
    p.add_argument("--meminfo", type=Path, default=Path("/proc/meminfo"))
    bounded(p, "memwait")
    return parser


def run(args: argparse.Namespace) -> None:
    step = args.step
    if step == "download":
        download(
            common.check_repo(args.repo),
            common.check_revision(args.revision),
            args.cache,
            args.need_bytes,
            args.timeout,
            args.interval,
        )
    elif step == "receive":
        if (args.repo is None) != (args.revision is None):
            raise common.StepError("receive: give --repo and --revision together, or neither")
        expect = (
            (common.check_repo(args.repo), common.check_revision(args.revision))
            if args.repo
            else None
        )
        copy.receive(
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
            raise common.StepError("--to names no host")
        copy.push(
            args.cache,
            common.check_repo(args.repo),
            common.check_revision(args.revision),
            hosts,
            args.port,
            args.password_file,
            args.bwlimit,
            args.timeout,
            args.interval,
        )
    elif step == "mark":
        mark(common.check_repo(args.repo), common.check_revision(args.revision), args.cache)
    elif step == "wait":
        common.wait(
            args.cache,
            common.check_repo(args.repo),
            common.check_revision(args.revision),
            args.timeout,
            args.interval,
        )
    elif step == "memwait":
        common.memwait(args.need_gb, args.meminfo, args.timeout, args.interval)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except common.StepError as exc:
        print(f"[fetch {args.step}] FAILED: {common.redact(str(exc))}", file=sys.stderr, flush=True)
        return exc.code
    except KeyboardInterrupt:
        print(f"[fetch {args.step}] FAILED: interrupted", file=sys.stderr, flush=True)
        return common.EXIT_FAILED
    return common.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
