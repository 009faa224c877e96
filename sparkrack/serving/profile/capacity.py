"""The capacity planner applied to a profile: its engine supplies the memory semantics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class SameModel:
    """How a profile's decode compares with another engine's profile of the same model on as
    many Sparks: both planned with the same hardware."""

    plan: CapacityPlan
    other: CapacityPlan

    def line(self) -> str:
        a, b = self.plan, self.other
        bound, other = a.roofline_tokens_per_s(), b.roofline_tokens_per_s()
        spread = (bound - other) / other * 100 if other else 0.0
        runs = "-" if a.max_running_requests is None else str(a.max_running_requests)
        other_runs = "-" if b.max_running_requests is None else str(b.max_running_requests)
        fit = {(True, True): "both fit", (False, False): "neither fits"}.get(
            (a.fits, b.fits), f"{'this' if a.fits else b.name} fits, the other does not"
        )
        return (
            f"decode vs {b.name} ({b.engine}, same model, tp/pp {b.tp}/{b.pp}): single-stream "
            f"bound {bound:.0f} vs {other:.0f} tok/s ({spread:+.0f} %), at most {runs} vs "
            f"{other_runs} running requests, {fit}; the bound counts bytes read per step, "
            "not the engine's kernels or its all-reduce over the fabric (bench measures those)"
        )

    def to_dict(self) -> dict[str, Any]:
        b = self.other
        return {
            "profile": b.name,
            "engine": b.engine,
            "roofline_tokens_per_s": round(b.roofline_tokens_per_s(), 1),
            "max_running_requests": b.max_running_requests,
            "fits": b.fits,
        }


def _ranks(data: Mapping[str, Any]) -> int:
    topo = section(data, "topology")
    return int(topo.get("tp", 1)) * int(topo.get("pp", 1))


def same_model(
    profile: Any,
    candidates: Sequence[Any],
    hardware: Hardware | None = None,
    *,
    mine: CapacityPlan | None = None,
) -> list[SameModel]:
    """``profile`` against each of ``candidates`` that serves the same model with another engine
    on as many Sparks (the multi-Spark vLLM profile against the SGLang one). ``mine`` is
    ``profile``'s plan where the caller has made it already."""
    data, name, _src = _profile_data(profile)
    engine = engine_of(data).name
    out = []
    for other in candidates:
        odata, oname, _ = _profile_data(other)
        if (
            oname != name
            and odata.get("model") == data.get("model")
            and engine_of(odata).name != engine
            and _ranks(odata) == _ranks(data)
        ):
            mine = mine or plan_profile(profile, hardware=hardware)
            out.append(SameModel(mine, plan_profile(other, hardware=hardware)))
    return out


def unmatched(profile: Any, candidates: Sequence[Any]) -> str | None:
    """What ``plan`` says of a multi-Spark profile that :func:`same_model` pairs with nothing:
    the other engines' profiles of its model on other Spark counts, or that there are none.
    ``None`` for a one-Spark profile, or one that has a comparison."""
    data, name, _src = _profile_data(profile)
    ranks, engine = _ranks(data), engine_of(data).name
    if ranks < 2:
        return None
    others = []
    for other in candidates:
        odata, oname, _ = _profile_data(other)
        same = oname != name and odata.get("model") == data.get("model")
        if same and engine_of(odata).name != engine:
            if _ranks(odata) == ranks:
                return None
            count = _ranks(odata)
            others.append(f"{oname} ({engine_of(odata).name}, {count} Spark{'s' * (count > 1)})")
    if not others:
        return (
            f"no other engine's profile of {data.get('model')} is shipped: "
            "nothing to compare decode with"
        )
    return (
        f"no other engine's profile of {data.get('model')} on {ranks} Sparks, so no decode "
        f"comparison (the bound scales with the Sparks); on other counts: {', '.join(others)}"
    )
