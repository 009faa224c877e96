"""``sparkrack diagnose LOG|DIR ...``: match SGLang/NCCL logs against the known failure signatures.

A directory is an evidence bundle of the watchdog (:mod:`sparkrack.diagnose.bundle`: its verdict
and deployment are shown, every rank's log is diagnosed) or a folder of logs (one per rank). The
logs of one directory, or the log files named together, are one group: a collective hang is
named across them (:mod:`sparkrack.diagnose.hangs`: who waited, who is silent, who died, or a
mismatch), with the flight-recorder dumps found beside them. Everything printed, text or JSON,
has passed through :func:`sparkrack.diagnose.redact.redact`.

The exit status (0: nothing named, 1: something named or an input refused, 2: usage) is
described once, in the parser's description, which ``--help`` and docs/reference/commands.md show.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.diagnose import bundle, flightrecorder, hangs
from sparkrack.diagnose.redact import redact, redact_data
from sparkrack.diagnose.signatures import diagnose
from sparkrack.errors import Problem, UsageError


def add_arguments(command: str, d: argparse.ArgumentParser) -> None:
    d.description = (
        "Names the known failure signatures in each log and, for a group of rank logs (a folder, "
        "an evidence bundle, or several logs given together), the collective hang: who waited, "
        "who is silent or dead, or a mismatch. Exit 0: nothing named; 1: at least one signature "
        "or hang named, in any input (nccl-socket-transport included: on a Spark NCCL must run "
        "over RoCE), or an input refused (reason on stderr); 2: the command line cannot run."
    )
    d.add_argument(
        "logs", nargs="+", help="log files, - for stdin, or directories (bundle or rank logs)"
    )
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.add_argument(
        "--add-dumps",
        type=Path,
        metavar="DIR",
        help="first take the flight-recorder dumps copied from the Sparks into DIR into the "
        "bundle (as redacted JSON; a dump naming any pickle global is refused)",
    )
    d.set_defaults(handler=cmd_diagnose)


def _read(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    try:
        return Path(name).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(
            Problem(name, "LOG", f"cannot be read: {exc.strerror}", "give a readable log file")
        ) from None


def _group(
    label: str, logs: dict[str, str], evidence: bundle.Evidence | None, args: argparse.Namespace
) -> dict[str, Any]:
    """Diagnose one group of rank logs; print the text form; return the JSON form."""
    dumps = {
        rank: flightrecorder.summary(dump, rank)
        for rank, dump in (evidence.dumps.items() if evidence else ())
    }
    refused = [redact(r) for r in (evidence.refused if evidence else [])]
    found = hangs.analyse(logs, dumps)
    if not args.json:
        for reason in refused:
            print(f"{label}: flight-recorder dump not read: {reason}")
        for summary in dumps.values():
            print(f"{label}: {summary}")
        for finding in found:
            print(f"{label}: {finding}")
    return {
        "group": label,
        "hangs": [asdict(f) for f in found],
        "flight_recorder": [asdict(s) for s in dumps.values()],
        "refused_dumps": refused,
    }


def cmd_diagnose(args: argparse.Namespace) -> int:
    if args.add_dumps is not None:
        if len(args.logs) != 1 or not Path(args.logs[0]).is_dir():
            raise UsageError(
                Problem("--add-dumps", "BUNDLE", "needs exactly one bundle", "name one bundle")
            )
        ranks = bundle.add_dumps(Path(args.logs[0]), args.add_dumps)
        if not args.json:
            print(f"{args.logs[0]}: flight-recorder dumps of ranks {ranks} added")
    report: list[dict[str, Any]] = []
    loose: dict[str, str] = {}
    for name in args.logs:
        path = Path(name)
        if name == "-" or not path.is_dir():
            loose[name] = redact(_read(name))
            texts = {name: loose[name]}
            evidence = None
        else:
            evidence = bundle.read(path)
            texts = {
                f"{name.rstrip('/')}/{rel}": redact(text) for rel, text in evidence.logs.items()
            }
            if evidence.identity is not None:
                summary = redact_data(
                    {
                        "deployment": asdict(evidence.identity),
                        "captured": evidence.captured,
                        "verdict": evidence.verdict,
                        "notes": evidence.notes,
                    }
                )
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
        if evidence is not None:
            report.append(_group(name, texts, evidence, args))
    if len(loose) > 1:
        report.append(_group(" + ".join(loose), loose, None, args))
    if args.json:
        print(json.dumps(report, indent=2))
    named = any(entry.get("findings") or entry.get("hangs") for entry in report)
    return ExitCode.FAILED if named else ExitCode.OK
