"""One error type for everything an operator can get wrong.

Every refusal names the file, the key, what is wrong and how to fix it, so that
the line printed by the CLI or by an Ansible filter is actionable on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Control characters (a newline too, in file and key) would let a hostile value forge or hide
# output lines; they are shown escaped. Messages may span lines on purpose (tables).
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")
_CONTROL_OR_NEWLINE = re.compile(r"[\x00-\x1f\x7f]")


def _escape(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


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
        text = f"{where}: {_escape(self.message, _CONTROL)}"
        if self.fix:
            text += f" — fix: {_escape(self.fix, _CONTROL)}"
        if self.rule:
            text += f" [{self.rule}]"
        return text


class SparkrackError(Exception):
    """Raised with one or more problems; ``str()`` lists them one per line."""

    def __init__(self, problems: list[Problem] | Problem) -> None:
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
