"""The serving engines: one module, one :class:`~sparkrack.serving.engines.base.Engine` each.

``ENGINES`` is the explicit table of them. Adding an engine is one module here (its class and
knob table, rules, memory semantics) plus its tests, and one line in ``ENGINES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrack.errors import Problem, SparkrackError
from sparkrack.serving.engines import sglang, trtllm, vllm
from sparkrack.serving.engines.base import Engine, FileSet, PodExtras, Rank

ENGINES: dict[str, Engine] = {e.name: e for e in (sglang.ENGINE, vllm.ENGINE, trtllm.ENGINE)}
DEFAULT_ENGINE = sglang.ENGINE.name


def engine(name: str) -> Engine:
    """The engine called ``name``."""
    found = ENGINES.get(name)
    if found is None:
        raise SparkrackError(
            Problem(
                "engine",
                name,
                "is not a serving engine sparkrack knows",
                f"use one of: {', '.join(sorted(ENGINES))}",
                "schema",
            )
        )
    return found


def engine_of(data: Mapping[str, Any]) -> Engine:
    """The engine a profile (its raw mapping) names, in the variant its topology needs;
    ``sglang`` when it names none."""
    return engine(str(data.get("engine", DEFAULT_ENGINE))).for_profile(data)


__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "Engine",
    "FileSet",
    "PodExtras",
    "Rank",
    "engine",
    "engine_of",
]
