"""One error type for everything an operator can get wrong.

Every refusal names the file, the key, what is wrong and how to fix it, so that
the line printed by the CLI or by an Ansible filter is actionable on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkrack.sources import expand

# Control characters (a newline too, in file and key) would let a hostile value forge or hide
# output lines; they are shown escaped. Messages may span lines on purpose (tables). C1 controls
# (a terminal may read 0x9b as an escape) and the bidirectional overrides that reorder what is
# shown are escaped too.
_OTHER = "\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x09\x0b-\x1f{_OTHER}]")
_CONTROL_OR_NEWLINE = re.compile(f"[\x00-\x1f{_OTHER}]")


def _code(char: str) -> str:
    point = ord(char)
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}"


def _escape(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub(lambda m: _code(m.group()), text)


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character shown as ``\\xNN``: the one helper for echoing
    untrusted text (log lines, server answers, file names) to a terminal, where an escape
    sequence could rewrite the screen and a carriage return or newline could forge a line."""
    return _escape(str(text), _CONTROL if keep_newlines else _CONTROL_OR_NEWLINE)


def shown(value: object, limit: int = 80) -> str:
    """A value quoted in a message: its ``repr`` cut to ``limit`` characters (the length
    said), so a refusal of a 100 000-character value stays one readable line."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str | bytes | list | dict) else ""
    return f"{text[: limit - 1]}…{size}"


@dataclass(frozen=True)
class Problem:
    """A single finding: ``<file>: <key>: <message> [<rule>]``."""

    file: str
    key: str
    message: str
    fix: str = ""
    rule: str = ""

    def __str__(self) -> str:
        where = (
            f"{_escape(self.file, _CONTROL_OR_NEWLINE)}: {_escape(self.key, _CONTROL_OR_NEWLINE)}"
        )
        text = f"{where}: {_escape(expand(self.message), _CONTROL)}"
        if self.fix:
            text += f" — fix: {_escape(expand(self.fix), _CONTROL)}"
        if self.rule:
            text += f" [{self.rule}]"
        return text


class SparkrackError(Exception):
    """Raised with one or more problems; ``str()`` lists them one per line."""

    def __init__(self, problems: list[Problem] | Problem) -> None:
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class UsageError(SparkrackError):
    """A command line the command cannot run (exit 2, like argparse's own usage errors)."""
