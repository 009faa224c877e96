"""Profile + serving context -> the launch command and environment of one rank.

Thin: the profile's engine (``engines/``) knows its argv and environment; addresses come from
the address plan (:mod:`sparkrack.fabric.addressplan`) through the context; nothing here computes one.
"""

from __future__ import annotations

import shlex

from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines import engine_of
from sparkrack.serving.profile.model import Profile


def render_argv(profile: Profile, ctx: ServingContext, rank: int = 0) -> list[str]:
    """Full argv of rank ``rank``: entry point, the engine's table, then ``extra_args``."""
    eng = engine_of(profile.data)
    return eng.argv(profile, ctx, eng.rank(ctx, rank))


def render_command(profile: Profile, ctx: ServingContext, rank: int = 0) -> str:
    return shlex.join(render_argv(profile, ctx, rank))


def render_env(profile: Profile, ctx: ServingContext, rank: int = 0) -> dict[str, str]:
    """Literal environment of rank ``rank`` (the HF token comes from a Secret, not from here)."""
    eng = engine_of(profile.data)
    return eng.env(profile, ctx, eng.rank(ctx, rank))
