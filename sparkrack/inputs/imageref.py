"""Container image references: their syntax, their length limits and how they pin what runs.

One grammar for every image sparkrack renders (a profile's ``image``, ``serving_fetch_image``,
the gateway's), after the OCI distribution spec and the reference grammar container runtimes
parse: ``[registry[:port]/]path[:tag][@sha256:<64 hex>]``. Path components are lower-case;
a tag is at most 128 characters; the name (registry and path) at most 255, the limit clients
and registries put on it. Only ``sha256`` digests are accepted: the one algorithm every
registry serves.

A reference *moves* when what it names can change without the reference changing: a ``latest``
or ``*nightly*`` tag in any letter case, and a reference without tag or digest, which the
runtime reads as ``:latest``. A digest never moves.
"""

from __future__ import annotations

import re

NAME_MAX = 255
"""Characters of registry + path (the reference grammar's ``NameTotalLengthMax``)."""
TAG_MAX = 128
"""Characters of a tag (OCI distribution spec: ``[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}``)."""
DIGEST_HEX = 64

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
PATTERN = (
    rf"^{_COMPONENT}(?::[0-9]{{1,5}})?(?:/{_COMPONENT})*"
    rf"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{TAG_MAX - 1}}})?(?:@sha256:[a-f0-9]{{{DIGEST_HEX}}})?(?!\n)$"
)
"""The syntax as one regular expression (a JSON Schema ``pattern``, so ``(?!\\n)$`` and not
``\\Z``: editors read the schema with ECMAScript regexes); lengths: :func:`problem`."""
MAX_LENGTH = NAME_MAX + 1 + TAG_MAX + len("@sha256:") + DIGEST_HEX
DESCRIPTION = (
    "an image reference: [registry[:port]/]name[:tag][@sha256:<64 hex digits>], the name in "
    f"lower case, no spaces, at most {NAME_MAX} characters before the tag and a tag of at most "
    f"{TAG_MAX}"
)
EXAMPLE = "registry.example.com/team/image:1.0@sha256:<digest>"

_SYNTAX = re.compile(PATTERN)
_DIGEST = re.compile(rf"@sha256:([a-f0-9]{{{DIGEST_HEX}}})\Z")
_TAG = re.compile(r":([^:/@]+)\Z")


def problem(value: object) -> str | None:
    """What is wrong with ``value`` as an image reference, in words; None when it is one."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not text"
    if not value:
        return "is empty"
    if value.startswith("-"):
        return "starts with '-': a runtime would read it as an option"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return "contains a space or a control character"
    if "@" in value and not _DIGEST.search(value):
        return "has a digest that is not sha256: followed by 64 lower-case hex digits"
    name = without_digest(value)
    tag = _TAG.search(name)
    if tag and len(tag.group(1)) > TAG_MAX:
        return f"has a tag of {len(tag.group(1))} characters (at most {TAG_MAX})"
    bare = name[: tag.start()] if tag else name
    if len(bare) > NAME_MAX:
        return f"has a name of {len(bare)} characters (at most {NAME_MAX})"
    if not _SYNTAX.match(value):
        return "is not a valid reference (upper case in the name, a stray ':' or '/', or '..')"
    return None


def without_digest(image: str) -> str:
    """``repo[:tag]`` of a reference (``repo:tag@sha256:…`` -> ``repo:tag``)."""
    return image.split("@", 1)[0]


def digest_of(image: str) -> str | None:
    """The ``sha256:…`` digest a reference pins, or None."""
    found = _DIGEST.search(image)
    return f"sha256:{found.group(1)}" if found else None


def tag_of(image: str) -> str | None:
    """The tag a reference names, as written; None when it names none (the runtime's latest)."""
    found = _TAG.search(without_digest(image))
    return found.group(1) if found else None


def is_moving_tag(image: str) -> bool:
    """True when the reference names a moving target: ``latest``/``*nightly*`` in any case, or
    no tag at all (read as ``latest``); a digest (``@sha256:…``) never moves."""
    if digest_of(image):
        return False
    tag = tag_of(image)
    if tag is None:
        return True
    lowered = tag.lower()
    return lowered == "latest" or "nightly" in lowered


def pin_state(image: str) -> str:
    """How a reference pins what runs: ``digest``, ``moving tag`` or ``tag``."""
    if digest_of(image):
        return "digest"
    return "moving tag" if is_moving_tag(image) else "tag"
