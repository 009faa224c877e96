"""Serving profiles: one YAML per model (``model_profiles/``), one engine module per engine.

Public API: :func:`load_profile`, :func:`validate_profile`, :func:`profile_warnings`,
:func:`render_command`, :func:`render_env`, :func:`render_manifests`, :data:`PROFILE_DIR`.
Each render of a profile in a context resolves it once (:func:`~.resolution.resolve`).
"""

from __future__ import annotations

from typing import Any

from sparkrack.errors import Problem, SparkrackError
from sparkrack.serving.context import ServingContext, context_from_vars
from sparkrack.serving.engines import ENGINES, engine, engine_of
from sparkrack.serving.objects.pod import namespace
from sparkrack.serving.objects.ranks import deployment_objects
from sparkrack.serving.profile.load import (
    PROFILE_DIR,
    SCHEMA_PATH,
    list_profiles,
    load_profile,
    schema_problems,
)
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.profile.rules import all_rules, rule_table, validate, warnings
from sparkrack.serving.resolution import Resolution, resolve
from sparkrack.serving.resolution import serving_selector as all_serving_selector
from sparkrack.serving.switch.objects import rank_init_containers

__all__ = [
    "ENGINES",
    "PROFILE_DIR",
    "SCHEMA_PATH",
    "Profile",
    "Resolution",
    "ServingContext",
    "all_rules",
    "context_from_vars",
    "engine",
    "engine_of",
    "list_profiles",
    "load_checked",
    "load_profile",
    "profile_warnings",
    "render_argv",
    "render_command",
    "render_env",
    "render_manifests",
    "resolve",
    "rule_table",
    "serving_selector",
    "validate_profile",
]


def validate_profile(data: Any, source: str, nodes: int | None = None) -> list[Problem]:
    """Every problem of a profile: schema first, then (on a schema-clean profile) every rule.

    ``nodes`` is the number of Sparks in the inventory; ``None`` skips the tp·pp check.
    """
    return validate(data, source, nodes)


def profile_warnings(data: Any, source: str) -> list[Problem]:
    """What validation reports without refusing (a schema-clean profile only)."""
    if schema_problems(data, source):
        return []
    return warnings(data, source)


def load_checked(ref: str, nodes: int | None = None) -> Profile:
    """Load a profile and refuse it (SparkrackError) unless schema and rules accept it."""
    profile = load_profile(ref)
    problems = validate_profile(profile.data, profile.source, nodes)
    if problems:
        raise SparkrackError(problems)
    return profile


def render_argv(profile: Profile, ctx: ServingContext, rank: int = 0) -> list[str]:
    """Full argv of rank ``rank``: entry point, the engine's table, then ``extra_args``."""
    res = resolve(profile, ctx)
    return res.argv(res.rank(rank))


def render_command(profile: Profile, ctx: ServingContext, rank: int = 0) -> str:
    return resolve(profile, ctx).command(rank)


def render_env(profile: Profile, ctx: ServingContext, rank: int = 0) -> dict[str, str]:
    """Literal environment of rank ``rank`` (the HF token comes from a Secret, not from here)."""
    res = resolve(profile, ctx)
    return res.env(res.rank(rank))


def render_manifests(profile: Profile, ctx: ServingContext) -> list[dict[str, Any]]:
    """The namespace and every serving object of one deployment of ``profile`` (its switch
    ConfigMap and fetch Jobs, applied before these:
    :func:`sparkrack.serving.switch.objects.fetch_objects`)."""
    res = resolve(profile, ctx)
    return [namespace(ctx), *deployment_objects(res, rank_init_containers(res))]


def serving_selector(profile: Profile | None = None, ctx: ServingContext | None = None) -> str:
    """Label selector of the serving objects (of one deployment, or of all of them)."""
    if profile is None or ctx is None:
        return all_serving_selector()
    return resolve(profile, ctx).selector
