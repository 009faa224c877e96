"""One error type for everything an operator can get wrong.

Every refusal names the file, the key, what is wrong and how to fix it, so that
the line printed by the CLI or by an Ansible filter is actionable on its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """A single finding: ``<file>: <key>: <message> [<rule>]``."""

    file: str
    key: str
    message: str
    fix: str = ""
    rule: str = ""

    def __str__(self) -> str:
        text = f"{self.file}: {self.key}: {self.message}"
        if self.fix:
            text += f" — fix: {self.fix}"
        if self.rule:
            text += f" [{self.rule}]"
        return text


class SparkrackError(Exception):
    """Raised with one or more problems; ``str()`` lists them one per line."""

    def __init__(self, problems: list[Problem] | Problem) -> None:
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
