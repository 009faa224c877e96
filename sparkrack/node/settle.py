"""Whether a converge may drop a Spark's page cache (the settle step spark_base runs).

The settle step writes ``/proc/sys/vm/drop_caches``: on a Spark whose engine is serving or
starting, that throws its model weights out of the page cache, and the next load reads them
from disk again instead of from memory. The converge drops the cache only where no engine pod is
placed on the Spark, where it knows that for sure; an inventory switch
(``spark_base_settle_on_serving``) drops it everywhere.

The pods come from one read of the K3s API on the control machine (the engine pods' selector,
:data:`sparkrack.contract.ENGINE_SELECTOR`): no kubeconfig there means no cluster yet, so no
engine pod; a kubeconfig with an API that did not answer means nothing is known, and the step
leaves the cache alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PLACED_PHASES = ("Pending", "Running")
"""Phases of an engine pod that holds (Running) or is about to read (Pending: scheduled, its
image or weights still coming) the weights through this Spark's page cache."""


@dataclass(frozen=True)
class ConvergeFlush:
    flush: bool
    why: str


def engine_pods_on(node: str, pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Names of the engine pods placed on ``node`` and not being deleted, sorted."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if spec.get("nodeName") != node or meta.get("deletionTimestamp"):
            continue
        if phase in PLACED_PHASES:
            found.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    return sorted(found)


def converge_flush(
    node: str,
    read: Mapping[str, Any] | None,
    kubeconfig_exists: bool,
    flush_on_serving: bool = False,
    check_mode: bool = False,
) -> ConvergeFlush:
    """Decide for ``node`` from ``read``: the registered result of the API read (``resources``,
    or ``failed``/``msg``; None or skipped when it did not run). A check run (``--check``) drops
    nothing: it changes no host, and on a Spark it never converged the settle step is not there."""
    if check_mode:
        return ConvergeFlush(False, "a check run (--check) drops nothing and runs no settle step")
    if flush_on_serving:
        return ConvergeFlush(True, "spark_base_settle_on_serving is true: drops the cache anyway")
    if not kubeconfig_exists:
        return ConvergeFlush(True, "no K3s cluster yet (no kubeconfig): no engine pod can run")
    if read is None or read.get("skipped"):
        return ConvergeFlush(False, "the engine pods were not read: the page cache is left alone")
    if read.get("failed") or not isinstance(read.get("resources"), list):
        why = str(read.get("msg") or "no answer")[:200]
        return ConvergeFlush(
            False,
            f"the K3s API did not list the engine pods ({why}): it cannot tell whether this "
            "Spark serves, so the page cache is left alone",
        )
    placed = engine_pods_on(node, read["resources"])
    if placed:
        return ConvergeFlush(
            False,
            f"engine pod(s) {', '.join(placed)} on this Spark: dropping the page cache would "
            "cost them a cold reload of the weights (spark_base_settle_on_serving: true drops it)",
        )
    return ConvergeFlush(True, "no engine pod on this Spark")
