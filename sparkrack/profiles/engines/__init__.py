"""Engines besides SGLang: vLLM and TensorRT-LLM on one Spark (issue 7, seed 004).

Importing this package adds each engine's knob table to the profiles registry
(``registry.ENGINES`` / ``ENGINE_SECTIONS``) — so the JSON Schema, ``extra_args``/``env`` rules
and the env renderer pick them up — and its seed rules to ``rules.RULES``.
``sparkrack.profiles`` imports it; the SGLang renderer hands ``engine: vllm|trtllm`` profiles
to :mod:`sparkrack.profiles.engines.single`.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

from sparkrack.errors import Problem
from sparkrack.profiles import registry
from sparkrack.profiles.engines import capacity as _capacity  # noqa: F401  (planner rules)
from sparkrack.profiles.engines import trtllm, vllm
from sparkrack.profiles.rules import Ctx, rule

ENGINE_MODULES: dict[str, ModuleType] = {vllm.NAME: vllm, trtllm.NAME: trtllm}
SINGLE_NODE_ENGINES: tuple[str, ...] = tuple(ENGINE_MODULES)

for _module in ENGINE_MODULES.values():
    registry.ENGINES[_module.NAME] = _module.KNOBS
    registry.ENGINE_SECTIONS[_module.NAME] = _module.SECTIONS


def is_single_node(engine_name: str) -> bool:
    return engine_name in SINGLE_NODE_ENGINES


@rule(
    "single-node-topology",
    "seed 004 (one GB10 per Spark: tensor-parallel-size 1, expert parallelism not applicable)",
    "vLLM/TensorRT-LLM profiles run on one Spark: tp = pp = ep = 1",
)
def _single(c: Ctx) -> Iterator[Problem]:
    if not is_single_node(str(c.data.get("engine", "sglang"))):
        return
    for key, value in (("tp", c.tp), ("pp", c.pp), ("ep", c.ep)):
        if value != 1:
            yield c.p(
                f"topology.{key}",
                f"{key}={value}, but {c.data.get('engine')} runs on a single Spark (one GPU)",
                f"set topology.{key}: 1 (multi-Spark serving is engine: sglang)",
                "single-node-topology",
            )
    if c.nodes is not None and c.nodes < 1:
        yield c.p("topology", "the inventory has no Spark", "add a Spark", "single-node-topology")


__all__ = ["ENGINE_MODULES", "SINGLE_NODE_ENGINES", "is_single_node"]
