"""Knob types: one row of an engine's table, mapping a profile key to its engine-side form.

A profile key is a dotted path into the profile (``sglang.attention_backend``,
``speculative.num_steps``, ``topology.tp``). Each engine module (``engines/<name>.py``) owns one
tuple of knobs; the JSON Schema of the profile, the launch command, the environment, the
engine config files and the ``extra_args``/``env`` refusals are all derived from those tables.

Kinds of row:

* :class:`Knob` — ``--flag V`` / ``--flag`` (bool) / ``--flag '<json>'`` / ``ENV=1|0``;
* :class:`EnvKnob` — a profile key that becomes ``ENV=<value>``;
* :class:`RuntimeKnob` — a deployment flag (``--nnodes``, ``--host``, the path of a rendered
  config file): its value comes from the deployment, never from the profile, and it sits in the
  table so the command keeps the seed's flag order and ``extra_args`` may not repeat it;
* :class:`PositionalKnob` — a bare word (``trtllm-serve <model>``);
* :class:`ConfigKnob` — a key of an engine config file with an exact nested schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sparkrack.inputs import imageref

REFUSED_KEYWORD = "x-refused"
"""The profile schema's keyword for an object's refused fields (field -> why)."""
Kind = Literal["value", "bool", "json", "env_bool"]
Code = Literal["model-file", "repo"]
"""How a knob's value makes the engine load code (:mod:`sparkrack.serving.trust` gates it):
``model-file``, a file of the model repo the engine imports whatever ``trust_remote_code`` says;
``repo``, another repo the engine loads with the profile's ``trust_remote_code`` (a draft model)."""
Type = Literal["integer", "number", "string", "boolean", "object"]


@dataclass(frozen=True)
class Knob:
    """One profile key and its engine-side form."""

    key: str
    """Dotted path in the profile, e.g. ``sglang.mem_fraction_static``."""
    type: Type
    help: str
    flag: str | None = None
    """CLI flag; ``None`` for environment-only knobs."""
    aliases: tuple[str, ...] = ()
    """Other spellings the engine's parser maps to the same option (checked against the real
    parser by the engine-check tests)."""
    env: str | None = None
    """Environment variable for ``env_bool`` knobs."""
    kind: Kind = "value"
    """value: ``--flag V``; bool: ``--flag`` when true; json: ``--flag '<json>'``;
    env_bool: ``ENV=1``/``ENV=0`` (only when the profile sets the key)."""
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None
    """Regular expression a string value must match (identifiers that reach argv)."""
    since: str = ""
    """First engine version that has the flag/env ("" = every version sparkrack supports)."""
    env_true: str = "1"
    env_false: str = "0"
    code: Code | None = None
    """The value makes the engine load code (:data:`Code`); None: it does not."""
    code_field: str = ""
    """For an object value: the field that names the repo (``speculative_config.model``)."""
    fields: Mapping[str, Any] | None = None
    """For an object value: the exact JSON Schema of each field it may hold (None: any)."""
    refused_fields: Mapping[str, str] = field(default_factory=dict)
    """For an object value: fields the engine reads that a profile may not set, and why (the
    schema's ``x-refused``; the refusal says why instead of "unknown key")."""

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split(".", 1)[1] if "." in self.key else self.key

    @property
    def from_profile(self) -> bool:
        """True for keys a profile sets; False for rows the deployment fills in."""
        return True

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "description": self.describe()}
        if self.type == "object":
            out["additionalProperties"] = self.fields is None
            if self.fields is not None:
                out["properties"] = dict(self.fields)
            if self.refused_fields:
                out[REFUSED_KEYWORD] = dict(self.refused_fields)
        if self.choices:
            out["enum"] = list(self.choices)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.pattern is not None:
            out["pattern"] = self.pattern
        return out

    def describe(self) -> str:
        target = self.flag or f"env {self.env}"
        return f"{self.help} ({target})"

    def args(self, value: Any) -> list[str]:
        """CLI words for ``value`` (empty for env knobs and false booleans)."""
        if self.flag is None or value is None:
            return []
        if self.kind == "bool":
            return [self.flag] if value else []
        if self.kind == "json":
            return [self.flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        return [self.flag, scalar(value)]

    def env_pair(self, value: Any) -> tuple[str, str] | None:
        if self.kind != "env_bool" or self.env is None or value is None:
            return None
        return self.env, self.env_true if value else self.env_false


@dataclass(frozen=True)
class EnvKnob(Knob):
    """``profile key`` -> ``ENV=value``."""

    def env_pair(self, value: Any) -> tuple[str, str] | None:
        if self.env is None or value is None:
            return None
        return self.env, scalar(value)

    def describe(self) -> str:
        return f"{self.help} (env {self.env})"


class PodVariable(str):
    """A word that is a reference ``$(NAME)`` to a variable of the pod, which Kubernetes expands
    when it starts the container (a key from a Secret, the pod's address). Only the renderer
    makes these; every other word of a command is escaped so that it reaches the process
    unchanged (:func:`sparkrack.serving.objects.pod.no_expansion`)."""

    __slots__ = ()

    @classmethod
    def of(cls, name: str) -> PodVariable:
        return cls(f"$({name})")


@dataclass(frozen=True)
class RuntimeKnob(Knob):
    """A deployment flag the renderer fills in; never a profile key."""

    runtime: str = ""
    """Which deployment value (the engine module's ``runtime_value`` knows each name)."""

    @property
    def from_profile(self) -> bool:
        return False

    def describe(self) -> str:
        return f"set by sparkrack ({self.flag})"


@dataclass(frozen=True)
class PositionalKnob(Knob):
    """A profile key rendered as a bare word."""

    def args(self, value: Any) -> list[str]:
        return [] if value is None else [scalar(value)]


@dataclass(frozen=True)
class ConfigKnob(Knob):
    """A top-level key of an engine config file; ``properties`` is its exact JSON Schema."""

    properties: dict[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        if self.type != "object":
            return super().schema()
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": dict(self.properties),
            "description": self.describe(),
        }

    def describe(self) -> str:
        return f"{self.help} (config file key {self.name})"

    def args(self, value: Any) -> list[str]:
        return []


def scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def lookup(data: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted profile key (``None`` when any part is missing)."""
    section, _, name = key.partition(".")
    if not name:
        return data.get(section)
    block = data.get(section)
    return block.get(name) if isinstance(block, Mapping) else None


def k(key: str, type_: Type, help_: str, flag: str | None = None, **kw: Any) -> Knob:
    return Knob(key=key, type=type_, help=help_, flag=flag, **kw)


def env(key: str, type_: Type, help_: str, name: str, **kw: Any) -> Knob:
    if type_ == "boolean":
        return Knob(key=key, type=type_, help=help_, env=name, kind="env_bool", **kw)
    return EnvKnob(key=key, type=type_, help=help_, env=name, **kw)


def runtime(flag: str, what: str, aliases: tuple[str, ...] = ()) -> RuntimeKnob:
    return RuntimeKnob(
        key=f"runtime.{what}", type="string", help=what, flag=flag, runtime=what, aliases=aliases
    )


def cfg(key: str, type_: Type, help_: str, properties: dict[str, Any] | None = None) -> ConfigKnob:
    return ConfigKnob(key=key, type=type_, help=help_, properties=properties or {})


# --- identifier patterns: strings that reach argv or manifests (JSON Schema ``pattern``) ------
# ``(?!\n)$`` keeps a trailing newline out: Python's ``$`` also matches before a final newline.
HF_ID = r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(?!\n)$"
"""A Hugging Face repo id: ``owner/name``, no ``..``, no leading dash."""
IDENT = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}(?!\n)$"
"""A name an engine looks up (parser, backend, served model name): no leading dash, no spaces."""
ABS_PATH = r"^(?!.*\.\.)/[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*(?!\n)$"
"""An absolute path inside the container, without ``..``."""
IMAGE_REF = imageref.PATTERN
"""An OCI image reference (:mod:`sparkrack.inputs.imageref`; lengths are checked there)."""
REVISION = r"^[0-9a-f]{40}(?!\n)$"
"""A commit of a Hugging Face repo: 40 lower-case hex digits (a branch or tag name moves)."""
ARCHITECTURE = r"^[A-Za-z][A-Za-z0-9_]{0,127}(?!\n)$"
"""A transformers architecture class name (``config.json`` ``architectures[0]``)."""
WORD = r"^[^\x00-\x1f\x7f]*(?!\n)$"
"""A command-line word: no control characters (newlines included)."""
RELEASE = r"^\d+\.\d+\.\d+[a-z0-9.]*$"
"""An engine release: ``major.minor.patch`` and an optional suffix."""
TOKEN_TREE = r"^[\[\]() ,0-9]{1,4096}(?!\n)$"
"""A tree of draft-token positions, a Python literal of lists and tuples of digits."""
ENV_NAME = "^[A-Z_][A-Z0-9_]*$"
"""An environment variable's name."""

PATTERN_WORDS: dict[str, str] = {
    HF_ID: "a Hugging Face repo id: owner/name with letters, digits and _.-, no '..', at most "
    "96 characters each",
    IDENT: "a name: letters, digits and _.:-, starting with a letter or digit, at most 128 "
    "characters",
    ABS_PATH: "an absolute path of letters, digits and _.-, without '..'",
    IMAGE_REF: imageref.DESCRIPTION,
    REVISION: "a commit of the model repo: 40 lower-case hex digits",
    ARCHITECTURE: "a transformers class name: letters, digits and '_', starting with a letter",
    WORD: "text without control characters (no newline, tab or escape)",
    RELEASE: "a release number like 0.5.13",
    ENV_NAME: "an environment variable name: upper-case letters, digits and '_'",
    TOKEN_TREE: "a list of tuples of positions, e.g. [(0,), (0, 0)]",
    r"^\d{4}-\d{2}-\d{2}$": "a date written YYYY-MM-DD, quoted",
    r"^#[0-9]{1,7}$": "a pull request number written #12345",
    "image-reference": imageref.DESCRIPTION,
}
"""Each pattern of the profile schema in words: refusals say these, never the expression."""
