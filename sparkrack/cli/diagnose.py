"""``sparkrack diagnose LOG ...``: match SGLang/NCCL logs against the known failure signatures."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.diagnose.signatures import diagnose
from sparkrack.errors import Problem, UsageError


def add_arguments(command: str, d: argparse.ArgumentParser) -> None:
    d.add_argument("logs", nargs="+", help="log files, or - for stdin")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(handler=cmd_diagnose)


def cmd_diagnose(args: argparse.Namespace) -> int:
    report: list[dict[str, Any]] = []
    for name in args.logs:
        if name == "-":
            text = sys.stdin.read()
        else:
            try:
                text = Path(name).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise UsageError(
                    Problem(
                        name, "LOG", f"cannot be read: {exc.strerror}", "give a readable log file"
                    )
                ) from None
        findings = diagnose(text)
        report.append({"log": name, "findings": [asdict(f) for f in findings]})
        if not args.json:
            if not findings:
                print(f"{name}: no known failure signature")
            for f in findings:
                print(f"{name}: {f}")
    if args.json:
        print(json.dumps(report, indent=2))
    return ExitCode.OK
