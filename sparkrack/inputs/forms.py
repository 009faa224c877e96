"""The accepted forms of the values people write, checked and described in words.

A :class:`Form` says what it accepts the way a person would (``a TCP port: a whole number from 1
to 65535``), never as a regular expression, and :meth:`Form.problem` says what is wrong with a
value. :func:`schema_problem` turns a JSON Schema error into the same kind of words, so a profile
or an inventory list refuses ``010`` or ``yes`` with "quote it" instead of a Python type name.
"""

from __future__ import annotations

import datetime
import difflib
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkrack.errors import shown
from sparkrack.inputs import imageref

TYPE_WORDS = {
    "string": "text",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "object": "a mapping (key: value lines)",
    "array": "a list",
    "null": "empty",
}


def yaml_hint(value: Any, wanted: str) -> str:
    """Why YAML gave ``value`` a type other than ``wanted`` (a JSON Schema type), and the fix."""
    if wanted == "string":
        if isinstance(value, bool):
            return "YAML reads an unquoted yes/no/on/off/true/false as a boolean: quote it"
        if isinstance(value, datetime.date):
            return "YAML reads an unquoted date as a date: quote it"
        if isinstance(value, int | float):
            return "YAML reads it as a number: quote it"
    if value is None:
        return "the value is empty (YAML null): write it, or remove the key"
    if wanted in ("integer", "number") and isinstance(value, str):
        return "write the number without quotes"
    if wanted == "boolean" and isinstance(value, str):
        return "write true or false without quotes"
    return f"write {TYPE_WORDS.get(wanted, wanted)}"


def type_name(value: Any) -> str:
    """What a value is, in words (``a boolean``, ``a date``)."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, datetime.datetime):
        return "a date and time"
    if isinstance(value, datetime.date):
        return "a date"
    if isinstance(value, int):
        return f"the number {value}"
    if isinstance(value, float):
        return f"the number {value:g}"
    if isinstance(value, str):
        return f"the text {shown(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


@dataclass(frozen=True)
class Form:
    """An accepted form: the words that describe it, and the check."""

    words: str
    """What is accepted, as a person says it (used in the fix of every refusal)."""
    check: Callable[[Any], str | None]
    """What is wrong with a value (None: nothing)."""
    example: str = ""

    def problem(self, value: Any) -> str | None:
        return self.check(value)

    @property
    def fix(self) -> str:
        return f"write {self.words}" + (f", e.g. {self.example}" if self.example else "")


def _text(value: Any, quote_hint: bool = True) -> str | None:
    if isinstance(value, str):
        return None
    hint = yaml_hint(value, "string") if quote_hint else ""
    return f"is {type_name(value)}, not text" + (f" ({hint})" if hint else "")


_DECIMAL = re.compile(r"0|[1-9][0-9]{0,17}")


def as_integer(value: Any) -> int | None:
    """``value`` as a whole number: an int, or its decimal digits as text (``-e port=30001``
    arrives as text); None for anything else (``4.0``, ``true``, ``010``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    return None


def integer_between(low: int, high: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        number = as_integer(value)
        if number is None:
            return f"is {type_name(value)}, not a whole number"
        if not low <= number <= high:
            return f"is {number}, outside {low}..{high}"
        return None

    return check


def matching(pattern: str, max_length: int) -> Callable[[Any], str | None]:
    regex = re.compile(pattern)

    def check(value: Any) -> str | None:
        wrong = _text(value)
        if wrong:
            return wrong
        if len(value) > max_length:
            return f"is {len(value)} characters long (at most {max_length})"
        if not regex.fullmatch(value):
            return f"{shown(value)} is not of this form"
        return None

    return check


DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"

PORT = Form(
    "a TCP port: a whole number from 1 to 65535", integer_between(1, 65535), example="30000"
)


def dns_label(max_length: int = DNS_LABEL_MAX) -> Form:
    return Form(
        f"a DNS label: lower-case letters, digits and '-', starting and ending with a letter or "
        f"digit, at most {max_length} characters",
        matching(_LABEL, max_length),
        example="sparkrack",
    )


def dns_1035_label(max_length: int = DNS_LABEL_MAX) -> Form:
    return Form(
        f"a DNS label that starts with a letter: lower-case letters, digits and '-', at most "
        f"{max_length} characters",
        matching(_LABEL_1035, max_length),
        example="gemma",
    )


SUBDOMAIN = Form(
    "a Kubernetes object name: lower-case letters, digits, '-' and '.', starting and ending "
    f"with a letter or digit, at most {DNS_SUBDOMAIN_MAX} characters",
    matching(_SUBDOMAIN, DNS_SUBDOMAIN_MAX),
)

# Host paths that reach a pod as a hostPath volume: the node's system directories, its
# container runtime and K3s state would hand the pod the node itself.
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/lib/kubelet",
    "/var/lib/rancher",
)
"""Refused, with everything under them."""
SHARED_DIRS = ("/", "/home", "/media", "/mnt", "/opt", "/srv", "/tmp", "/var", "/var/lib")
"""Refused as they are (a directory below them is fine)."""
_PATH = re.compile(r"/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*")
PATH_MAX = 1024


def _host_dir(value: Any) -> str | None:
    wrong = _text(value)
    if wrong:
        return wrong
    if len(value) > PATH_MAX:
        return f"is {len(value)} characters long (at most {PATH_MAX})"
    if value.startswith("~"):
        return f"{shown(value)} is in a home directory (~), a user's files and not a path"
    if not value.startswith("/"):
        return f"{shown(value)} is not an absolute path"
    path = value.rstrip("/") or "/"
    if path in SHARED_DIRS:
        return f"{shown(value)} is a shared system directory: pods would write into all of it"
    if not _PATH.fullmatch(path) or "/../" in f"{path}/" or "/./" in f"{path}/":
        return f"{shown(value)} has characters other than letters, digits and _.+- or a . / .."
    for tree in SYSTEM_TREES:
        if path == tree or path.startswith(f"{tree}/"):
            return f"{shown(value)} is under {tree}: the pods would get the node's own files"
    if path.startswith("/home/"):
        return (
            f"{shown(value)} is under /home: a user's files, where the pods would write and "
            "whose owner can plant links the serve play's root chown would follow"
        )
    return None


HOST_DIR = Form(
    "an absolute path of a directory of its own on the Spark (letters, digits and _.+-, not "
    "under /etc, /usr, /var/lib/rancher, another system directory or /home)",
    _host_dir,
    example="/var/lib/sparkrack/huggingface",
)

_QUANTITY = re.compile(r"(?P<number>[0-9]+(\.[0-9]+)?)(?P<unit>Ki|Mi|Gi|Ti|k|M|G|T)?")
_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_UNITS.update({"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40})


def memory_bytes(text: str) -> float | None:
    """Bytes of a Kubernetes memory quantity (``32Gi``), None when it is not one."""
    found = _QUANTITY.fullmatch(text)
    if not found:
        return None
    return float(found["number"]) * _UNITS[found["unit"]]


def memory_size(max_bytes: float, why: str) -> Form:
    def check(value: Any) -> str | None:
        wrong = _text(value)
        if wrong:
            return wrong
        size = memory_bytes(value)
        if size is None:
            return f"{shown(value)} is not a memory size"
        if size <= 0:
            return f"{shown(value)} is zero"
        if size > max_bytes:
            return f"{shown(value)} is more than {why}"
        return None

    return Form(
        f"a memory size of at most {why}: a number with Ki, Mi, Gi or Ti (or k, M, G, T)",
        check,
        example="32Gi",
    )


def seconds(low: int, high: int) -> Form:
    return Form(f"a number of seconds from {low} to {high}", integer_between(low, high))


def _switch(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().lower() in SWITCH_WORDS:
        return None
    return f"is {type_name(value)}, not true or false"


SWITCH_WORDS = {"true": True, "false": False, "yes": True, "no": False}
"""A switch given as a string (``-e serving_prepull=true``), as Ansible's ``bool`` reads it."""
SWITCH = Form("true or false", _switch, example="false")


def switch_on(value: Any) -> bool:
    """An inventory switch's meaning: a YAML boolean, or one of ``SWITCH_WORDS`` as a string."""
    if isinstance(value, str):
        return SWITCH_WORDS.get(value.strip().lower(), False)
    return value is True


def list_of(item: Callable[[Any], str | None], max_items: int = 64) -> Callable[[Any], str | None]:
    """A YAML list of at most ``max_items`` values, each of the item's form (empty: none)."""

    def check(value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, list):
            return f"is {type_name(value)}, not a list"
        if len(value) > max_items:
            return f"has {len(value)} entries (at most {max_items})"
        for i, entry in enumerate(value):
            wrong = item(entry)
            if wrong:
                return f"entry {i + 1} {wrong}"
        return None

    return check


def _cidr(value: Any) -> str | None:
    wrong = _text(value)
    if wrong:
        return wrong
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError:
        return f"{shown(value)} is not a network address with its prefix length"
    return None if "/" in value else f"{shown(value)} has no prefix length"


CIDRS = Form(
    "a list of networks (CIDR blocks: address/prefix length, host bits zero)",
    list_of(_cidr),
    example="[10.0.0.0/8]",
)
IMAGE_PREFIXES = Form(
    "a list of image repository prefixes (registry/path, no tag, no spaces)",
    list_of(matching(r"[a-z0-9][a-z0-9._:/-]*", 255)),
    example="[docker.io/scitrera/]",
)
HF_REPOS = Form(
    "a list of Hugging Face repo ids (org/name)",
    list_of(matching(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*", 255)),
    example="[nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4]",
)


def _image(value: Any) -> str | None:
    wrong = imageref.problem(value)
    return None if wrong is None else f"{shown(value)} {wrong}"


IMAGE = Form(imageref.DESCRIPTION, _image, example=imageref.EXAMPLE)


def _name_text(value: Any) -> str | None:
    wrong = _text(value)
    if wrong:
        return wrong
    if not value or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value) or len(value) > 255:
        return f"{shown(value)} is empty, over 255 characters or has control characters"
    return None


NAME_TEXT = Form("text of at most 255 characters without control characters", _name_text)


# --- JSON Schema errors in words ------------------------------------------------------------


def schema_problem(err: Any, patterns: Mapping[str, str]) -> tuple[str, str]:
    """(message, fix) of one ``jsonschema`` error, in words; ``patterns`` names the form each
    regular expression of the schema stands for."""
    value, validator, expected = err.instance, err.validator, err.validator_value
    if validator == "type":
        wanted = expected if isinstance(expected, str) else expected[0]
        words = TYPE_WORDS.get(wanted, wanted)
        return f"is {type_name(value)}, not {words}", yaml_hint(value, wanted)
    if validator == "pattern":
        form = patterns.get(expected) or err.schema.get("description") or "the accepted form"
        limit = re.search(r"at most (\d+) characters", form)
        if limit and isinstance(value, str) and len(value) > int(limit.group(1)):
            return f"is {len(value)} characters long (at most {limit.group(1)})", f"write {form}"
        return f"{shown(value)} does not have the accepted form", f"write {form}"
    if validator == "format":
        form = patterns.get(expected, expected)
        wrong = imageref.problem(value) if expected == "image-reference" else None
        return f"{shown(value)} {wrong or 'is not ' + form}", f"write {form}"
    if validator == "enum":
        choices = ", ".join(map(str, expected))
        return f"{shown(value)} is not one of {choices}", f"use one of: {choices}"
    if validator == "const":
        return f"is {shown(value)}", f"write {shown(expected)}"
    if validator in ("minimum", "exclusiveMinimum"):
        return f"is {shown(value)}, below {expected}", f"use {expected} or more"
    if validator in ("maximum", "exclusiveMaximum"):
        return f"is {shown(value)}, above {expected}", f"use {expected} or less"
    if validator == "minLength":
        return "is empty" if expected == 1 else "is too short", "write a value"
    if validator == "maxLength":
        return f"is {len(value)} characters long (at most {expected})", "shorten it"
    if validator == "minItems":
        return "lists nothing" if expected == 1 else "lists too few items", "add items"
    if validator == "maxItems":
        return f"lists {len(value)} items (at most {expected})", "drop some"
    if validator == "uniqueItems":
        return "lists an item twice", "list each item once"
    if validator == "required":
        missing = str(err.message).split("'")[1] if "'" in str(err.message) else "a key"
        return f"{missing} is missing", "add it"
    if validator is False or err.schema is False:
        return "does not belong here", "remove it"
    return "is not accepted here", "see docs/reference/inventory.md"


def unknown_key_fix(key: object, known: Mapping[str, Any] | list[str]) -> str:
    """The fix for an unknown key: the closest known one, else the known keys."""
    names = sorted(map(str, known))
    close = difflib.get_close_matches(str(key), names, 1)
    return f"did you mean {close[0]}?" if close else f"remove it; known keys: {', '.join(names)}"
