#!/usr/bin/env python3
"""The fetch step of a model switch: download once, copy over the fabric, mark, wait (STDLIB ONLY).

Shipped verbatim to pods (ConfigMap) and run there as ``python3 fetch_step.py SUBCOMMAND ...``
in an image that has python3, rsync and huggingface_hub; sparkrack itself is not installed there,
so these files import nothing but the standard library (huggingface_hub only inside
``download``). This is the entry point; shipped beside it: ``fetch_base.py`` (names, snapshots,
the marker, waits, verify), ``fetch_daemon.py`` (the receiver's rsync daemon configuration),
``fetch_receive.py`` (``receive``), ``fetch_relay.py`` (a chain's relay) and ``fetch_push.py``
(``push``).

Subcommands (each prints progress lines, is bounded by ``--timeout``, exits 0 on success and
non-zero with one ``FAILED:`` line naming the numbers otherwise; a token is never printed):

* ``download``  on the head Spark: unless the completion marker of (repo, revision) holds
                (every byte verified), check free space, ``snapshot_download`` into the HF
                cache, write the marker; report the manifest's sha256 (``sparkrack-manifest``);
* ``receive``   on every other Spark: check free space, serve the cache through a real
                ``rsync --daemon`` (write-only modules) until a pushed round verifies against
                the manifest whose sha256 the head reported (``--manifest-sha256-file``); in a
                chain (``--relay-to``) pass each file on to the next Spark as it arrives, then
                push the model there;
* ``push``      on the head: rsync the snapshot to its peers (in parallel, one stream per
                fabric rail per peer), resumable; each peer verifies and writes its marker;
* ``mark``      record a snapshot already present in the cache as complete (what ``download``
                does after its download);
* ``wait``      init container of a serving pod: wait for the marker;
* ``memwait``   init container of a serving pod: flush the page cache, then wait until MemFree
  covers the footprint (``memsettle.py``).

Exit status: 0 success, 1 refused or failed, 2 bad arguments, 3 timed out.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__:  # imported as sparkrack.serving.scripts.* (the renderer and the tests)
    from . import fetch_base as common
    from . import fetch_push as pushing
    from . import fetch_receive as receiving
    from . import fetch_relay as relaying
else:  # run in a pod: the switch ConfigMap's files sit side by side
    import fetch_base as common  # type: ignore[import-not-found, no-redef]
    import fetch_push as pushing  # type: ignore[import-not-found, no-redef]
    import fetch_receive as receiving  # type: ignore[import-not-found, no-redef]
    import fetch_relay as relaying  # type: ignore[import-not-found, no-redef]


# --- download -------------------------------------------------------------------------------

FETCH_ROUNDS = 3
"""Downloads of (repo, revision) per run: the first, then again for the files that failed."""


def hub_manifest(repo: str, revision: str) -> tuple[str, dict[str, dict[str, object]]]:
    """(commit, files) from the Hub's own metadata: per file its size and the Hub's hash of it
    (the LFS sha256 of an LFS or Xet-backed file, the git blob id of the others, the Xet hash
    where the library reports one)."""
    try:
        from huggingface_hub import HfApi  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise common.StepError(f"huggingface_hub is not importable in this image ({exc})") from None
    try:
        api = HfApi()
        commit = api.model_info(repo, revision=revision).sha
        files: dict[str, dict[str, object]] = {}
        for listed in api.list_repo_tree(repo, revision=commit, recursive=True):
            item: Any = listed
            if not hasattr(item, "blob_id"):  # a folder
                continue
            entry: dict[str, object] = {"size": int(item.size)}
            if item.lfs is not None:
                entry["sha256"] = str(item.lfs.sha256)
            else:
                entry["git_sha1"] = str(item.blob_id)
            xet = getattr(item, "xet_hash", None)
            if xet:
                entry["xet_hash"] = str(xet)
            files[str(item.path)] = entry
    except Exception as exc:  # the library's errors vary by version; reported in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise common.StepError(
            f"cannot read the Hub's file list of {repo}@{revision}: {type(exc).__name__}: {first}"
        ) from None
    if not commit or not files:
        raise common.StepError(f"the Hub lists no files for {repo}@{revision}")
    return str(commit), files


def missing_bytes(
    cache: Path, repo: str, revision: str, files: dict[str, dict[str, object]]
) -> int:
    """Bytes of the manifest's files not yet in the cache with their size (what must still fit)."""
    try:
        have = dict(common.find_snapshot(cache, repo, revision).contents)
    except common.StepError:
        have = {}
    missing = 0
    for name, entry in files.items():
        size = int(str(entry["size"]))
        path = cache / have[name] if name in have else None
        if path is None or not path.is_file() or path.stat().st_size != size:
            missing += size
    return missing


def forget(cache: Path, snap: common.Snapshot, names: set[str]) -> None:
    """Remove the bad files of ``names`` (snapshot entry, repo blob, shared blob), so that the
    next ``snapshot_download`` fetches exactly those again."""
    base = cache / common.repo_folder(snap.repo) / "snapshots" / snap.commit
    blobs = dict(snap.contents)
    for name in names:
        entry = base / name
        if name in blobs:
            for path in (cache / blobs[name], *_hops(entry)):
                path.unlink(missing_ok=True)
        entry.unlink(missing_ok=True)


def _hops(entry: Path) -> list[Path]:
    """The links between a snapshot entry and its bytes (the repo's blobs/<etag> in hub 1.x)."""
    hops: list[Path] = []
    here = entry
    while here.is_symlink() and len(hops) < 4:
        here = Path(os.path.normpath(here.parent / os.readlink(here)))
        if here.is_symlink():
            hops.append(here)
    return hops


def download(
    repo: str, revision: str, cache: Path, need: int, timeout: float, interval: float
) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with common.node_lock(cache, repo, revision, timeout, interval, "download"):
        # A cached copy is reused only once every byte verifies (the cache is shared: another
        # deployment's download writes the same blob store); the lock keeps a co-located
        # deployment's download from changing it meanwhile.
        ok, why = common.check_marker(cache, repo, revision, content=True)
        if ok:
            common.say("download", f"cached: {why} - no download")
            common.phase("download", time.monotonic() - start, 0)
            common.report_manifest(_marked_manifest(cache, repo, revision))
            return
        if common.read_marker(common.marker_path(cache, repo, revision)) is not None:
            common.say("download", f"{why}: checking and completing the download")
            _forget_bad(cache, repo, revision)
        _download_locked(repo, revision, cache, need, start + timeout, interval)


def _marked_manifest(cache: Path, repo: str, revision: str) -> str:
    """The sha256 of the manifest beside a marker that :func:`common.check_marker` accepted."""
    return common.sha256_hex((cache / common.manifest_relpath(repo, revision)).read_bytes())


def _forget_bad(cache: Path, repo: str, revision: str) -> None:
    """Remove the files of a marked snapshot whose bytes differ from the manifest beside the
    marker or from their blob's sha256 name, so that the download fetches them again."""
    try:
        raw = (cache / common.manifest_relpath(repo, revision)).read_bytes()
        files = common.read_manifest(raw, "the marked manifest")
        snap = common.find_snapshot(cache, repo, revision)
    except (OSError, common.StepError):
        return
    bad = common.content_problems(cache, snap, files)
    for name, problem in sorted(bad.items()):
        common.say("download", f"bad: {name}: {problem}; fetching it again")
    forget(cache, snap, set(bad))


def _download_locked(
    repo: str, revision: str, cache: Path, need: int, deadline: float, interval: float
) -> None:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    commit, files = hub_manifest(repo, revision)
    manifest = common.manifest_bytes(repo, revision, commit, files)
    total = sum(int(str(e["size"])) for e in files.values())
    missing = missing_bytes(cache, repo, commit, files)
    common.say(
        "download",
        f"{repo}@{revision} is commit {commit}: {len(files)} files, {common.gb(total)} "
        f"({common.gb(total - missing)} already here); manifest sha256 {common.sha256_hex(manifest)}",
    )
    largest = max(int(str(e["size"])) for e in files.values())
    common.check_space(cache, missing, "download", common.space_margin(largest))
    try:
        from huggingface_hub import snapshot_download  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise common.StepError(f"huggingface_hub is not importable in this image ({exc})") from None
    bad: dict[str, str] = {}
    fetched, fetch_s, checked_all, verify_s = 0, 0.0, 0, 0.0
    for round_ in range(1, FETCH_ROUNDS + 1):
        began = time.monotonic()
        _snapshot_download(
            snapshot_download, repo, commit, cache, max(missing, 1), deadline, interval
        )
        fetch_s += time.monotonic() - began
        fetched += missing
        if revision != commit:  # what hub writes when asked by name: an offline load by it works
            common.write_atomic(
                cache / common.repo_folder(repo) / "refs" / revision, commit.encode()
            )
        snap = common.find_snapshot(cache, repo, commit)
        only = set(bad) or None
        began = time.monotonic()
        bad = common.verify(cache, snap, files, only=only)
        seconds = time.monotonic() - began
        names = only if only is not None else set(files)
        checked = sum(int(str(files[n]["size"])) for n in names if n in files)
        checked_all, verify_s = checked_all + checked, verify_s + seconds
        common.say(
            "download",
            f"verify (round {round_}): {len(names)} files, {common.gb(checked)} checked against "
            f"the manifest in {seconds:.1f} s; {len(bad)} bad",
        )
        if not bad:
            break
        for name, problem in sorted(bad.items()):
            common.say("download", f"bad: {name}: {problem}; fetching it again")
        forget(cache, snap, set(bad))
        missing = sum(int(str(files[n]["size"])) for n in bad if n in files)
    common.phase("download", fetch_s, fetched)
    common.phase("verify", verify_s, checked_all)
    if bad:
        raise common.StepError(
            f"{len(bad)} files still wrong after {FETCH_ROUNDS} downloads: "
            + "; ".join(f"{n}: {p}" for n, p in sorted(bad.items())[:3])
        )
    snap = common.find_snapshot(cache, repo, revision)
    path = common.write_marker(cache, snap, manifest)
    common.report_manifest(common.sha256_hex(manifest))
    common.say(
        "download",
        f"done: {snap.files} files, {common.gb(snap.bytes)} (commit {snap.commit}) verified; "
        f"marker {path}",
    )


def _snapshot_download(
    fetch_fn: Callable[..., object],
    repo: str,
    commit: str,
    cache: Path,
    need: int,
    deadline: float,
    interval: float,
) -> None:
    outcome: dict[str, object] = {}

    def fetch() -> None:
        try:
            outcome["path"] = fetch_fn(repo, revision=commit, cache_dir=str(cache))
        except BaseException as exc:  # reported by the main thread
            outcome["error"] = exc

    common.say("download", f"downloading {repo}@{commit} into {cache} ({common.gb(need)} to fetch)")
    start = time.monotonic()
    worker = threading.Thread(target=fetch, name="snapshot_download", daemon=True)
    worker.start()
    repo_dir = cache / common.repo_folder(repo)
    while worker.is_alive():
        worker.join(min(interval, max(0.0, deadline - time.monotonic())))
        elapsed = time.monotonic() - start
        if worker.is_alive() and time.monotonic() >= deadline:
            raise common.StepError(
                f"download of {repo}@{commit} not done after {elapsed:.0f} s "
                f"({common.gb(common.tree_bytes(repo_dir))} on disk)",
                common.EXIT_TIMEOUT,
            )
        if worker.is_alive():
            common.say(
                "download",
                f"{common.gb(common.tree_bytes(repo_dir))} in {repo_dir} after {elapsed:.0f} s",
            )
    if "error" in outcome:
        error = outcome["error"]
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise common.StepError(f"snapshot_download failed: {type(error).__name__}: {first}")


def mark(repo: str, revision: str, cache: Path, manifest_file: Path) -> None:
    """Record a snapshot already in the cache as complete, after verifying it against
    ``manifest_file`` (a manifest as ``download`` writes it)."""
    raw = manifest_file.read_bytes()
    files = common.read_manifest(raw, str(manifest_file))
    snap = common.find_snapshot(cache, repo, revision)
    bad = common.verify(cache, snap, files)
    if bad:
        raise common.StepError(
            f"{len(bad)} files differ from {manifest_file}: "
            + "; ".join(f"{n}: {p}" for n, p in sorted(bad.items())[:3])
        )
    path = common.write_marker(cache, snap, raw)
    common.say(
        "mark",
        f"{repo}@{revision}: {snap.files} files, {common.gb(snap.bytes)} verified; marker {path}",
    )


def copy_phases(results: Sequence[pushing.PushResult], via: str = "") -> None:
    """Per peer, one ``copy`` record per rail (from a result's ``per_rail`` where the push
    measured each rail, else the peer's whole push as rail 0), then one ``peer-verify`` record:
    the rest of the push, from the end of its longest stream to the peer's verdict. ``via``: the
    relaying receiver's own address (a hop of a chain)."""
    for result in results:
        if result.per_rail:
            for rail, carried in sorted(result.per_rail.items()):
                common.phase("copy", carried.seconds, carried.sent_bytes, result.host, rail, via)
            streams = max(carried.seconds for carried in result.per_rail.values())
            common.phase(
                "peer-verify", max(0.0, result.seconds - streams), peer=result.host, via=via
            )
        else:
            sent = result.stats.get("Total bytes sent", result.stats.get("Literal data", 0))
            common.phase("copy", result.seconds, sent, result.host, 0, via)


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
            "--phases",
            type=Path,
            help="append this step's phase records here (the container's termination message)",
        )
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

    p = sub.add_parser("receive", help="take one model from the pusher, verify it, mark it")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--need-bytes", required=True, type=_positive_int)
    p.add_argument("--port", type=_port, required=True)
    p.add_argument("--secrets-file", required=True, type=Path, help="lines user:password")
    p.add_argument(
        "--address",
        action="append",
        default=[],
        help="listen on this address only (repeat: one per fabric rail; none: every address)",
    )
    p.add_argument(
        "--allow",
        required=True,
        help="ADDR[,ADDR...]: the only addresses the pusher may come from (its rail addresses)",
    )
    p.add_argument(
        "--relay-to",
        action="append",
        default=[],
        help="the next Spark of a chain, its address on one rail (repeat per rail, in rail "
        "order): files are passed on as they arrive, then pushed there once verified here",
    )
    p.add_argument(
        "--relay-password-file", type=Path, help="the password the next Spark's daemon takes"
    )
    p.add_argument(
        "--manifest-sha256-file",
        required=True,
        type=Path,
        help="holds the sha256 of the manifest the head's download computed (written out of "
        "band, never by the pusher): a pushed manifest with another is refused; a round waits "
        "until the file is there",
    )
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    bounded(p, "receive")

    p = sub.add_parser("push", help="copy the snapshot to the peers, marker last")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument(
        "--to",
        required=True,
        action="append",
        help="HOST[,HOST...]: the peers' addresses on one fabric rail; repeat per rail, the "
        "peers in the same order (one rsync stream per rail per peer)",
    )
    p.add_argument("--port", type=_port, required=True)
    p.add_argument("--password-file", required=True, type=Path)
    p.add_argument("--bwlimit", type=_positive_int, help="KiB/s per peer (rsync --bwlimit)")
    bounded(p, "push")

    p = sub.add_parser("mark", help="record a snapshot already in the cache as complete")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--manifest", required=True, type=Path, help="the manifest to verify against")
    bounded(p, "mark")

    p = sub.add_parser("wait", help="wait for the completion marker")
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    bounded(p, "wait")

    p = sub.add_parser("memwait", help="flush, then wait until MemFree covers the footprint")
    p.add_argument("--need-gb", required=True, type=_positive_float)
    p.add_argument("--meminfo", type=Path, default=common.PROC_MEMINFO)
    p.add_argument("--vm", type=Path, default=common.PROC_VM, help="drop_caches' folder")
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
        if bool(args.relay_to) != (args.relay_password_file is not None):
            raise common.StepError("--relay-to and --relay-password-file go together")
        relay = (
            relaying.Relay(
                tuple(args.relay_to),
                args.port,
                args.relay_password_file,
                sources=tuple(args.address),
            )
            if args.relay_to
            else None
        )
        hop = receiving.receive(
            args.cache,
            args.need_bytes,
            args.port,
            args.secrets_file,
            args.address,
            (common.check_repo(args.repo), common.check_revision(args.revision)),
            [a.strip() for a in args.allow.split(",") if a.strip()],
            args.timeout,
            args.interval,
            relay,
            args.manifest_sha256_file,
        )
        copy_phases(hop, via=args.address[0] if args.address else "")
    elif step == "push":
        rails = [[h.strip() for h in to.split(",") if h.strip()] for to in args.to]
        results = pushing.push(
            args.cache,
            common.check_repo(args.repo),
            common.check_revision(args.revision),
            rails,
            args.port,
            args.password_file,
            args.bwlimit,
            args.timeout,
            args.interval,
        )
        copy_phases(results)
    elif step == "mark":
        mark(
            common.check_repo(args.repo),
            common.check_revision(args.revision),
            args.cache,
            args.manifest,
        )
    elif step == "wait":
        common.wait(
            args.cache,
            common.check_repo(args.repo),
            common.check_revision(args.revision),
            args.timeout,
            args.interval,
        )
    elif step == "memwait":
        common.memwait(args.need_gb, args.meminfo, args.vm, args.timeout, args.interval)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A pod's stop (SIGTERM) unwinds like ^C: the receiver's rsync daemon is stopped with it.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        run(args)
    except common.StepError as exc:
        print(f"[fetch {args.step}] FAILED: {common.redact(str(exc))}", file=sys.stderr, flush=True)
        return exc.code
    except KeyboardInterrupt:
        print(f"[fetch {args.step}] FAILED: interrupted", file=sys.stderr, flush=True)
        return common.EXIT_FAILED
    finally:
        if args.phases is not None:
            common.write_phases(args.phases)
    return common.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
