"""A fourth serving engine, for the test that adding one takes this file and one table row.

Everything sparkrack needs to know about an engine is here and nowhere else: its name and
entry point, its knob table (profile keys -> flags and environment), its profile section, a
seed-trap rule, its memory semantics, an image it knows, and its metrics.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from sparkrack.errors import Problem
from sparkrack.planner.memory import RecurrentPool, Serving, per_sequence_pool
from sparkrack.serving.engines.base import (
    SingleSparkEngine,
    integer,
    number,
    section,
)
from sparkrack.serving.engines.facts import Metric, Quantity
from sparkrack.serving.profile.images import ImageFacts
from sparkrack.serving.profile.knobs import HF_ID, Knob, env, k, runtime
from sparkrack.serving.profile.ruleset import Ctx, RuleSet

NAME = "fakeserve"
IMAGE = "example.org/fakeserve:1.2.3"

KNOBS: tuple[Knob, ...] = (
    k("model", "string", "Hugging Face model id", "--model", pattern=HF_ID),
    runtime("--port", "port"),
    k("fakeserve.max_len", "integer", "context length", "--max-len", minimum=1),
    k("fakeserve.gpu_share", "number", "memory fraction", "--gpu-share", minimum=0, maximum=1),
    env("fakeserve.fast_path", "boolean", "the fast kernels", "FAKESERVE_FAST"),
)

RULES = RuleSet()


@RULES.add("fakeserve-share", "fake seed", "gpu_share above 0.95 starves the OS")
def _share(c: Ctx) -> Iterator[Problem]:
    share = c.block(NAME).get("gpu_share")
    if isinstance(share, float) and share > 0.95:
        yield c.p(
            f"{NAME}.gpu_share", f"{share} leaves the OS nothing", "use 0.95", "fakeserve-share"
        )


class FakeMemory:
    name: str = NAME
    fraction_key: str = "gpu_share"
    pool_fix: str = "raise gpu_share"
    context_key: str | None = "max_len"
    assumptions: tuple[str, ...] = ("fakeserve: KV = gpu_share x (usable - weights - overhead)",)

    def budget(
        self, fraction: float | None, usable: float, overhead: float, per_gpu: float, total: float
    ) -> tuple[float, float | None, float]:
        f = 0.8 if fraction is None else fraction
        return f, None, f * (usable - per_gpu - overhead)

    def startup_refusal(self, fraction: float, usable: float, total: float) -> str | None:
        return None

    def recurrent(
        self, s: Serving, per_request: float, rest: float, notes: list[str]
    ) -> RecurrentPool:
        return per_sequence_pool(s, per_request, 64)


class FakeServe(SingleSparkEngine):
    name = NAME
    entry = ("fakeserve", "run")
    knobs = KNOBS
    sections = (NAME,)
    rules = RULES
    memory = FakeMemory()
    images = MappingProxyType({IMAGE: ImageFacts("1.2.3", None, "fake seed")})
    metrics = (Metric("fakeserve_tokens", "counter", NAME, "fakeserve/metrics.py", ("1.2.3",)),)
    recorded = MappingProxyType({Quantity.GENERATED: "fakeserve_tokens"})

    def serving(self, data: Mapping[str, Any]) -> Serving:
        block = section(data, NAME)
        return Serving(
            memory=self.memory,
            tp=1,
            memory_fraction=number(block.get("gpu_share")),
            context_length=integer(block.get("max_len")),
        )


ENGINE = FakeServe()
