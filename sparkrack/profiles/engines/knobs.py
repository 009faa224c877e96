"""Knob kinds the single-Spark engines need on top of :class:`sparkrack.profiles.registry.Knob`.

* :class:`EnvKnob` — a profile key that becomes ``ENV=<value>`` (vLLM's ``VLLM_*`` backends);
* :class:`RuntimeKnob` — a flag whose value comes from the deployment (host, port, the path of
  a rendered config file), listed in the table so the command keeps the seed's flag order and
  ``extra_args`` may not repeat it;
* :class:`PositionalKnob` — a bare word (``trtllm-serve <model>``);
* :class:`ConfigKnob` — a key of an engine config file (TensorRT-LLM's
  ``extra-llm-api-config.yml``) with an exact nested schema, so a typo inside is refused too.

They are still ``Knob`` s: the schema, the env renderer and the ``extra_args``/``env`` rules of the
profiles team treat them like any other registry entry.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sparkrack.errors import Problem
from sparkrack.profiles.registry import Knob, Type
from sparkrack.profiles.rules import Ctx


@dataclass(frozen=True)
class EnvKnob(Knob):
    """``profile key`` -> ``ENV=value``."""

    def env_pair(self, value: Any) -> tuple[str, str] | None:
        if self.env is None or value is None:
            return None
        return self.env, str(value)

    def describe(self) -> str:
        return f"{self.help} (env {self.env})"


@dataclass(frozen=True)
class RuntimeKnob(Knob):
    """A flag the renderer fills from the deployment; never a profile key."""

    runtime: str = ""
    """Which deployment value: ``host``, ``port`` or ``config`` (the rendered config file)."""

    def describe(self) -> str:
        return f"set by sparkrack ({self.flag})"


@dataclass(frozen=True)
class PositionalKnob(Knob):
    """A profile key rendered as a bare word."""

    def args(self, value: Any) -> list[str]:
        return [] if value is None else [str(value)]


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


def k(key: str, type_: Type, help_: str, flag: str | None = None, **kw: Any) -> Knob:
    return Knob(key=key, type=type_, help=help_, flag=flag, **kw)


def env(key: str, type_: Type, help_: str, name: str, **kw: Any) -> Knob:
    if type_ == "boolean":
        return Knob(key=key, type=type_, help=help_, env=name, kind="env_bool", **kw)
    return EnvKnob(key=key, type=type_, help=help_, env=name, **kw)


def runtime(flag: str, what: str) -> RuntimeKnob:
    return RuntimeKnob(key=f"runtime.{what}", type="string", help=what, flag=flag, runtime=what)


def cfg(key: str, type_: Type, help_: str, properties: dict[str, Any] | None = None) -> ConfigKnob:
    return ConfigKnob(key=key, type=type_, help=help_, properties=properties or {})


def long_context_problems(
    c: Ctx, engine_name: str, length_key: str, env_name: str, rule_id: str
) -> Iterator[Problem]:
    """A context length beyond the model config's ``max_position_embeddings`` without the engine's
    allow-long environment knob (``<engine>.allow_long_max_model_len``) — both engines refuse it."""
    block = c.data.get(engine_name) or {}
    length, cap = block.get(length_key), c.info("max_position_embeddings")
    if (
        c.data.get("engine") == engine_name
        and isinstance(length, int)
        and isinstance(cap, int)
        and length > cap
        and block.get("allow_long_max_model_len") is not True
    ):
        yield c.p(
            f"{engine_name}.{length_key}",
            f"{length} exceeds the model config's max_position_embeddings {cap}; "
            f"{engine_name} refuses it",
            f"set {engine_name}.allow_long_max_model_len: true ({env_name}=1)",
            rule_id,
        )
