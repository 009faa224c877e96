"""The pages of ``docs/reference/`` that are written from the code.

``python -m sparkrack.cli.reference`` rewrites them; ``tests/cli/test_reference.py`` fails when a
page and the code differ. Each page is a function of the code it documents:

* ``commands.md``: every command's arguments, from the parsers of :data:`COMMANDS`;
* ``exit-codes.md``: :class:`~sparkrack.cli.exitcodes.ExitCode`, with each member's docstring;
* ``ports.md``: every listener an engine declares (:mod:`sparkrack.serving.engines.listeners`);
* ``sources.md``: the published documents of :data:`sparkrack.sources.SOURCES`.

``inventory.md`` is written by :mod:`sparkrack.inputs.variables`, which owns the variables.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkrack.cli import COMMANDS, build_parser, exitcodes
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.serving.engines import ENGINES
from sparkrack.serving.engines.listeners import port_table
from sparkrack.sources import SOURCES

GENERATED = "<!-- written by `python -m sparkrack.cli.reference`; edit the code, not this page -->"


def _subcommand(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return found[0] if found else None


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _argument(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action.choices, dict):
        return "one of " + ", ".join(f"`{c}`" for c in action.choices)
    shown = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if action.nargs in ("*", "+"):
        shown += " …"
    return f"`{_cell(shown)}`"


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """One table row per argument of ``parser``, in the order the parser declares them; the help
    text with argparse's ``%(default)s``-style fields filled in as ``--help`` fills them."""
    rows = ["| argument | value | what |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or "(positional)"
        fields = {**vars(action), "prog": parser.prog}
        fields = {k: getattr(v, "__name__", v) for k, v in fields.items()}
        what = (action.help or "") % fields if action.help else ""
        rows.append(f"| {names} | {_argument(action)} | {_cell(what)} |")
    return rows if len(rows) > 2 else []


def _command(parser: argparse.ArgumentParser, title: str, summary: str) -> list[str]:
    lines = ["", f"## {title}", "", _cell(summary)]
    if parser.description and parser.description != summary:
        lines += ["", parser.description.strip()]
    options = _options(parser)
    if options:
        lines += ["", *options]
    sub = _subcommand(parser)
    if sub is not None:
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        for name, child in sub.choices.items():
            lines += _command(child, f"{title} {name}", child.description or helps.get(name, ""))
    return lines


def commands_page() -> str:
    lines = [
        "# Commands",
        "",
        GENERATED,
        "",
        "Every `sparkrack` command and its arguments, from the command line's own parsers.",
        "What the exit status means: [exit codes](exit-codes.md).",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    lines += [f"| [`{n}`](#sparkrack-{n}) | {c.summary} |" for n, c in COMMANDS.items()]
    for name, cmd in COMMANDS.items():
        sub = _subcommand(build_parser(name))
        assert sub is not None
        lines += _command(sub.choices[name], f"sparkrack {name}", cmd.summary)
    return "\n".join(lines) + "\n"


def exit_meanings() -> dict[str, str]:
    """Each :class:`ExitCode` member's docstring, on one line."""
    tree = ast.parse(inspect.getsource(exitcodes))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ExitCode")
    out: dict[str, str] = {}
    for stmt, doc in zip(cls.body, cls.body[1:], strict=False):
        if isinstance(stmt, ast.Assign) and isinstance(doc, ast.Expr):
            value = doc.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                name = stmt.targets[0]
                assert isinstance(name, ast.Name)
                out[name.id] = " ".join(value.value.split())
    return out


def exit_codes_page() -> str:
    meanings = exit_meanings()
    rows: dict[int, list[str]] = {}
    for name, member in ExitCode.__members__.items():
        rows.setdefault(int(member), []).append(f"`{name}`: {meanings[name]}")
    lines = [
        "# Exit codes",
        "",
        GENERATED,
        "",
        "The same for every command (`sparkrack/cli/exitcodes.py`).",
        "",
        "| exit | means |",
        "|---|---|",
    ]
    lines += [f"| {code} | {' — '.join(texts)} |" for code, texts in sorted(rows.items())]
    return "\n".join(lines) + "\n"


def ports_page() -> str:
    table = port_table(
        {name: (e.multi_rank_listeners, e.single_rank_listeners) for name, e in ENGINES.items()}
    )
    return (
        "\n".join(
            [
                "# Ports",
                "",
                GENERATED,
                "",
                "Every listener an engine's pods open, who connects to it and the code that opens it.",
                "`serving_api_port` and `serving_dist_port` are inventory variables "
                "([inventory](inventory.md)).",
                "",
                table,
            ]
        )
        + "\n"
    )


def sources_page() -> str:
    lines = [
        "# Sources",
        "",
        GENERATED,
        "",
        "The published documents the shipped profiles, rules and failure signatures come from. "
        "Code and data cite one as `src:<slug>`; what sparkrack prints names its title and where "
        "it was published (`sparkrack/sources.py`).",
        "",
        "| slug | title | published | about |",
        "|---|---|---|---|",
    ]
    lines += [
        f'| <a id="{s.slug}"></a>`{s.slug}` | {s.title} | {s.published} | {s.about} |'
        for s in SOURCES.values()
    ]
    return "\n".join(lines) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "commands.md": commands_page,
    "exit-codes.md": exit_codes_page,
    "ports.md": ports_page,
    "sources.md": sources_page,
}


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, page in PAGES.items():
        path = directory / name
        path.write_text(page())
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference")):
        print(p)
