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

Every log file is cut to its last :data:`MAX_LOG_BYTES` bytes, and a root keeps the newest
:data:`KEEP` bundles of each deployment (older ones are deleted when a new one is written; the
watchdogs of several deployments share one root), so evidence on a node's disk is bounded.
Nothing secret is written: the verdict carries no key, pod logs are the engine's own output.

``diagnose`` also reads a directory that is not a bundle (no ``bundle.json``): every ``*.log`` and
``*.txt`` file in it, e.g. one NCCL debug log per rank.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrack.errors import Problem, SparkrackError

FORMAT = "sparkrack-evidence/1"
MANIFEST = "bundle.json"
LOGS_DIR = "logs"
EVENTS = "events.json"
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
    keep: int = KEEP,
    max_log_bytes: int = MAX_LOG_BYTES,
    now: float | None = None,
) -> Path:
    """Write one bundle under ``root`` (logs by pod name, rank 0 first); keep the newest ``keep``
    bundles of this deployment in ``root``. Returns the bundle's directory."""
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
        (bundle / rel).write_text(_tail(text, max_log_bytes), encoding="utf-8")
        files.append(rel)
    (bundle / EVENTS).write_text(json.dumps(events or [], indent=1, default=str) + "\n")
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
        "verdict": verdict,
        "logs": files,
        "notes": list(notes or []),
    }
    tmp = bundle / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.rename(bundle / MANIFEST)  # a bundle is complete once its manifest exists
    rotate(root, keep, identity.name)
    return bundle


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
        return Evidence(path, logs)
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
    return Evidence(
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
