"""The classes of ``extra_args`` options an engine refuses, and what a value word of one names.

Each engine's own table (``allowed_options`` / ``refused_options`` of its class) decides per
option; this module holds the classes, their rule ids and the hints read from an option's name
when the engine's table has no row for it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType


class ArgClass(StrEnum):
    """Why an option of ``extra_args`` is refused: each class is one rule id."""

    CODE = "code"
    """The engine imports or loads code (a plugin, a module, a per-request processor, a tokenizer
    or template from another path or repo)."""
    EGRESS = "egress"
    """The engine connects out (a URL, a host:port)."""
    PATH = "path"
    """The engine reads or writes a path of the pod sparkrack does not render."""
    PRIVACY = "privacy"
    """The engine logs or dumps requests (prompts and completions)."""


EXTRA_ARGS_CLASS_RULES: Mapping[ArgClass, str] = MappingProxyType(
    {c: f"extra-args-{c.value}" for c in ArgClass}
)
"""Class -> rule id of its refusal."""
RULE_EXTRA_NOT_ALLOWED = "extra-args-not-allowed"

# What an option's name says it does when the engine's own table has no row for it.
NAME_HINTS: tuple[tuple[ArgClass, tuple[str, ...]], ...] = (
    (
        ArgClass.CODE,
        ("plugin", "module", "custom", "processor", "middleware", "extension", "loader", "remote"),
    ),
    (ArgClass.PRIVACY, ("log-request", "log-output", "dump", "request-log")),
    (ArgClass.EGRESS, ("endpoint", "url", "uri", "host", "otlp", "domain", "trace")),
    (ArgClass.PATH, ("path", "dir", "file", "folder", "template", "tokenizer", "config", "ssl")),
)
_HOST_PORT = re.compile(r"^\[?[A-Za-z0-9_.:-]*[A-Za-z0-9_.-]\]?:[0-9]{1,5}$")


def value_class(value: str) -> tuple[ArgClass, str] | None:
    """The class of a value word of ``extra_args`` that names a place (None: a plain value)."""
    if "://" in value or _HOST_PORT.match(value):
        return ArgClass.EGRESS, f"{value!r} names a host to connect to"
    if value.startswith(("/", "~", "./", "../")) or "/" in value:
        return ArgClass.PATH, f"{value!r} names a path or a repo"
    return None
