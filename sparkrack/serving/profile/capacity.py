"""The capacity planner applied to a profile: its engine supplies the memory semantics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrack.errors import Problem
from sparkrack.planner.memory import CapacityPlan, Hardware, model_info_from_dict, plan
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.base import section
from sparkrack.serving.profile.ruleset import EngineView


def _profile_data(profile: Any) -> tuple[Mapping[str, Any], str, str]:
    """(data, name, source) of a Profile object or a plain mapping."""
    if isinstance(profile, Mapping):
        return profile, str(profile.get("name", profile.get("model", ""))), ""
    data = getattr(profile, "data", None)
    if not isinstance(data, Mapping):
        raise TypeError(f"not a profile: {profile!r}")
    name = str(getattr(profile, "name", data.get("model", "")))
    return data, name, str(getattr(profile, "path", getattr(profile, "source", "")))


def plan_profile(
    profile: Any,
    nodes: int | None = None,
    hardware: Hardware | None = None,
    *,
    engine: EngineView | None = None,
) -> CapacityPlan:
    """Plan a loaded profile (``sparkrack.serving.load_profile``) or its raw mapping with its
    engine's memory semantics (``engine``: the caller resolved it already)."""
    data, name, source = _profile_data(profile)
    eng = engine or engine_of(data)
    return plan(
        model_info_from_dict(section(data, "model_info")),
        eng.serving(data),
        name=name,
        source=source,
        hardware=hardware,
        nodes=nodes,
    )


def planned_gb(
    profile: Any, nodes: int, hardware: Hardware | None = None, *, engine: EngineView | None = None
) -> float:
    """The unified memory one rank of ``profile`` plans on its Spark when the deployment spans
    ``nodes`` Sparks: weights, KV, recurrent pool and runtime overhead (GB). The deployments'
    memory table sums it per Spark; a rank's start waits until its Spark has it free."""
    return plan_profile(profile, nodes=nodes, hardware=hardware, engine=engine).used_per_gpu_gb


def capacity_problems(
    profile: Any,
    nodes: int | None = None,
    source: str | None = None,
    *,
    engine: EngineView | None = None,
) -> list[Problem]:
    """Refusals for the profile validator: the profile cannot fit on ``nodes`` Sparks.

    Profiles whose ``model_info`` has neither weight classes, ``weights_gb`` nor ``params`` are
    not planned (no refusal: nothing to judge).
    """
    data, _name, src = _profile_data(profile)
    info = section(data, "model_info")
    if not info.get("weight_classes") and not info.get("weights_gb") and not info.get("params"):
        return []
    result = plan_profile(profile, nodes=nodes, engine=engine)
    where = source if source is not None else src
    return [Problem(where or p.file, p.key, p.message, p.fix, p.rule) for p in result.problems]
