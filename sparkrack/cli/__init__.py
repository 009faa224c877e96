"""The ``sparkrack`` command line.

:data:`COMMANDS` is the one table of commands: name → the module that defines its arguments
and handler, and the one-line summary shown by ``sparkrack --help``. A command's module is
imported only when that command runs (or when its own ``--help`` is asked for), so
``sparkrack validate`` never loads the bench client or plotting. Each command module has
``add_arguments(command, parser)``, which adds the arguments and sets ``handler``; a handler
returns an :class:`~sparkrack.cli.exitcodes.ExitCode`. Core modules never import this package.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TextIO

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.errors import SparkrackError, UsageError, printable
from sparkrack.inputs.inventory import VAULT_ENV
from sparkrack.sources import expand


@dataclass(frozen=True)
class Command:
    module: str
    """Module under ``sparkrack.cli`` that defines the arguments and the handler."""
    summary: str


COMMANDS: Final[dict[str, Command]] = {
    "addresses": Command(
        "addresses", "print the QSFP/RoCE address plan computed from an inventory"
    ),
    "plan": Command(
        "plan",
        "capacity (weights, KV, Mamba slots, fit) and decode roofline of serving profiles",
    ),
    "check": Command(
        "check",
        "check an inventory before site.yml: variables, plan, deployments, memory, images, secrets",
    ),
    "validate": Command("validate", "check serving profiles (schema + every rule)"),
    "render": Command("render", "render the launch command, env or manifests of a serving profile"),
    "manifests": Command(
        "manifests", "print validated Kubernetes manifests rendered from an inventory"
    ),
    "images": Command(
        "images", "list every image an inventory runs, marking moving tags and digests"
    ),
    "fabric-check": Command(
        "fabric_check",
        "gate an NCCL INFO log: transport as requested, busbw above floor",
    ),
    "patch": Command(
        "patch", "check or apply the SM121 source patches to a site-packages directory"
    ),
    "bench": Command(
        "bench", "benchmark an OpenAI-compatible endpoint the way the source posts did (n=1/4/8)"
    ),
    "bench-server": Command(
        "bench", "run the local HTTP/SSE test server (known token rate, garbage on request)"
    ),
    "bench-report": Command(
        "bench", "combine results.json files of several runs into one TESTLOG table + plots"
    ),
    "diagnose": Command("diagnose", "match SGLang/NCCL logs against the known failure signatures"),
    "watch": Command("watch", "probe a serving endpoint like a user: healthy, stalled, erroring"),
    "status": Command("status", "each deployment's ranks, watchdog state, routing and evidence"),
    "memguard": Command(
        "memguard", "per Spark: stop the largest engine pod before memory runs out"
    ),
    "matrix": Command("matrix", "validate, deploy, bench and record a list of profile variants"),
}


def version() -> str:
    """The installed distribution's version (pyproject.toml's, through the package metadata)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("sparkrack")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _command_in(argv: Sequence[str]) -> str | None:
    """The command named on the line (the first word that is not an option), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported (every command's when None)."""
    parser = argparse.ArgumentParser(
        prog="sparkrack",
        description="Provision DGX Spark clusters and serve LLMs across them.",
    )
    parser.add_argument("--version", action="version", version=f"sparkrack {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.summary, description=cmd.summary)
        if command is None or name == command:
            module = importlib.import_module(f"{__name__}.{cmd.module}")
            module.add_arguments(name, p)
    return parser


class EscapedOutput(io.TextIOBase):
    """stdout as commands write to it, a source cited as ``src:<slug>`` written as its title and
    place (:func:`~sparkrack.sources.expand`), every control character but the newline shown as
    ``\\xNN`` (:func:`~sparkrack.errors.printable`): a log line, a server's answer or a file
    name that a command echoes cannot move the cursor, recolour or clear the terminal, or
    forge a line."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(printable(expand(text), keep_newlines=True))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(words)
    # No known command: only the summaries are needed (help, or argparse's usage error).
    args = build_parser(command or "").parse_args(words)
    if hasattr(args, "inventory"):
        _ansible_display()
    try:
        with contextlib.redirect_stdout(EscapedOutput(sys.stdout)):
            code = _run(args)
            sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _closed_pipe()


def _closed_pipe() -> int:
    """The reader of stdout went away (``sparkrack ... | head -1``): stop quietly. stdout is
    pointed at /dev/null so that the interpreter's own flush at exit cannot fail again."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return ExitCode.OK


def _ansible_display() -> None:
    """ansible-core's display adapts the process's stdout and stderr once, when it is first
    made (it needs real text streams): make it here, on the real ones, so it never meets the
    escaping wrapper or a test's capture."""
    streams = sys.stdout, sys.stderr
    try:
        sys.stdout, sys.stderr = sys.__stdout__ or sys.stdout, sys.__stderr__ or sys.stderr
        from ansible.utils.display import Display

        Display()
    finally:
        sys.stdout, sys.stderr = streams


def _run(args: argparse.Namespace) -> int:
    vault = getattr(args, "vault_password_file", None)
    saved = os.environ.get(VAULT_ENV)
    try:
        if vault:  # the option says what the variable says, for every inventory read below
            os.environ[VAULT_ENV] = vault
        from sparkrack.cli.options import inventory_given

        inventory_given(args)
        code: int = args.handler(args)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return ExitCode.USAGE
    except SparkrackError as exc:
        print(str(exc), file=sys.stderr)
        return ExitCode.FAILED
    finally:
        if vault:
            if saved is None:
                os.environ.pop(VAULT_ENV, None)
            else:
                os.environ[VAULT_ENV] = saved
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
