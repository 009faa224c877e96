"""The evidence bundle: what the watchdog keeps of a sick deployment, and what ``diagnose`` reads.

A bundle is a directory ``<root>/<deployment>-<UTC time>/``::

    bundle.json        {"format": "sparkrack-evidence/1",
                        "captured": "2026-11-23T22:55:09Z",
                        "deployment": {"name", "namespace", "alias", "url", "pods": [...]},
                        "verdict": {the probe: verdict, detail, tokens, ttft_s, max_gap_s,
                                    since_last_token_s, health_status, engine_tokens, ...},
                        "logs": ["logs/<pod>.log", ...],
                        "notes": ["what could not be captured, and why", ...]}
    logs/<pod>.log     the last lines of each rank's container log (rank 0 first)
    events.json        the Kubernetes events of the deployment's pods (a JSON list)
    flight-recorder/fr_dump_rank_<N>.json
                       PyTorch's NCCL flight-recorder dump of rank N, when there is one, as
                       JSON (:mod:`sparkrack.diagnose.flightrecorder`; never a pickle); the
                       watchdog writes none (the dumps are on the Sparks' disks): the owner
                       adds them with :func:`add_dumps` (``sparkrack diagnose --add-dumps``)

Every log file is cut to its last :data:`MAX_LOG_BYTES` bytes, and a root keeps the newest
:data:`KEEP` bundles of each deployment (older ones are deleted when a new one is written; the
watchdogs of several deployments share one root), so evidence on a node's disk is bounded.
Nothing secret is written: every log, note, event and dump passes through
:func:`sparkrack.diagnose.redact.redact` on its way in (SGLang logs its ``server_args`` with its
keys at start-up), and again when ``diagnose`` reads a bundle.

``diagnose`` also reads a directory that is not a bundle (no ``bundle.json``): every ``*.log`` and
``*.txt`` file in it, e.g. one NCCL debug log per rank, and the flight-recorder dumps in it
(``fr_dump_rank_<N>`` or ``fr_dump_rank_<N>.json``).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrack import contract
from sparkrack.diagnose import flightrecorder
from sparkrack.diagnose.redact import redact, redact_data
from sparkrack.errors import Problem, SparkrackError

FORMAT = "sparkrack-evidence/1"
MANIFEST = "bundle.json"
LOGS_DIR = "logs"
EVENTS = "events.json"
DUMPS_DIR = "flight-recorder"
DUMP_PREFIX = contract.FLIGHT_RECORDER_DUMP_PREFIX
_DUMP_NAME = re.compile(rf"{DUMP_PREFIX}(\d+)(\.json)?$")
MAX_LOG_BYTES = 256 * 1024
KEEP = 10
LOG_SUFFIXES = (".log", ".txt")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Identity:
    """Which deployment the evidence is of."""

    name: str
    namespace: str = ""
    alias: str = ""
    url: str = ""
    pods: tuple[str, ...] = ()


@dataclass
class Evidence:
    """A bundle (or a directory of logs) as read back: its logs by file name, in order."""

    path: Path
    logs: dict[str, str]
    identity: Identity | None = None
    verdict: dict[str, Any] | None = None
    captured: str = ""
    events: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dumps: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Flight-recorder dumps by rank (read by :func:`flightrecorder.load`: no code runs)."""
    refused: list[str] = field(default_factory=list)
    """Why a dump in the directory was not read."""


def safe_name(text: str) -> str:
    """``text`` as one file-name component (no separators, no dot-dot)."""
    name = _SAFE.sub("-", text).strip(".-")
    return name[:100] or "unnamed"


def _tail(text: str, limit: int) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    cut = data[-limit:].decode("utf-8", "ignore")
    return cut.split("\n", 1)[-1] if "\n" in cut else cut


def write(
    root: Path,
    identity: Identity,
    verdict: dict[str, Any],
    logs: dict[str, str],
    events: list[Any] | None = None,
    notes: list[str] | None = None,
    *,
    dumps: dict[int, bytes] | None = None,
    keep: int = KEEP,
    max_log_bytes: int = MAX_LOG_BYTES,
    now: float | None = None,
) -> Path:
    """Write one bundle under ``root`` (logs by pod name, rank 0 first; ``dumps``: each rank's
    flight-recorder dump as PyTorch wrote it, kept as redacted JSON); keep the newest ``keep``
    bundles of this deployment in ``root``. Returns the bundle's directory.

    Raises SparkrackError for a dump :func:`flightrecorder.load` refuses; nothing is written."""
    readable = {
        rank: redact_data(flightrecorder.load(data, f"{DUMP_PREFIX}{rank}"))
        for rank, data in (dumps or {}).items()
    }
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    base = f"{safe_name(identity.name)}-{stamp}"
    bundle = root / base
    n = 1
    while bundle.exists():
        n += 1
        bundle = root / f"{base}-{n}"
    (bundle / LOGS_DIR).mkdir(parents=True)
    files = []
    for pod, text in logs.items():
        rel = f"{LOGS_DIR}/{safe_name(pod)}.log"
        (bundle / rel).write_text(redact(_tail(text, max_log_bytes)), encoding="utf-8")
        files.append(rel)
    if readable:
        (bundle / DUMPS_DIR).mkdir()
    for rank, dump in sorted(readable.items()):
        (bundle / DUMPS_DIR / f"{DUMP_PREFIX}{int(rank)}.json").write_text(
            json.dumps(dump, default=str) + "\n", encoding="utf-8"
        )
    safe_events = redact_data(json.loads(json.dumps(events or [], default=str)))
    (bundle / EVENTS).write_text(json.dumps(safe_events, indent=1) + "\n")
    manifest = {
        "format": FORMAT,
        "captured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "deployment": {
            "name": identity.name,
            "namespace": identity.namespace,
            "alias": identity.alias,
            "url": identity.url,
            "pods": list(identity.pods),
        },
        "verdict": redact_data(verdict),
        "logs": files,
        "notes": [redact(n) for n in notes or []],
    }
    tmp = bundle / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.rename(bundle / MANIFEST)  # a bundle is complete once its manifest exists
    rotate(root, keep, identity.name)
    return bundle


def add_dumps(path: Path, folder: Path) -> list[int]:
    """Take the flight-recorder dumps in ``folder`` (``fr_dump_rank_<N>`` as PyTorch wrote them on
    a Spark, or their ``.json`` form) into the bundle at ``path``, as redacted JSON, and note it in
    the manifest. Returns the ranks added.

    Every dump is read (:func:`flightrecorder.load`: no pickle global resolved, size-capped) before
    anything is written: a refused dump leaves the bundle as it was."""
    manifest_file = path / MANIFEST
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _refuse(path, MANIFEST, f"not a bundle: {exc}", "give a bundle directory") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _refuse(
            manifest_file, "format", f"not {FORMAT}", "a bundle written by sparkrack watch"
        )
    found = Evidence(folder, {})
    if not folder.is_dir():
        raise _refuse(
            folder, "DUMPS", "not a directory", "give the folder the dumps were copied to"
        )
    _read_dumps(found, folder)
    if found.refused:
        raise _refuse(folder, "DUMPS", "; ".join(found.refused), "remove or recopy the dump")
    if not found.dumps:
        raise _refuse(folder, "DUMPS", f"no {DUMP_PREFIX}<N> file", "copy the rank's dumps here")
    (path / DUMPS_DIR).mkdir(exist_ok=True)
    for rank, dump in sorted(found.dumps.items()):
        (path / DUMPS_DIR / f"{DUMP_PREFIX}{int(rank)}.json").write_text(
            json.dumps(redact_data(dump), default=str) + "\n", encoding="utf-8"
        )
    ranks = sorted(found.dumps)
    notes = [str(n) for n in manifest.get("notes") or []]
    notes.append(redact(f"flight-recorder dumps of ranks {ranks} added from {folder.name}"))
    manifest["notes"] = notes
    tmp = path / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.rename(manifest_file)
    return ranks


def bundles(root: Path) -> list[Path]:
    """The complete bundles under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and (p / MANIFEST).is_file()]
    return sorted(found, key=lambda p: ((p / MANIFEST).stat().st_mtime, p.name))


def rotate(root: Path, keep: int, deployment: str) -> None:
    """Delete all but the newest ``keep`` bundles of ``deployment`` (the name in their manifest:
    one deployment's stalls never push out another's evidence)."""
    own = [b for b in bundles(root) if _deployment_of(b) == deployment]
    for old in own[: max(0, len(own) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def _deployment_of(path: Path) -> str | None:
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        name = manifest["deployment"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None


def _refuse(path: Path, key: str, what: str, fix: str) -> SparkrackError:
    return SparkrackError(Problem(str(path), key, what, fix, "evidence-bundle"))


def read(path: Path) -> Evidence:
    """A bundle directory, or a directory of log files (every ``*.log`` / ``*.txt``)."""
    if not path.is_dir():
        raise _refuse(path, "BUNDLE", "not a directory", "give a bundle or a folder of logs")
    manifest = path / MANIFEST
    if not manifest.is_file():
        logs = {
            str(p.relative_to(path)): p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(path.rglob("*"))
            if p.is_file() and p.suffix in LOG_SUFFIXES and not p.is_symlink()
        }
        if not logs:
            raise _refuse(path, "BUNDLE", "no bundle.json and no *.log files", "give a bundle")
        evidence = Evidence(path, logs)
        _read_dumps(evidence, path)
        return evidence
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _refuse(manifest, "bundle.json", f"unreadable: {exc}", "rewrite the bundle") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _refuse(manifest, "format", f"not {FORMAT}", "a bundle written by sparkrack watch")
    logs = {}
    root = path.resolve()
    for rel in data.get("logs") or []:
        file = (path / str(rel)).resolve()
        if not file.is_relative_to(root) or not file.is_file():
            raise _refuse(manifest, "logs", f"{rel!r} is not a file inside the bundle", "fix it")
        logs[str(rel)] = file.read_text(encoding="utf-8", errors="replace")
    dep = data.get("deployment") or {}
    events_file = path / EVENTS
    events = json.loads(events_file.read_text()) if events_file.is_file() else []
    evidence = Evidence(
        path,
        logs,
        Identity(
            str(dep.get("name", "")),
            str(dep.get("namespace", "")),
            str(dep.get("alias", "")),
            str(dep.get("url", "")),
            tuple(str(p) for p in dep.get("pods") or ()),
        ),
        data.get("verdict") if isinstance(data.get("verdict"), dict) else None,
        str(data.get("captured", "")),
        events if isinstance(events, list) else [],
        [str(n) for n in data.get("notes") or []],
    )
    _read_dumps(evidence, path / DUMPS_DIR)
    return evidence


def _read_dumps(evidence: Evidence, folder: Path) -> None:
    """The flight-recorder dumps in ``folder`` (not below it) into ``evidence``: a rank's
    ``.json`` conversion is preferred to its pickle; a refused dump is noted, not read."""
    if not folder.is_dir():
        return
    found: dict[int, Path] = {}
    for file in sorted(folder.iterdir()):
        match = _DUMP_NAME.fullmatch(file.name)
        if match is None or file.is_symlink() or not file.is_file():
            continue
        rank = int(match.group(1))
        if rank not in found or match.group(2):
            found[rank] = file
    for rank, file in sorted(found.items()):
        try:
            if file.stat().st_size > flightrecorder.MAX_DUMP_BYTES:
                evidence.refused.append(
                    f"{file}: larger than {flightrecorder.MAX_DUMP_BYTES} bytes, not read"
                )
                continue
            evidence.dumps[rank] = flightrecorder.load(file.read_bytes(), str(file))
        except SparkrackError as exc:
            evidence.refused.append(str(exc))
