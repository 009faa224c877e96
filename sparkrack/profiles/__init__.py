"""Serving profiles: one YAML per model (``model_profiles/``), one registry, one validator.

Public API (contracts.md): :func:`load_profile`, :func:`validate_profile`,
:func:`render_command`, :func:`render_env`, :func:`render_manifests`, :data:`PROFILE_DIR`.
"""

from __future__ import annotations

from typing import Any

from sparkrack.errors import Problem, SparkrackError
from sparkrack.profiles import engines as _engines  # noqa: F401  (vllm, trtllm, capacity rules)
from sparkrack.profiles.manifests import render_manifests, serving_selector
from sparkrack.profiles.profile import (
    PROFILE_DIR,
    SCHEMA_PATH,
    Profile,
    list_profiles,
    load_profile,
    schema_problems,
)
from sparkrack.profiles.render import (
    ServingContext,
    context_from_vars,
    render_argv,
    render_command,
    render_env,
    server_args,
)
from sparkrack.profiles.rules import RULES, rule_table

__all__ = [
    "PROFILE_DIR",
    "RULES",
    "SCHEMA_PATH",
    "Profile",
    "ServingContext",
    "context_from_vars",
    "list_profiles",
    "load_checked",
    "load_profile",
    "render_argv",
    "render_command",
    "render_env",
    "render_manifests",
    "rule_table",
    "server_args",
    "serving_selector",
    "validate_profile",
]


def validate_profile(data: Any, source: str, nodes: int | None = None) -> list[Problem]:
    """Every problem of a profile: schema first, then (on a schema-clean profile) every rule.

    ``nodes`` is the number of Sparks in the inventory; ``None`` skips the tp·pp check.
    """
    from sparkrack.profiles.rules import check

    problems = schema_problems(data, source)
    if problems:
        return problems
    return check(data, source, nodes)


def load_checked(ref: str, nodes: int | None = None) -> Profile:
    """Load a profile and refuse it (SparkrackError) unless schema and rules accept it."""
    profile = load_profile(ref)
    problems = validate_profile(profile.data, profile.source, nodes)
    if problems:
        raise SparkrackError(problems)
    return profile
