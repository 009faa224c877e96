"""Several models at once: the inventory's ``serving_deployments``, checked before anything changes.

Each deployment names a profile, the Sparks it runs on (the first is the head), optionally the
VF index its pods use, a topology override and the model name clients use (its alias).
``serving_profile: <name>`` stays the one-line form: one deployment of that profile on every Spark.

Validation (all of it before a host or the cluster is touched): the list's schema (unknown keys
refused), every Spark exists, every profile loads and passes every rule for its effective
topology and Spark count, deployments that share a Spark use different VFs of
``fabric.vfs_in_use``, names and aliases are unique, and the memory every deployment plans per
Spark fits the Spark's usable unified memory (the refusal prints the per-Spark table).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import jsonschema

from sparkrack import contract
from sparkrack.errors import Problem, SparkrackError
from sparkrack.planner.memory import Hardware
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines import Engine, engine_of
from sparkrack.serving.profile.capacity import planned_gb
from sparkrack.serving.profile.load import load_profile
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.profile.rules import validate
from sparkrack.serving.resolution import Resolution, resolve
from sparkrack.serving.switch.plan import FETCH_IMAGE_NEEDS
from sparkrack.serving.trust import trust_problems

NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
"""DNS-1123 label of at most 40 characters: object names are ``sparkrack-<name>-r<rank>``."""
ALIAS = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}(?!\n)$"
"""A model name clients send: letters, digits, ``_.:/-`` (an HF id works)."""
KEY = "serving_deployments"
RULE = "deployments"
RULE_MEMORY = "deployments-memory"

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "sparkrack serving_deployments",
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "profile", "sparks"],
        "properties": {
            "name": {"type": "string", "pattern": NAME_PATTERN},
            "profile": {"type": "string", "minLength": 1, "pattern": r"^[^\x00-\x1f]+$"},
            "sparks": {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "minLength": 1},
            },
            "vf": {"type": "integer", "minimum": 0},
            "topology": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "tp": {"type": "integer", "minimum": 1},
                    "pp": {"type": "integer", "minimum": 1},
                    "ep": {"type": "integer", "minimum": 1},
                },
            },
            "alias": {"type": "string", "pattern": ALIAS},
        },
    },
}


@dataclass(frozen=True)
class Deployment:
    """One model on chosen Sparks: its resolution (the profile with the topology override
    applied, its engine, the deployment's context) and the name clients send."""

    res: Resolution
    alias: str
    """The model name clients send to the gateway."""

    @property
    def name(self) -> str:
        return self.res.name

    @property
    def profile(self) -> Profile:
        return self.res.profile

    @property
    def sparks(self) -> tuple[str, ...]:
        """The deployment's Sparks, head first."""
        return tuple(node.name for node in self.res.nodes)

    @property
    def vf(self) -> int | None:
        """VF index of its pods (None: the engine uses no fabric VF)."""
        return self.res.ctx.vf_index

    def served_name(self) -> str:
        """The model name the deployment's server answers to."""
        return self.res.engine.served_name(self.profile.data)


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(SCHEMA)


def schema_problems(value: Any, source: str) -> list[Problem]:
    problems = []
    for err in sorted(_validator().iter_errors(value), key=lambda e: list(map(str, e.path))):
        where = ".".join([KEY, *(str(p) for p in err.absolute_path)])
        if err.validator == "additionalProperties":
            allowed = ", ".join(sorted(err.schema.get("properties", {})))
            for extra in sorted(set(err.instance) - set(err.schema.get("properties", {}))):
                problems.append(
                    Problem(source, f"{where}.{extra}", "unknown key", f"use: {allowed}", RULE)
                )
            continue
        fix = "see the README's 'several models' section"
        if err.validator == "pattern" and err.absolute_path and err.absolute_path[-1] == "name":
            fix = "use a DNS label: lower-case letters, digits and '-', at most 40 characters"
        elif err.validator == "required":
            fix = "add it"
        problems.append(Problem(source, where, err.message, fix, RULE))
    return problems


def declared(variables: Mapping[str, Any]) -> tuple[list[Any], bool]:
    """(the deployment list as the inventory means it, whether it is ``serving_deployments``).

    ``serving_profile_file`` (``-e`` from ``sparkrack matrix``) wins, then ``serving_deployments``,
    then ``serving_profile``: one deployment of that profile on every Spark (or on
    ``serving_spark`` for a single-Spark engine).
    """
    single = variables.get("serving_profile_file") or None
    listed = variables.get(KEY)
    if not single and listed:
        return (list(listed) if isinstance(listed, list) else [listed]), True
    profile = single or variables.get("serving_profile")
    if not profile:
        return [], False
    spark = variables.get("serving_spark")
    # sparks None: every Spark for an engine whose ranks span Sparks, else serving_spark.
    return [{"profile": str(profile), "sparks": None, "spark": spark}], False


def load_deployments(
    variables: Mapping[str, Any], base: ServingContext, source: str, *, check_memory: bool = True
) -> list[Deployment]:
    """The inventory's deployments, every check passed; :class:`SparkrackError` lists every
    problem otherwise (nothing has been changed anywhere). ``check_memory=False`` leaves the
    per-Spark memory sum to the caller (``sparkrack plan --inventory`` prints it). Deployments
    across Sparks need ``serving_fetch_image``, the image their weights are copied with."""
    raw, listed = declared(variables)
    all_sparks = [n.name for n in base.group()]
    if listed:
        problems = schema_problems(raw, source)
        if problems:
            raise SparkrackError(problems)
    if not raw:
        raise SparkrackError(
            Problem(
                source,
                "serving_profile",
                "names no model",
                "set serving_profile: <name> or serving_deployments (model_profiles/*.yml)",
                RULE,
            )
        )
    problems = []
    chosen: list[tuple[str, str, Profile, tuple[str, ...], int | None, Engine]] = []
    known = set(all_sparks)
    for i, entry in enumerate(raw):
        where = f"{KEY}[{i}]" if listed else "serving_profile"
        try:
            profile = load_profile(str(entry["profile"]))
        except SparkrackError as exc:
            problems += [replace(p, key=f"{where}.profile: {p.key}") for p in exc.problems]
            continue
        if entry.get("topology"):  # the deployment's topology override, on a copy
            data = copy.deepcopy(profile.data)
            data.setdefault("topology", {}).update(dict(entry["topology"]))
            profile = Profile(profile.name, profile.path, data)
        eng = engine_of(profile.data)
        if entry["sparks"] is not None:
            sparks = tuple(str(s) for s in entry["sparks"])
        elif eng.uses_fabric:
            sparks = tuple(all_sparks)
        else:
            sparks = (str(entry.get("spark") or all_sparks[0]),)
        missing = [s for s in sparks if s not in known]
        if missing:
            problems.append(
                Problem(
                    source,
                    f"{where}.sparks",
                    f"{', '.join(missing)} is not a Spark of the inventory",
                    f"use Sparks of the 'sparks' group: {', '.join(all_sparks)}",
                    RULE,
                )
            )
            continue
        for p in [
            *trust_problems(profile, eng, base.trust),
            *validate(profile.data, profile.source, len(sparks), eng),
        ]:
            problems.append(replace(p, key=f"{p.key} (deployment {where})"))
        if not eng.uses_fabric and len(sparks) != 1:
            problems.append(
                Problem(
                    source,
                    f"{where}.sparks",
                    f"{eng.name} runs on one Spark, the deployment lists {len(sparks)}",
                    "list exactly one Spark",
                    RULE,
                )
            )
        vf: int | None = None
        if eng.uses_fabric:
            vf = int(entry.get("vf", base.plan.serving_vf_index))
            if vf not in base.plan.vfs_in_use:
                problems.append(
                    Problem(
                        source,
                        f"{where}.vf",
                        f"VF {vf} is not in fabric.vfs_in_use {list(base.plan.vfs_in_use)} "
                        "(no NetworkAttachmentDefinition and no host address for it)",
                        f"add {vf} to fabric.vfs_in_use, or use one of them",
                        RULE,
                    )
                )
        name = str(entry.get("name") or contract.slug(profile.name))
        alias = str(entry.get("alias") or profile.model)
        chosen.append((name, alias, profile, sparks, vf, eng))
    problems += _shared(
        [(name, alias, sparks, vf) for name, alias, _p, sparks, vf, _e in chosen], source
    )
    if problems:
        raise SparkrackError(problems)
    out = [
        Deployment(resolve(p, replace(base, sparks=sparks, vf_index=vf, deployment=name), e), alias)
        for name, alias, p, sparks, vf, e in chosen
    ]
    table, over = memory_table(out)
    if over and check_memory:
        raise SparkrackError(
            [
                Problem(
                    source,
                    KEY,
                    f"the deployments over-commit the unified memory of {', '.join(over)}:\n"
                    + format_table(table),
                    "lower a memory fraction, move a deployment to other Sparks, or drop one",
                    RULE_MEMORY,
                )
            ]
        )
    spread = [d.name for d in out if len(d.sparks) > 1]
    if spread and not base.fetch_image:
        raise SparkrackError(
            Problem(
                source,
                "serving_fetch_image",
                f"is not set; {', '.join(spread)} copy their weights to every Spark with rsync",
                f"set serving_fetch_image to an image with {FETCH_IMAGE_NEEDS}, pinned by digest "
                "(README: What happens on a switch)",
                "fetch-image",
            )
        )
    return out


def _shared(
    deployments: Sequence[tuple[str, str, tuple[str, ...], int | None]], source: str
) -> list[Problem]:
    """Names and aliases unique; deployments sharing a Spark use different VFs (each deployment
    given as its name, alias, Sparks and VF)."""
    problems = []
    for what, values in (
        ("name", [name for name, _alias, _sparks, _vf in deployments]),
        ("alias", [alias for _name, alias, _sparks, _vf in deployments]),
    ):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            problems.append(
                Problem(
                    source,
                    f"{KEY}.{what}",
                    f"{', '.join(twice)} is used by more than one deployment",
                    f"give every deployment its own {what}",
                    RULE,
                )
            )
    by_spark: dict[tuple[str, int], list[str]] = {}
    for name, _alias, sparks, vf in deployments:
        if vf is None:
            continue
        for spark in sparks:
            by_spark.setdefault((spark, vf), []).append(name)
    for (spark, vf), names in sorted(by_spark.items()):
        if len(names) > 1:
            problems.append(
                Problem(
                    source,
                    f"{KEY}.vf",
                    f"{', '.join(names)} share VF {vf} on {spark}",
                    "give each deployment on a shared Spark its own vf (from fabric.vfs_in_use)",
                    RULE,
                )
            )
    return problems


@dataclass(frozen=True)
class SparkMemory:
    spark: str
    parts: tuple[tuple[str, float], ...]
    """(deployment, GB it plans on this Spark)."""
    usable_gb: float

    @property
    def total_gb(self) -> float:
        return sum(gb for _name, gb in self.parts)

    @property
    def over(self) -> bool:
        return self.total_gb > self.usable_gb


def memory_table(
    deployments: Sequence[Deployment], hardware: Hardware | None = None
) -> tuple[list[SparkMemory], list[str]]:
    """Per Spark: what every deployment on it plans (weights, KV, Mamba pool, runtime), against
    the usable unified memory; and the Sparks that are over-committed."""
    hw = hardware or Hardware()
    per: dict[str, list[tuple[str, float]]] = {}
    for d in deployments:
        gb = planned_gb(d.profile, len(d.sparks), hw, engine=d.res.engine)
        for spark in d.sparks:
            per.setdefault(spark, []).append((d.name, gb))
    rows = [SparkMemory(s, tuple(parts), hw.usable_gb) for s, parts in sorted(per.items())]
    return rows, [r.spark for r in rows if r.over]


def format_table(rows: Sequence[SparkMemory]) -> str:
    lines = [f"{'spark':<10} {'deployment':<40} {'GB':>7}"]
    for row in rows:
        for name, gb in row.parts:
            lines.append(f"{row.spark:<10} {name:<40} {gb:>7.1f}")
        mark = "OVER" if row.over else "ok"
        lines.append(
            f"{row.spark:<10} {'= total / usable':<40} {row.total_gb:>7.1f} / "
            f"{row.usable_gb:g} {mark}"
        )
    return "\n".join(lines)
