"""One deployment resolved once: its profile, the engine the profile names, the context it runs in.

:func:`resolve` is the one place a deployment's engine is looked up and its ranks, Sparks,
object names, labels and planned memory are computed; the Kubernetes objects (:mod:`.objects`),
the switch (:mod:`.switch`), the plan and the gateway (:mod:`.deployments`) read the frozen
:class:`Resolution` it returns and compute none of it again.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from sparkrack import contract
from sparkrack.fabric.addressplan import NodePlan
from sparkrack.planner.memory import GB
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines import Engine, Rank, engine_of
from sparkrack.serving.names import ObjectNames, deployment_name
from sparkrack.serving.profile.capacity import plan_profile
from sparkrack.serving.profile.model import Profile

DISK_MARGIN = 0.05
"""Free disk the fetch step asks beyond the checkpoint: tokenizer, configs, partial files of a
resumed copy."""


@dataclass(frozen=True)
class Resolution:
    """A profile, its engine and the deployment's context, with what follows from them."""

    profile: Profile
    engine: Engine
    ctx: ServingContext
    ranks: tuple[Rank, ...]
    nodes: tuple[NodePlan, ...]
    """The Sparks the ranks run on, head first."""
    names: ObjectNames
    labels: dict[str, str]
    """The labels of every serving object of the deployment."""
    footprint_gb: float
    """Unified memory one rank plans on its Spark (weights, KV, recurrent pool, runtime)."""
    need_bytes: int
    """Free disk the fetch step asks for: the checkpoint plus :data:`DISK_MARGIN`."""
    weights_bytes: int = 0
    """The checkpoint's size (``model_info.weights_gb``, else the capacity plan's weights)."""

    @property
    def name(self) -> str:
        return self.names.deployment

    @property
    def selector(self) -> str:
        """Label selector of the deployment's serving objects."""
        return f"{serving_selector()},{contract.LABEL_DEPLOYMENT}={self.name}"

    @property
    def memwait_gb(self) -> float:
        """What a rank waits to see free on its Spark: the footprint rounded up to 0.1 GB."""
        return math.ceil(self.footprint_gb * 10) / 10

    def rank(self, number: int) -> Rank:
        return self.engine.rank(self.ctx, number)

    def argv(self, rank: Rank) -> list[str]:
        """Full argv of a rank: entry point, the engine's table, then ``extra_args``."""
        return self.engine.argv(self.profile, self.ctx, rank)

    def env(self, rank: Rank) -> dict[str, str]:
        """Literal environment of a rank (the HF token comes from a Secret, not from here)."""
        return self.engine.env(self.profile, self.ctx, rank)

    def command(self, number: int = 0) -> str:
        return shlex.join(self.argv(self.rank(number)))


def serving_selector() -> str:
    """Label selector of every deployment's serving objects."""
    return f"{contract.LABEL_COMPONENT}={contract.COMPONENT_SERVING}"


def resolve(profile: Profile, ctx: ServingContext, engine: Engine | None = None) -> Resolution:
    """The resolution of ``profile`` in ``ctx``: the engine it names (``engine`` when the caller
    resolved it already), its ranks and Sparks, object names, labels and planned memory."""
    eng = engine or engine_of(profile.data)
    ranks = tuple(eng.ranks(ctx))
    nodes = tuple({r.node.name: r.node for r in ranks}.values())
    name = deployment_name(ctx, profile)
    labels = {
        **contract.PART_OF,
        contract.LABEL_COMPONENT: contract.COMPONENT_SERVING,
        contract.LABEL_DEPLOYMENT: name,
        contract.LABEL_PROFILE: contract.label_value(profile.name),
    }
    weights = profile.data.get("model_info", {}).get("weights_gb")
    weights_gb = float(weights) if weights is not None else None
    if weights_gb is None:
        weights_gb = plan_profile(profile, engine=eng).weights_total_gb
    return Resolution(
        profile=profile,
        engine=eng,
        ctx=ctx,
        ranks=ranks,
        nodes=nodes,
        names=ObjectNames.of(name),
        labels=labels,
        footprint_gb=plan_profile(profile, len(nodes), engine=eng).used_per_gpu_gb,
        need_bytes=int(weights_gb * GB * (1 + DISK_MARGIN)),
        weights_bytes=int(weights_gb * GB),
    )
