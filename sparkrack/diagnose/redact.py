"""Secrets out of text: the one redaction every log, bundle and report goes through.

Engine, admin, gateway and Hugging Face keys reach logs in a few known shapes: SGLang prints its
whole ``server_args=ServerArgs(...)`` at start-up (``api_key='...'``, ``admin_api_key='...'``),
HTTP clients log ``Authorization: Bearer ...`` headers, a command line carries ``--api-key X``,
an environment dump carries ``SPARKRACK_ENGINE_KEY=X``, and a Hugging Face token is ``hf_``
followed by its characters. :func:`redact` replaces the value
of each with :data:`MASK` and keeps the rest of the line, so a diagnosis still reads it.
``sparkrack diagnose`` (its text and its JSON), ``sparkrack status`` (verdicts and job reasons)
and the watchdog's evidence bundles (:mod:`sparkrack.diagnose.bundle`) call it.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

_KEY_NAMES = (
    r"(?:[A-Za-z_]{0,40}api_key|[A-Za-z_]{0,40}token|[A-Za-z_]{0,40}secret|password|master_key)"
)

_SECRET_KEY = re.compile(_KEY_NAMES, re.IGNORECASE)

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Python reprs and keyword arguments: api_key='x', admin_api_key="x", hf_token='x'
    (re.compile(rf"\b({_KEY_NAMES})(\s*=\s*)(['\"])(.*?)\3", re.IGNORECASE), rf"\1\2\3{MASK}\3"),
    # JSON / YAML shaped: "api_key": "x"
    (
        re.compile(rf"([\"']?\b{_KEY_NAMES}[\"']?\s*:\s*)([\"'])(.*?)\2", re.IGNORECASE),
        rf"\1\2{MASK}\2",
    ),
    # unquoted assignments: API_KEY=x, --api-key=x
    (
        re.compile(
            rf"\b({_KEY_NAMES}|[A-Za-z-]{0, 40}api-key)=(?!['\"]|None\b)([^\s,;)'\"]+)",
            re.IGNORECASE,
        ),
        rf"\1={MASK}",
    ),
    # argv words: --api-key x, --admin-api-key x, --hf-token x
    (
        re.compile(
            r"(?<![-\w])(--[A-Za-z-]{0,40}(?:api-key|token|secret|password))(\s+)(?!--)(\S+)", re.I
        ),
        rf"\1\2{MASK}",
    ),
    # environment dumps of key variables: SPARKRACK_ENGINE_KEY=x, SPARKRACK_ADMIN_KEY=x
    (re.compile(r"\b([A-Z][A-Z0-9_]{0,60}_KEY)=(?!['\"])([^\s,;)'\"]+)"), rf"\1={MASK}"),
    # HTTP headers: Authorization: Bearer x, Authorization: Basic x, x-api-key: x
    (
        re.compile(r"(\bAuthorization['\"]?\s*[:=]\s*['\"]?)(\w+\s+)?([^\s'\",}]+)", re.I),
        rf"\1\2{MASK}",
    ),
    (re.compile(r"(\bBearer\s+)([^\s'\",}]+)", re.I), rf"\1{MASK}"),
    (re.compile(r"(\bx-api-key['\"]?\s*[:=]\s*['\"]?)([^\s'\",}]+)", re.I), rf"\1{MASK}"),
    # Hugging Face tokens wherever they stand
    (re.compile(r"\bhf_[A-Za-z0-9]{8,}"), f"hf_{MASK}"),
)


def redact_data(value: Any) -> Any:
    """``value`` (JSON-shaped data) with :func:`redact` applied to every string in it, keys
    included, and the whole string under a key named like a secret (``{"api_key": "x"}``: the
    value alone has no shape to match): redacting the data, not its JSON text, keeps it valid."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {
            redact_data(k): (
                MASK
                if isinstance(k, str) and isinstance(v, str) and _SECRET_KEY.fullmatch(k)
                else redact_data(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    return value


def redact(text: str) -> str:
    """``text`` with every key value in a known shape replaced by :data:`MASK`."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
