"""Serving profiles: one YAML per model (``model_profiles/``), one engine module per engine.

Public API: :func:`load_profile`, :func:`validate_profile`, :func:`profile_warnings`,
:func:`render_command`, :func:`render_env`, :func:`render_manifests`, :data:`PROFILE_DIR`.
"""

from __future__ import annotations

from typing import Any

from sparkrack.errors import Problem, SparkrackError
from sparkrack.serving.context import ServingContext, context_from_vars
from sparkrack.serving.engines import ENGINES, engine, engine_of
from sparkrack.serving.objects.ranks import render_manifests, serving_selector
from sparkrack.serving.profile.load import (
    PROFILE_DIR,
    SCHEMA_PATH,
    list_profiles,
    load_profile,
    schema_problems,
)
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.profile.rules import all_rules, rule_table, validate, warnings
from sparkrack.serving.render import render_argv, render_command, render_env

__all__ = [
    "ENGINES",
    "PROFILE_DIR",
    "SCHEMA_PATH",
    "Profile",
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
