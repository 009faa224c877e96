"""Several models at once: the inventory's ``serving_deployments``, checked before anything changes.

Each deployment names a profile, the Sparks it runs on (the first is the head), optionally the
VF index its pods use, a topology override and the model name clients use (its alias).
``serving_profile: <name>`` stays the one-line form: one deployment of that profile on every Spark
(a vLLM profile across fewer Sparks than the inventory: on its first tp x pp).

Validation (all of it before a host or the cluster is touched): the list's schema (unknown keys
refused), every Spark exists, every profile loads and passes every rule for its effective
topology and Spark count, deployments that share a Spark use different VFs of
``fabric.vfs_in_use``, names and aliases are unique, and the memory every deployment plans per
Spark fits the Spark's usable unified memory (the refusal prints the per-Spark table).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import jsonschema

from sparkrack import contract
from sparkrack.errors import Problem, SparkrackError, printable, shown
from sparkrack.inputs import forms
from sparkrack.inputs.imageref import digest_of, is_moving_tag
from sparkrack.planner.memory import Hardware
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines import Engine, engine_of
from sparkrack.serving.profile.capacity import planned_gb
from sparkrack.serving.profile.load import load_profile
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.profile.rules import validate
from sparkrack.serving.profile.rules import warnings as profile_warnings
from sparkrack.serving.resolution import Resolution, resolve
from sparkrack.serving.switch.plan import FETCH_IMAGE_NEEDS, deployment_ports
from sparkrack.serving.trust import trust_problems

NAME_MAX = contract.DEPLOYMENT_NAME_MAX
NAME_PATTERN = rf"^[a-z0-9]([a-z0-9-]{{0,{NAME_MAX - 2}}}[a-z0-9])?(?!\n)$"
"""A DNS-1123 label of at most 39 characters: object names are ``sparkrack-<name>-r<rank>``,
and a StatefulSet name may have at most 52 (``contract.STATEFULSET_NAME_MAX``)."""
ALIAS = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}(?!\n)$"
"""A model name clients send: letters, digits, ``_.:/-`` (an HF id works)."""
PROFILE_REF = r"^[^\x00-\x1f\x7f]{1,255}(?!\n)$"
KEY = "serving_deployments"
RULE = "deployments"
RULE_MEMORY = "deployments-memory"
PATTERN_WORDS = {
    NAME_PATTERN: "a DNS label: lower-case letters, digits and '-', starting and ending with a "
    f"letter or digit, at most {NAME_MAX} characters",
    ALIAS: "a model name: letters, digits and _.:/-, starting with a letter or digit, at most "
    "128 characters",
    PROFILE_REF: "a profile of model_profiles/ (its name, a path or an HF id), at most 255 "
    "characters, no control characters",
}
SPARK_NAME = r"^[^\x00-\x1f\x7f]{1,255}(?!\n)$"
PATTERN_WORDS[SPARK_NAME] = "a host of the inventory's sparks group"

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "sparkrack serving_deployments",
    "type": "array",
    "minItems": 1,
    "maxItems": 64,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "profile", "sparks"],
        "properties": {
            "name": {"type": "string", "pattern": NAME_PATTERN},
            "profile": {"type": "string", "pattern": PROFILE_REF},
            "sparks": {
                "type": "array",
                "minItems": 1,
                "maxItems": 64,
                "uniqueItems": True,
                "items": {"type": "string", "pattern": SPARK_NAME},
            },
            "vf": {"type": "integer", "minimum": 0, "maximum": 126},
            "topology": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "tp": {"type": "integer", "minimum": 1, "maximum": 64},
                    "pp": {"type": "integer", "minimum": 1, "maximum": 64},
                    "ep": {"type": "integer", "minimum": 1, "maximum": 64},
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
    def strict_integer(checker: Any, instance: object) -> bool:
        """An integer as written: ``1.0`` and ``true`` are not (``vf: 1.0``)."""
        return isinstance(instance, int) and not isinstance(instance, bool)

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("integer", strict_integer)
    strict = jsonschema.validators.extend(base, type_checker=checker)  # type: ignore[no-untyped-call]
    validator: jsonschema.Draft202012Validator = strict(SCHEMA)
    return validator


Sources = Mapping[str, str]
"""Variable name -> the file it was written in (refusals name it)."""


def _sources(source: str | Sources) -> Sources:
    return SourceFiles(source) if isinstance(source, str) else source


class SourceFiles(dict[str, str]):
    """The file each variable was written in, and ``default`` for the others (the play knows
    no origins; a variable that is not set is named where the deployments are written)."""

    def __init__(self, default: str, known: Mapping[str, str] | None = None) -> None:
        super().__init__(known or {})
        self.default = default

    def __missing__(self, key: str) -> str:
        return self.default

    def get(self, key: str, default: Any = None) -> Any:  # noqa: ARG002 - the default is ours
        return self[key]


def schema_problems(value: Any, source: str) -> list[Problem]:
    problems = []
    for err in sorted(_validator().iter_errors(value), key=lambda e: list(map(str, e.path))):
        where = ".".join([KEY, *(str(p) for p in err.absolute_path)])
        if err.validator == "additionalProperties":
            allowed = err.schema.get("properties", {})
            for extra in sorted(set(err.instance) - set(allowed)):
                fix = forms.unknown_key_fix(extra, allowed)
                problems.append(Problem(source, f"{where}.{extra}", "unknown key", fix, RULE))
            continue
        message, fix = forms.schema_problem(err, PATTERN_WORDS)
        problems.append(Problem(source, where, message, fix, RULE))
    return problems


def declared(
    variables: Mapping[str, Any], sources: Sources | None = None
) -> tuple[list[Any], bool]:
    """(the deployment list as the inventory means it, whether it is ``serving_deployments``).

    ``serving_profile_file`` (``-e`` from ``sparkrack matrix``) wins, then ``serving_deployments``,
    then ``serving_profile``: one deployment of that profile on every Spark, or the first
    ``Engine.sparks`` (or on ``serving_spark`` for a single-Spark engine). ``serving_profile`` or ``serving_spark``
    beside ``serving_deployments`` would be ignored, and are refused.
    """
    single = variables.get("serving_profile_file") or None
    listed = variables.get(KEY)
    if not single and listed:
        ignored = [n for n in ("serving_profile", "serving_spark") if variables.get(n)]
        if ignored:
            where = _sources(sources or "inventory")
            raise SparkrackError(
                [
                    Problem(
                        where.get(name, "inventory"),
                        name,
                        f"is set beside {KEY}, which names every deployment's profile and "
                        "Sparks: it would be ignored",
                        f"remove {name}, or put its model in {KEY}",
                        RULE,
                    )
                    for name in ignored
                ]
            )
        return (list(listed) if isinstance(listed, list) else [listed]), True
    profile = single or variables.get("serving_profile")
    if not profile:
        return [], False
    spark = variables.get("serving_spark")
    # sparks None: every Spark (or the first the profile spans) for an engine whose ranks span
    # Sparks, else serving_spark.
    return [{"profile": str(profile), "sparks": None, "spark": spark, "file": bool(single)}], False


def load_deployments(
    variables: Mapping[str, Any],
    base: ServingContext,
    source: str | Sources,
    *,
    check_memory: bool = True,
    warnings: list[Problem] | None = None,
) -> list[Deployment]:
    """The inventory's deployments, every check passed; :class:`SparkrackError` lists every
    problem otherwise (nothing has been changed anywhere). ``source``: the file each variable
    was written in (one file for all when a string). ``check_memory=False`` leaves the
    per-Spark memory sum to the caller (``sparkrack plan --inventory`` prints it). Deployments
    across Sparks need ``serving_fetch_image``, the image their weights are copied with.
    ``warnings`` collects what is reported without refusing (every command that shows the
    deployments prints them)."""
    sources = _sources(source)
    raw, listed = declared(variables, sources)
    home = sources.get(KEY if listed else "serving_profile", "inventory")
    all_sparks = [n.name for n in base.group()]
    if listed:
        problems = schema_problems(raw, home)
        if problems:
            raise SparkrackError(problems)
    if not raw:
        raise SparkrackError(
            Problem(
                home,
                "serving_profile",
                "names no model",
                "set serving_profile: <name> or serving_deployments (model_profiles/*.yml)",
                RULE,
            )
        )
    problems = []
    found: list[Problem] = []
    chosen: list[tuple[str, str, Profile, tuple[str, ...], int | None, Engine]] = []
    for i, entry in enumerate(raw):
        where = f"{KEY}[{i}]" if listed else "serving_profile"
        ref_key = f"{where}.profile" if listed else where
        ref = str(entry["profile"])
        if not entry.get("file") and not _profile_ref(ref):
            problems.append(
                Problem(
                    home,
                    ref_key,
                    f"{shown(ref)} is neither a profile's name, its HF id nor a .yml file: an "
                    "inventory names profiles, it does not read other files of this machine",
                    "name a profile of model_profiles/ (its file name or HF id), or a profile "
                    "file (.yml)",
                    RULE,
                )
            )
            continue
        try:
            profile = load_profile(ref)
        except SparkrackError as exc:
            problems += [
                replace(p, file=home, key=ref_key)
                if p.rule == "profile-not-found"
                else replace(p, key=f"{p.key} (deployment {where})")
                for p in exc.problems
            ]
            continue
        override = dict(entry.get("topology") or {})
        if override:  # the deployment's topology override, on a copy
            data = copy.deepcopy(profile.data)
            data.setdefault("topology", {}).update(override)
            profile = Profile(profile.name, profile.path, data)
        eng = engine_of(profile.data)
        sparks, spark_problem = _sparks_of(entry, eng, all_sparks, where, sources, home)
        if spark_problem is not None:
            problems.append(spark_problem)
            continue
        for p in [
            *trust_problems(profile, eng, base.trust),
            *validate(profile.data, profile.source, len(sparks), eng),
        ]:
            problems.append(_attributed(p, where, home, override))
        for w in profile_warnings(profile.data, profile.source):
            found.append(replace(w, key=f"{w.key} (deployment {where})"))
        if not eng.uses_fabric and len(sparks) != 1:
            problems.append(
                Problem(
                    home,
                    f"{where}.sparks",
                    f"{eng.name} runs on one Spark, the deployment lists {len(sparks)}",
                    "list exactly one Spark",
                    RULE,
                )
            )
        vf: int | None = None
        if not eng.uses_fabric and entry.get("vf") is not None:
            problems.append(
                Problem(
                    home,
                    f"{where}.vf",
                    f"is set, but {eng.name} runs on one Spark without the fabric: it would be "
                    "ignored",
                    "remove vf from this deployment",
                    RULE,
                )
            )
        if eng.uses_fabric:
            vf = int(entry.get("vf", base.plan.serving_vf_index))
            if vf not in base.plan.vfs_in_use:
                problems.append(
                    Problem(
                        home,
                        f"{where}.vf",
                        f"VF {vf} is not in fabric.vfs_in_use {list(base.plan.vfs_in_use)} "
                        "(no NetworkAttachmentDefinition and no host address for it)",
                        f"add {vf} to fabric.vfs_in_use, or use one of them",
                        RULE,
                    )
                )
            if not listed and entry.get("spark"):
                found.append(
                    Problem(
                        sources.get("serving_spark", home),
                        "serving_spark",
                        f"is ignored: {eng.name} runs one rank on every Spark",
                        "remove it (it picks the Spark of a one-Spark engine)",
                        RULE,
                    )
                )
        name = str(entry.get("name") or contract.slug(profile.name))
        alias = str(entry.get("alias") or profile.model)
        chosen.append((name, alias, profile, sparks, vf, eng))
    problems += _shared(
        [(name, alias, sparks, vf) for name, alias, _p, sparks, vf, _e in chosen], home
    )
    problems += _replicas([(alias, p.name) for _n, alias, p, _s, _v, _e in chosen], home)
    if problems:
        raise SparkrackError(problems)
    ports = deployment_ports(base.fetch_port, [(c[0], c[3] or all_sparks) for c in chosen])
    out = [
        Deployment(
            resolve(
                p,
                replace(
                    base,
                    sparks=sparks,
                    vf_index=vf,
                    deployment=name,
                    deployment_fetch_port=ports[name],
                ),
                e,
            ),
            alias,
        )
        for name, alias, p, sparks, vf, e in chosen
    ]
    table, over = memory_table(out)
    if over and check_memory:
        raise SparkrackError(
            [
                Problem(
                    home,
                    KEY if listed else "serving_profile",
                    f"the deployments over-commit the unified memory of {', '.join(over)}:\n"
                    + format_table(table),
                    "lower a memory fraction, move a deployment to other Sparks, or drop one",
                    RULE_MEMORY,
                )
            ]
        )
    found += _fetch_image(out, base, sources.get("serving_fetch_image", home))
    found += _watchdog_image(out, base, sources.get("serving_watchdog_image", home))
    if warnings is not None:
        warnings += found
    return out


_HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def _profile_ref(ref: str) -> bool:
    """What an inventory may name as a profile: a name of ``model_profiles/``, an HF id, or a
    YAML file (never ``~``, nor a path to any other file)."""
    if ref.startswith("~"):
        return False
    if "/" not in ref or ref.endswith((".yml", ".yaml")):
        return True
    return bool(_HF_ID.fullmatch(ref)) and ".." not in ref


def _sparks_of(
    entry: Mapping[str, Any],
    eng: Engine,
    all_sparks: list[str],
    where: str,
    sources: Sources,
    home: str,
) -> tuple[tuple[str, ...], Problem | None]:
    """The Sparks of one deployment, head first, or the problem naming the key that chose them."""
    known = ", ".join(all_sparks)
    if entry["sparks"] is not None:
        sparks = tuple(str(s) for s in entry["sparks"])
        missing = [s for s in sparks if s not in all_sparks]
        if missing:
            return sparks, Problem(
                home,
                f"{where}.sparks",
                f"{', '.join(printable(m) for m in missing)} is not a Spark of the inventory",
                f"use Sparks of the 'sparks' group: {known}",
                RULE,
            )
        return sparks, None
    if eng.uses_fabric:
        return tuple(all_sparks[: eng.sparks or len(all_sparks)]), None
    spark = entry.get("spark")
    if spark is not None and str(spark) not in all_sparks:
        return (), Problem(
            sources.get("serving_spark", home),
            "serving_spark",
            f"{shown(spark)} is not a Spark of the inventory",
            f"use one of: {known} (or null: the rank-0 Spark)",
            RULE,
        )
    return (str(spark) if spark is not None else all_sparks[0],), None


def _attributed(p: Problem, where: str, home: str, override: Mapping[str, Any]) -> Problem:
    """A profile rule's refusal in a deployment: against the inventory file when the
    deployment's topology override is what it judges, else against the profile file."""
    if override and p.key.startswith("topology"):
        return replace(
            p,
            file=home,
            key=f"{where}.{p.key}",
            message=f"{p.message} (with the topology override of {where})",
        )
    return replace(p, key=f"{p.key} (deployment {where})")


def _fetch_image(
    deployments: Sequence[Deployment], base: ServingContext, file: str
) -> list[Problem]:
    """``serving_fetch_image`` for deployments across Sparks: set, pinned, not moving."""
    spread = [d.name for d in deployments if len(d.sparks) > 1]
    if not spread:
        return []
    image = base.fetch_image
    if not image:
        raise SparkrackError(
            Problem(
                file,
                "serving_fetch_image",
                f"is not set; {', '.join(spread)} copy their weights to every Spark with rsync",
                f"set serving_fetch_image to an image with {FETCH_IMAGE_NEEDS}, pinned by digest "
                "(docs/guide/switch.md)",
                "fetch-image",
            )
        )
    return _pinned("serving_fetch_image", image, file, "what copies the weights", "fetch-image")


def _watchdog_image(
    deployments: Sequence[Deployment], base: ServingContext, file: str
) -> list[Problem]:
    """``serving_watchdog_image``: unset is reported (no deployment is watched), a moving tag
    refused, a tag without a digest reported."""
    if not deployments:
        return []
    if base.watchdog is None:
        return [
            Problem(
                file,
                "serving_watchdog_image",
                "is not set: no watchdog runs, a stalled deployment stays in the gateway's routing "
                "and is never restarted",
                "set serving_watchdog_image to an image carrying sparkrack, pinned by digest "
                "(docs/guide/watchdog.md)",
                "watchdog-image",
            )
        ]
    return _pinned(
        "serving_watchdog_image",
        base.watchdog.image,
        file,
        "what restarts a stalled deployment",
        "watchdog-image",
    )


def _pinned(key: str, image: str, file: str, what: str, rule: str) -> list[Problem]:
    """A moving tag refused, a tag without a digest reported."""
    if is_moving_tag(image):
        raise SparkrackError(
            Problem(
                file,
                key,
                f"{shown(image)} is a moving tag (latest, *nightly*, or no tag at all): {what} "
                "could change without the inventory changing",
                "pin it by digest: repo:tag@sha256:<digest>",
                rule,
            )
        )
    if digest_of(image) is None:
        return [
            Problem(
                file,
                key,
                f"{image} is pinned by tag, not by digest",
                "pin it by digest: repo:tag@sha256:<digest>",
                rule,
            )
        ]
    return []


def _replicas(aliases: Sequence[tuple[str, str]], source: str) -> list[Problem]:
    """Deployments sharing an alias are replicas the gateway balances across: they must run the
    same profile (given as each deployment's alias and profile name)."""
    profiles: dict[str, set[str]] = {}
    for alias, profile in aliases:
        profiles.setdefault(alias, set()).add(profile)
    return [
        Problem(
            source,
            f"{KEY}.alias",
            f"{alias} is used by deployments of different profiles ({', '.join(sorted(names))})",
            "give every deployment its own alias; only replicas of one profile share an alias",
            RULE,
        )
        for alias, names in sorted(profiles.items())
        if len(names) > 1
    ]


def _shared(
    deployments: Sequence[tuple[str, str, tuple[str, ...], int | None]], source: str
) -> list[Problem]:
    """Names unique; deployments sharing a Spark use different VFs (each deployment given as its
    name, alias, Sparks and VF)."""
    problems = []
    for what, values in (("name", [name for name, _alias, _sparks, _vf in deployments]),):
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
