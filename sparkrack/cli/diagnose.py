"""``sparkrack diagnose LOG|DIR ...``: match SGLang/NCCL logs against the known failure signatures.

A directory is an evidence bundle of the watchdog (:mod:`sparkrack.diagnose.bundle`: its verdict
and deployment are shown, every rank's log is diagnosed) or a folder of logs (one per rank).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.diagnose import bundle
from sparkrack.diagnose.signatures import diagnose
from sparkrack.errors import Problem, UsageError


def add_arguments(command: str, d: argparse.ArgumentParser) -> None:
    d.add_argument(
        "logs", nargs="+", help="log files, - for stdin, or directories (bundle or rank logs)"
    )
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(handler=cmd_diagnose)


def _texts(name: str) -> tuple[dict[str, str], dict[str, Any] | None]:
    """The logs named by one argument (label -> text) and, for a bundle, its summary."""
    if name == "-":
        return {name: sys.stdin.read()}, None
    path = Path(name)
    if path.is_dir():
        evidence = bundle.read(path)
        summary = None
        if evidence.identity is not None:
            summary = {
                "deployment": asdict(evidence.identity),
                "captured": evidence.captured,
                "verdict": evidence.verdict,
                "notes": evidence.notes,
            }
        return {f"{name.rstrip('/')}/{rel}": text for rel, text in evidence.logs.items()}, summary
    try:
        return {name: path.read_text(encoding="utf-8", errors="replace")}, None
    except OSError as exc:
        raise UsageError(
            Problem(name, "LOG", f"cannot be read: {exc.strerror}", "give a readable log file")
        ) from None


def cmd_diagnose(args: argparse.Namespace) -> int:
    report: list[dict[str, Any]] = []
    for name in args.logs:
        texts, summary = _texts(name)
        if summary is not None:
            if args.json:
                report.append({"bundle": name, **summary})
            else:
                verdict = summary["verdict"] or {}
                dep = summary["deployment"]
                print(
                    f"{name}: deployment {dep['name']} ({dep['namespace'] or '-'}) "
                    f"{verdict.get('verdict', '?')}: {verdict.get('detail', '')} "
                    f"[captured {summary['captured']}]"
                )
                for note in summary["notes"]:
                    print(f"{name}: note: {note}")
        for label, text in texts.items():
            findings = diagnose(text)
            report.append({"log": label, "findings": [asdict(f) for f in findings]})
            if not args.json:
                if not findings:
                    print(f"{label}: no known failure signature")
                for f in findings:
                    print(f"{label}: {f}")
    if args.json:
        print(json.dumps(report, indent=2))
    return ExitCode.OK
