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


PLACEHOLDER_DOMAINS = ("example.com", "example.net", "example.org")
"""Second-level domains reserved for documentation (RFC 2606): no registry answers there."""
PLACEHOLDER_TLDS = ("example", "invalid", "test", "localdomain")
"""Top-level names reserved so that they never resolve on the internet (RFC 2606, RFC 6761)."""
_VERSION_WITH_LETTER_O = re.compile(r"v?[0-9Oo]+(?:\.[0-9Oo]+)+(?:[-+_].*)?")


def registry_of(image: str) -> str | None:
    """The registry host a reference names (its first component when it has a ``.`` or a
    ``:port``, or is ``localhost``), lower-cased and without the port; None for Docker Hub."""
    first, sep, _ = without_digest(image).partition("/")
    if not sep or not ("." in first or ":" in first or first == "localhost"):
        return None
    return first.split(":", 1)[0].lower()


def unreachable(image: str) -> str | None:
    """Why no node can pull ``image`` although its syntax is valid, in words; None otherwise.

    Two precise rules, decided without contacting a registry:

    * its registry is a reserved placeholder: ``example.com``/``.net``/``.org`` or a host under
      them, or a host under the reserved top-level names ``.example``, ``.invalid``, ``.test``,
      ``.localdomain``: such a name never resolves to a registry;
    * its tag is a typo'd version: dot-separated parts made only of digits and the letter
      ``O`` (``1.O``, ``2.O.1``, ``v1.O-rc1``), at least one ``O``: the letter typed for the
      digit zero, a tag no one publishes.
    """
    host = registry_of(image)
    if host is not None:
        labels = host.split(".")
        if ".".join(labels[-2:]) in PLACEHOLDER_DOMAINS or labels[-1] in PLACEHOLDER_TLDS:
            return (
                f"names the registry {host}, a reserved placeholder domain that no registry "
                "answers: the nodes cannot pull it"
            )
    tag = tag_of(image)
    if tag is not None and _VERSION_WITH_LETTER_O.fullmatch(tag):
        version = re.split(r"[-+_]", tag, maxsplit=1)[0]
        digits = version.removeprefix("v")
        if "o" in digits.lower() and any(ch.isdigit() for ch in digits):
            fixed = version[: len(version) - len(digits)] + re.sub("[Oo]", "0", digits)
            return (
                f"has the tag {tag}: a version with the letter O where a digit belongs "
                f"(did you mean {fixed}?)"
            )
    return None
