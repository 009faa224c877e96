"""Profile + inventory -> the launch command and environment of each rank.

Flags come from the registry only; the per-rank part (``--nnodes``, ``--node-rank``,
``--dist-init-addr <head VF IP>:<port>``) and the NCCL environment come from the address plan
(:mod:`sparkrack.addressplan`); nothing here computes an address.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkrack.addressplan import POD_FABRIC_IFNAME, FabricPlan, NodePlan
from sparkrack.errors import Problem, SparkrackError
from sparkrack.profiles.profile import Profile
from sparkrack.profiles.registry import engine

HF_CACHE_MOUNT = "/root/.cache/huggingface"
SERVER_ENTRY = ("python3", "-m", "sglang.launch_server")

SERVING_DEFAULTS: dict[str, Any] = {
    "serving_namespace": "sparkrack",
    "serving_api_port": 30000,
    "serving_dist_port": 20000,
    "serving_hf_cache": "/var/lib/sparkrack/huggingface",
    "serving_shm_size": "32Gi",
    "serving_hf_token_secret": "sparkrack-hf-token",
    "serving_startup_timeout": 1800,
    "serving_liveness_timeout": 120,
}


@dataclass(frozen=True)
class ServingContext:
    """Everything outside the profile a rank's command/env/manifests depend on."""

    plan: FabricPlan
    namespace: str = SERVING_DEFAULTS["serving_namespace"]
    api_port: int = SERVING_DEFAULTS["serving_api_port"]
    dist_port: int = SERVING_DEFAULTS["serving_dist_port"]
    hf_cache: str = SERVING_DEFAULTS["serving_hf_cache"]
    shm_size: str = SERVING_DEFAULTS["serving_shm_size"]
    hf_token_secret: str = SERVING_DEFAULTS["serving_hf_token_secret"]
    startup_timeout: int = SERVING_DEFAULTS["serving_startup_timeout"]
    liveness_timeout: int = SERVING_DEFAULTS["serving_liveness_timeout"]
    gid_index: dict[str, int] = field(default_factory=dict)
    """Discovered RoCE GID index per node (roce role fact ``roce_gid_index``)."""
    spark: str | None = None
    """Spark that hosts a single-node engine (vllm/trtllm); None = the rank-0 Spark."""

    @property
    def nodes(self) -> int:
        return len(self.plan.nodes)

    def rank_node(self, rank: int) -> NodePlan:
        for node in self.plan.nodes:
            if node.rank == rank:
                return node
        raise SparkrackError(
            Problem(
                "--rank",
                str(rank),
                f"no such rank (the plan has ranks 0..{self.nodes - 1})",
                "pick a rank of the inventory's Sparks",
                "rank",
            )
        )

    @property
    def head_address(self) -> str:
        return self.plan.head.serving_vf.address

    def gid_for(self, node: NodePlan) -> int | None:
        if self.plan.gid_index is not None:
            return self.plan.gid_index
        return self.gid_index.get(node.name)


def context_from_vars(
    plan: FabricPlan, variables: dict[str, Any], gid_index: dict[str, int] | None = None
) -> ServingContext:
    """Build the context from inventory variables (``serving_*``), defaults where unset."""
    v = {**SERVING_DEFAULTS, **{k: val for k, val in variables.items() if val is not None}}
    return ServingContext(
        plan=plan,
        namespace=str(v["serving_namespace"]),
        api_port=int(v["serving_api_port"]),
        dist_port=int(v["serving_dist_port"]),
        hf_cache=str(v["serving_hf_cache"]),
        shm_size=str(v["serving_shm_size"]),
        hf_token_secret=str(v["serving_hf_token_secret"]),
        startup_timeout=int(v["serving_startup_timeout"]),
        liveness_timeout=int(v["serving_liveness_timeout"]),
        gid_index=dict(gid_index or {}),
        spark=None if v.get("serving_spark") is None else str(v["serving_spark"]),
    )


def _lookup(data: dict[str, Any], key: str) -> Any:
    section, _, name = key.partition(".")
    if not name:
        return data.get(section)
    block = data.get(section)
    return block.get(name) if isinstance(block, dict) else None


def server_args(profile: Profile) -> list[str]:
    """The tuning flags of the profile, in registry order (no per-rank/deployment flags)."""
    words: list[str] = []
    for knob in engine(profile.engine).knobs:
        words += knob.args(_lookup(profile.data, knob.key))
    return words


def render_argv(profile: Profile, ctx: ServingContext, rank: int) -> list[str]:
    """Full argv of rank ``rank``: server entry, tuning flags, group wiring, extra_args."""
    if profile.engine != "sglang":
        from sparkrack.profiles.engines import single

        return single.render_argv(profile, ctx)
    ctx.rank_node(rank)
    return [
        *SERVER_ENTRY,
        *server_args(profile),
        "--nnodes",
        str(ctx.nodes),
        "--node-rank",
        str(rank),
        "--dist-init-addr",
        f"{ctx.head_address}:{ctx.dist_port}",
        "--host",
        "0.0.0.0",
        "--port",
        str(ctx.api_port),
        *[str(w) for w in profile.data.get("extra_args") or []],
    ]


def render_command(profile: Profile, ctx: ServingContext, rank: int = 0) -> str:
    import shlex

    return shlex.join(render_argv(profile, ctx, rank))


def nccl_env(profile: Profile, ctx: ServingContext, node: NodePlan) -> dict[str, str]:
    from sparkrack.ncclenv import rank_env

    return rank_env(
        ctx.plan, node, transport=profile.transport, gid_index=ctx.gid_index.get(node.name)
    )


def render_env(profile: Profile, ctx: ServingContext, rank: int = 0) -> dict[str, str]:
    """Literal environment of rank ``rank`` (the HF token comes from a Secret, not from here)."""
    if profile.engine != "sglang":
        from sparkrack.profiles.engines import single

        return single.render_env(profile, ctx)
    node = ctx.rank_node(rank)
    env: dict[str, str] = {"HF_HOME": HF_CACHE_MOUNT, "POD_FABRIC_IFNAME": POD_FABRIC_IFNAME}
    for knob in engine(profile.engine).knobs:
        pair = knob.env_pair(_lookup(profile.data, knob.key))
        if pair:
            env[pair[0]] = pair[1]
    env.update({str(k): str(v) for k, v in (profile.data.get("env") or {}).items()})
    env.update(nccl_env(profile, ctx, node))
    return env
