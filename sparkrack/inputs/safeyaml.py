"""Strict YAML for files that people write: profiles, matrices, kubeconfigs, signatures.

``yaml.safe_load`` executes nothing, but it still trusts its input in other ways: the last of
two equal keys wins silently, a few lines of aliases expand to gigabytes (or to a cycle), deep
nesting ends in a ``RecursionError``, bytes that are not UTF-8 raise ``UnicodeDecodeError``, and
``.nan`` / ``.inf`` pass every numeric range check. This loader refuses each of those up front,
with a :class:`~sparkrack.errors.Problem` that names the file, the key (or ``(yaml)`` when the
problem is not at a key) and the fix, in time and memory proportional to the file's size:

* size: at most :attr:`Limits.max_bytes` bytes are read;
* encoding: UTF-8 only (a UTF-8 byte-order mark is allowed); UTF-16/32 and NUL bytes refused;
* depth: nesting is bounded while composing, before Python's recursion limit is near;
* aliases: their count is bounded, an alias inside its own anchor is refused, and the size and
  depth of the document *after* alias expansion are bounded (computed on the alias graph,
  without expanding it);
* keys: duplicates are refused (merge keys ``<<`` keep their meaning), as are keys that are
  not scalars;
* numbers: NaN and infinities are refused, as are integers Python will not convert.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from sparkrack.errors import Problem, SparkrackError

ROOT = "(yaml)"
MERGE_TAG = "tag:yaml.org,2002:merge"
FLOAT_TAG = "tag:yaml.org,2002:float"

_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\xfe\xff", "UTF-16"),
    (b"\xff\xfe", "UTF-16"),
)


@dataclass(frozen=True)
class Limits:
    """Bounds on one document. The defaults are far above any file sparkrack ships."""

    max_bytes: int = 512 * 1024
    max_depth: int = 32
    max_aliases: int = 64
    max_nodes: int = 5_000
    """Scalars and collections, counted as written and again after alias expansion."""


DEFAULT_LIMITS = Limits()


class _Refused(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _where(node: Node | None) -> str:
    if node is None or node.start_mark is None:
        return ""
    return f" (line {node.start_mark.line + 1})"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that bounds depth and aliases while composing."""

    def __init__(self, text: str, source: str, limits: Limits) -> None:
        super().__init__(text)
        self.source = source
        self.limits = limits
        self.open_nodes: list[Node] = []
        self.alias_count = 0
        self.node_count = 0

    def refuse(self, key: str, message: str, fix: str, rule: str) -> _Refused:
        return _Refused(Problem(self.source, key, message, fix, rule))

    def next_event(self) -> Any:
        return self.peek_event()  # type: ignore[no-untyped-call]

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.next_event()
            self.alias_count += 1
            if self.alias_count > self.limits.max_aliases:
                raise self.refuse(
                    ROOT,
                    f"more than {self.limits.max_aliases} aliases (line {event.start_mark.line + 1})",
                    "write the values out instead of repeating them with *aliases",
                    "yaml-alias",
                )
            target = self.anchors.get(event.anchor)
            ancestors = [*self.open_nodes, parent]
            if target is not None and any(target is n for n in ancestors):
                raise self.refuse(
                    ROOT,
                    f"alias *{event.anchor} refers to a node that contains it "
                    f"(line {event.start_mark.line + 1})",
                    "remove the recursive alias",
                    "yaml-alias",
                )
            return super().compose_node(parent, index)
        self.node_count += 1
        if self.node_count > self.limits.max_nodes:
            mark = self.next_event().start_mark
            raise self.refuse(
                ROOT,
                f"has more than {self.limits.max_nodes} values (line {mark.line + 1})",
                "this is not a file sparkrack reads; check the path",
                "yaml-size",
            )
        if len(self.open_nodes) >= self.limits.max_depth:
            mark = self.next_event().start_mark
            raise self.refuse(
                ROOT,
                f"nesting deeper than {self.limits.max_depth} levels (line {mark.line + 1})",
                "flatten the document",
                "yaml-depth",
            )
        if parent is not None:
            self.open_nodes.append(parent)
        try:
            return super().compose_node(parent, index)
        finally:
            if parent is not None:
                self.open_nodes.pop()


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(loader: _StrictLoader, root: Node) -> None:
    """Size and depth of the document after alias expansion, computed once per node."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size:
            continue
        kids = _children(node)
        if not done:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in size)
            continue
        size[id(node)] = 1 + sum(size[id(k)] for k in kids)
        depth[id(node)] = 1 + max((depth[id(k)] for k in kids), default=0)
        if size[id(node)] > loader.limits.max_nodes:
            raise loader.refuse(
                ROOT,
                f"expands to more than {loader.limits.max_nodes} values through aliases"
                f"{_where(node)}",
                "write the values out instead of nesting *aliases",
                "yaml-alias",
            )
        if depth[id(node)] > loader.limits.max_depth:
            raise loader.refuse(
                ROOT,
                f"nests deeper than {loader.limits.max_depth} levels through aliases{_where(node)}",
                "flatten the document",
                "yaml-depth",
            )


YAML_TAGS = "tag:yaml.org,2002:"


def _known_tag(tag: str, extra: frozenset[str]) -> bool:
    """A tag of YAML's own types (not ``!!python/...``), or one of ``extra``."""
    return tag in extra or (tag.startswith(YAML_TAGS) and "/" not in tag[len(YAML_TAGS) :])


def _dotted(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _check_values(
    loader: _StrictLoader, root: Node, found: Scan | None = None, keys: tuple[Node, ...] = ()
) -> None:
    """Keys unique and scalar, numbers finite; walks the expanded (already bounded) tree. With
    ``found``: scalars tagged with one of its ``tags`` are left unconstructed and counted, and
    every YAML 1.1 surprise is noted under each mapping key above it (``keys``)."""
    stack: list[tuple[Node, str, tuple[Node, ...]]] = [(root, "", keys)]
    while stack:
        node, path, above = stack.pop()
        key = path or ROOT
        if found is not None and not _known_tag(node.tag, found.tags):
            raise loader.refuse(
                key,
                f"has the tag {node.tag}{_where(node)}, which no YAML reader of sparkrack accepts",
                "remove the tag",
                "yaml",
            )
        if isinstance(node, ScalarNode):
            if found is not None:
                if node.tag in found.tags:
                    found.tagged.append(Tagged(path, node.tag, _pos(node)))
                    continue
                found.note(node, path, above)
            try:
                value = loader.construct_object(node)
            except (ValueError, yaml.YAMLError) as exc:
                raise loader.refuse(
                    key, f"cannot be read{_where(node)}: {exc}", "write a plain value", "yaml"
                ) from None
            if node.tag == FLOAT_TAG and isinstance(value, float) and not math.isfinite(value):
                raise loader.refuse(
                    key,
                    f"is {node.value!r}{_where(node)}: NaN and infinities are not numbers here",
                    "write a finite number",
                    "yaml-non-finite",
                )
        elif isinstance(node, SequenceNode):
            stack.extend((child, _dotted(path, i), above) for i, child in enumerate(node.value))
        elif isinstance(node, MappingNode):
            seen: set[Any] = set()
            for k, v in node.value:
                if k.tag == MERGE_TAG:
                    stack.append((v, path, above))
                    continue
                if not isinstance(k, ScalarNode):
                    raise loader.refuse(
                        key,
                        f"has a key that is a {k.id}{_where(k)}",
                        "use plain scalar keys",
                        "yaml-key",
                    )
                try:
                    name = loader.construct_object(k)
                    hash(name)
                except (ValueError, TypeError, yaml.YAMLError) as exc:
                    raise loader.refuse(
                        key, f"has an unreadable key{_where(k)}: {exc}", "use plain keys", "yaml"
                    ) from None
                if name in seen:
                    raise loader.refuse(
                        _dotted(path, name),
                        f"is given twice{_where(k)}; YAML would silently keep the last one",
                        "keep one of them",
                        "yaml-duplicate-key",
                    )
                seen.add(name)
                stack.append((v, _dotted(path, name), (*above, k)))


def loads(text: str, source: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Parse one YAML document from ``text``; raise :class:`SparkrackError` on any refusal."""
    return _parse(text, source, limits, None)


def _parse(text: str, source: str, limits: Limits, found: Scan | None) -> Any:
    """Compose and check ``text``; build the document unless ``found`` collects a scan."""
    if len(text) > limits.max_bytes:
        raise SparkrackError(_size_problem(source, len(text), limits))
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text, source, limits)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(loader, node)
        _check_values(loader, node, found)
        return loader.construct_document(node) if found is None else None
    except _Refused as exc:
        raise SparkrackError(exc.problem) from None
    except yaml.MarkedYAMLError as exc:
        raise SparkrackError(_syntax_problem(source, exc)) from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        text_of = " ".join(str(exc).split())
        raise SparkrackError(
            Problem(source, ROOT, f"is not valid YAML: {text_of}", "fix the syntax", "yaml")
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def _size_problem(source: str, size: int, limits: Limits) -> Problem:
    return Problem(
        source,
        ROOT,
        f"is larger than {limits.max_bytes} bytes ({size}+)",
        "this is not a file sparkrack reads; check the path",
        "yaml-size",
    )


def decode(data: bytes, source: str) -> str:
    """UTF-8 text of ``data``; anything else is refused with the offending line."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return _refuse_encoding(source, f"is {name} (byte-order mark)")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        return _refuse_encoding(source, f"contains NUL bytes (line {line}): UTF-16 or binary")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        bad = data[exc.start : exc.start + 1].hex()
        return _refuse_encoding(source, f"is not UTF-8 (byte 0x{bad} on line {line})")


def _refuse_encoding(source: str, message: str) -> str:
    raise SparkrackError(Problem(source, ROOT, message, "save the file as UTF-8", "yaml-encoding"))


def load_bytes(data: bytes, source: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    if len(data) > limits.max_bytes:
        raise SparkrackError(_size_problem(source, len(data), limits))
    return loads(decode(data, source), source, limits)


def load_file(path: str | Path, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Read and parse ``path``; at most ``limits.max_bytes + 1`` bytes are ever read."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limits.max_bytes + 1)
    except OSError as exc:
        raise SparkrackError(
            Problem(
                str(path), ROOT, f"cannot be read: {exc.strerror or exc}", "check the path", "yaml"
            )
        ) from None
    return load_bytes(data, str(path), limits)


# --- scanning files another loader reads (Ansible's inventories) ----------------------------

_INT_SURPRISE = re.compile(r"[-+]?(0[0-7_]+|0b[01_]+|[0-9][0-9_]*(:[0-5]?[0-9])+|[0-9]+_[0-9_]*)")
_FLOAT_SURPRISE = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*|.*[0-9]_.*")
INT_TAG = "tag:yaml.org,2002:int"
TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


def _pos(node: Node) -> tuple[int, int]:
    """(line, column) of a node, both from 1 (as ansible-core's ``Origin`` counts them)."""
    return node.start_mark.line + 1, node.start_mark.column + 1


@dataclass(frozen=True)
class Surprise:
    """A value YAML 1.1 converts without saying so (``010`` is 8, ``1:30`` is 90)."""

    path: str
    """Dotted path below the key it is filed under ("" for that key's own value)."""
    text: str
    """The value as written."""
    line: int
    what: str
    """What YAML made of it, in words."""


@dataclass(frozen=True)
class Tagged:
    path: str
    tag: str
    position: tuple[int, int]


@dataclass
class Scan:
    """What :func:`scan` found in a file, filed by the position of each mapping key."""

    tags: frozenset[str] = frozenset()
    surprises: dict[tuple[int, int], list[Surprise]] = field(default_factory=dict)
    tagged: list[Tagged] = field(default_factory=list)
    """Scalars with one of ``tags`` (``!vault``): their dotted path and position."""

    def note(self, node: ScalarNode, path: str, above: tuple[Node, ...]) -> None:
        if node.style is not None:  # quoted or block scalars are strings as written
            return
        what = None
        if node.tag == TIMESTAMP_TAG:
            what = "a date"
        elif (
            node.tag == INT_TAG
            and _INT_SURPRISE.fullmatch(node.value)
            or node.tag == FLOAT_TAG
            and _FLOAT_SURPRISE.fullmatch(node.value)
        ):
            what = "a number"
        if what is None:
            return
        parts = path.split(".")
        line = node.start_mark.line + 1
        for depth, key in enumerate(above):
            below = ".".join(parts[depth + 1 :])
            self.surprises.setdefault(_pos(key), []).append(Surprise(below, node.value, line, what))

    def under(self, position: tuple[int, int]) -> list[Surprise]:
        """The surprises below the mapping key at ``position``."""
        return list(self.surprises.get(position, []))


def scan(
    text: str, source: str, limits: Limits = DEFAULT_LIMITS, tags: frozenset[str] = frozenset()
) -> Scan:
    """Check ``text`` the way :func:`loads` does (size, depth, aliases, duplicate keys, finite
    numbers) without building the document, for a file another loader reads: scalars tagged
    with one of ``tags`` (Ansible's ``!vault``, ``!unsafe``) are counted, not constructed, and
    YAML 1.1 surprises (octal, sexagesimal and underscored numbers, unquoted dates) are noted."""
    found = Scan(tags=tags)
    _parse(text, source, limits, found)
    return found


def _syntax_problem(source: str, exc: yaml.MarkedYAMLError) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    what = ", ".join(filter(None, [exc.context, exc.problem])) or "syntax error"
    return Problem(
        source, ROOT, f"is not valid YAML: {what}{where}", "fix the syntax at that line", "yaml"
    )
