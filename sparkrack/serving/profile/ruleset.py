"""The types every validation rule uses: the context a rule reads, a rule, a named set of rules.

Generic rules live in :mod:`sparkrack.serving.profile.rules`; each engine module keeps its own
:class:`RuleSet` (its seed traps), which its :class:`~sparkrack.serving.engines.base.Engine`
returns. Nothing registers itself by being imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sparkrack.errors import Problem
from sparkrack.planner.memory import Serving
from sparkrack.serving.profile.images import ImageFacts

Check = Callable[["Ctx"], Iterator[Problem]]


class EngineView(Protocol):
    """What the generic rules and the capacity planner ask of a profile's engine
    (:class:`sparkrack.serving.engines.base.Engine` answers)."""

    name: str
    allowed_options: Mapping[str, bool]

    def owner_of(self, word: str) -> str | None: ...

    def extra_refusal(self, word: str) -> tuple[str, str] | None: ...

    def value_refusal(self, words: Sequence[str], index: int) -> tuple[str, str] | None: ...

    def owned_env(self) -> dict[str, str]: ...

    def jit_env(self) -> dict[str, str]: ...

    def bind_variables(self) -> dict[str, str]: ...

    def serving(self, data: Mapping[str, Any]) -> Serving: ...


@dataclass(frozen=True)
class Ctx:
    """A profile as a rule sees it: the raw mapping, its file, the Spark count, its engine (resolved
    once by the caller) and the facts about its image."""

    data: dict[str, Any]
    source: str
    nodes: int | None
    engine: EngineView
    image: ImageFacts | None

    def block(self, name: str) -> dict[str, Any]:
        value = self.data.get(name)
        return value if isinstance(value, dict) else {}

    def info(self, key: str, default: Any = None) -> Any:
        return self.block("model_info").get(key, default)

    @property
    def arch(self) -> str:
        return str(self.info("architecture", ""))

    def topo(self, key: str) -> int:
        value = self.block("topology").get(key, 1)
        return value if isinstance(value, int) and not isinstance(value, bool) else 1

    @property
    def tp(self) -> int:
        return self.topo("tp")

    @property
    def pp(self) -> int:
        return self.topo("pp")

    @property
    def ep(self) -> int:
        return self.topo("ep")

    @property
    def moe(self) -> bool:
        routed = (self.info("experts") or {}).get("routed", 0)
        return isinstance(routed, int) and routed > 0

    def p(self, key: str, message: str, fix: str, rule: str) -> Problem:
        return Problem(self.source, key, message, fix, rule)


@dataclass(frozen=True)
class Rule:
    id: str
    seed: str
    summary: str
    check: Check


class RuleSet:
    """An ordered list of rules, filled with the :meth:`add` decorator in the module that owns it."""

    def __init__(self) -> None:
        self._rules: list[Rule] = []

    def add(self, rule_id: str, seed: str, summary: str) -> Callable[[Check], Check]:
        def deco(fn: Check) -> Check:
            self._rules.append(Rule(rule_id, seed, summary, fn))
            return fn

        return deco

    def __iter__(self) -> Iterator[Rule]:
        return iter(tuple(self._rules))

    def __len__(self) -> int:
        return len(self._rules)
