"""The capacity planner's refusals as profile rules (``sparkrack validate`` refuses what cannot fit).

One rule per planner refusal id, each running :func:`sparkrack.planner.capacity_problems` and
keeping its own id. Registered from outside ``rules.py`` like the engines' rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sparkrack.errors import Problem
from sparkrack.planner import RULE_CONTEXT, RULE_POOL, RULE_WEIGHTS, capacity_problems
from sparkrack.profiles.rules import Ctx, rule

SUMMARIES = {
    RULE_WEIGHTS: "the weights per GPU exceed a Spark's usable unified memory",
    RULE_POOL: "the memory fraction leaves nothing for the KV cache after the weights",
    RULE_CONTEXT: "vLLM/TRT-LLM: one full-length sequence does not fit the KV pool",
}


def _only(rule_id: str) -> Callable[[Ctx], Iterator[Problem]]:
    def check(c: Ctx) -> Iterator[Problem]:
        for problem in capacity_problems(c.data, c.nodes, c.source):
            if problem.rule == rule_id:
                yield problem

    return check


for _id, _summary in SUMMARIES.items():
    rule(_id, "sparkrack.planner (model_info weights + the engine's memory rule)", _summary)(
        _only(_id)
    )
