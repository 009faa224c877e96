"""Everything outside a profile that a deployment's ranks depend on: the serving context.

The address plan preflight computed, the inventory's ``serving_*`` settings and the discovered
RoCE GID indices; a deployment narrows it to its Sparks, VF and name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem, SparkrackError
from sparkrack.fabric.addressplan import FabricPlan, NodePlan
from sparkrack.inputs.inventory import Inventory, load_inventory


@dataclass(frozen=True)
class ServingContext:
    """Everything outside the profile a rank's command/env/manifests depend on."""

    plan: FabricPlan
    namespace: str = contract.SERVING_DEFAULTS["serving_namespace"]
    api_port: int = contract.SERVING_DEFAULTS["serving_api_port"]
    dist_port: int = contract.SERVING_DEFAULTS["serving_dist_port"]
    hf_cache: str = contract.SERVING_DEFAULTS["serving_hf_cache"]
    shm_size: str = contract.SERVING_DEFAULTS["serving_shm_size"]
    hf_token_secret: str = contract.SERVING_DEFAULTS["serving_hf_token_secret"]
    gateway_key_secret: str = contract.SERVING_DEFAULTS["serving_gateway_key_secret"]
    """Secret with the gateway's master key (created by the serve play)."""
    startup_timeout: int = contract.SERVING_DEFAULTS["serving_startup_timeout"]
    liveness_timeout: int = contract.SERVING_DEFAULTS["serving_liveness_timeout"]
    jit_cache: str = contract.SERVING_DEFAULTS["serving_jit_cache"]
    """Host directory under which each Spark keeps one JIT-cache directory per image."""
    fetch_secret: str = contract.SERVING_DEFAULTS["serving_fetch_secret"]
    """Secret with the rsync password of the fetch step (created by the serve play)."""
    fetch_port: int = contract.SERVING_DEFAULTS["serving_fetch_port"]
    """TCP port of the receivers' rsync daemon on the fabric PF addresses."""
    fetch_timeout: int = contract.SERVING_DEFAULTS["serving_fetch_timeout"]
    """Seconds the download + copy of one model may take."""
    memwait_timeout: int = contract.SERVING_DEFAULTS["serving_memwait_timeout"]
    """Seconds a rank waits for MemAvailable to cover its planned footprint."""
    prepull: bool = contract.SERVING_DEFAULTS["serving_prepull"]
    """Render one image pre-pull Job per Spark, applied before a switch."""
    prepull_timeout: int = contract.SERVING_DEFAULTS["serving_prepull_timeout"]
    rdma_access: str = contract.SERVING_DEFAULTS["serving_rdma_access"]
    """How an NCCL rank reaches RDMA (one of :data:`~sparkrack.contract.RDMA_ACCESS`)."""
    rdma_resource: str = contract.SERVING_DEFAULTS["serving_rdma_resource"]
    """The RDMA device plugin's resource a rank asks for with ``rdma_access: device-plugin``."""
    fetch_image: str = ""
    """Image of the push and receiver containers (``serving_fetch_image``; no default)."""
    gid_index: dict[str, int] = field(default_factory=dict)
    """Discovered RoCE GID index per node (roce role fact ``roce_gid_index``)."""
    spark: str | None = None
    """Spark that hosts a single-Spark engine (vllm/trtllm); None = the rank-0 Spark."""
    sparks: tuple[str, ...] = ()
    """The Sparks of one deployment, head first (empty: every Spark of the plan, in rank order)."""
    vf_index: int | None = None
    """The VF index the deployment's pods use on every rail (None: the plan's serving VF)."""
    deployment: str = ""
    """The deployment's name (empty: derived from the profile's name)."""

    @property
    def nodes(self) -> int:
        return len(self.group())

    def node(self, name: str) -> NodePlan:
        for node in self.plan.nodes:
            if node.name == name:
                return node
        raise SparkrackError(
            Problem(
                "sparks",
                name,
                "is not a Spark of the inventory",
                f"use one of: {', '.join(n.name for n in self.plan.nodes)}",
                "deployment-sparks",
            )
        )

    def group(self) -> list[NodePlan]:
        """The Sparks this context serves on, head first."""
        if self.sparks:
            return [self.node(name) for name in self.sparks]
        return sorted(self.plan.nodes, key=lambda n: n.rank)

    def spark_node(self) -> NodePlan:
        """The Spark that hosts a single-Spark engine: the deployment's, else ``serving_spark``,
        else rank 0's."""
        if self.sparks:
            return self.node(self.sparks[0])
        if self.spark is None:
            return self.group()[0]
        for node in self.plan.nodes:
            if node.name == self.spark:
                return node
        raise SparkrackError(
            Problem(
                "serving_spark",
                str(self.spark),
                "is not a Spark of the inventory",
                f"use one of: {', '.join(n.name for n in self.plan.nodes)}",
                "serving-spark",
            )
        )

    @property
    def name(self) -> str:
        """The deployment name objects and labels carry."""
        return self.deployment

    @property
    def head_address(self) -> str:
        """The head's address on the deployment's VF (rail 0): the rendezvous address."""
        head = self.group()[0]
        return head.serving_vf.address if self.vf_index is None else head.vf(self.vf_index).address


def context_from_vars(
    plan: FabricPlan, variables: dict[str, Any], gid_index: dict[str, int] | None = None
) -> ServingContext:
    """Build the context from inventory variables (``serving_*``), defaults where unset."""
    v = {
        **contract.SERVING_DEFAULTS,
        **{k: val for k, val in variables.items() if val is not None},
    }
    return ServingContext(
        plan=plan,
        namespace=str(v["serving_namespace"]),
        api_port=int(v["serving_api_port"]),
        dist_port=int(v["serving_dist_port"]),
        hf_cache=str(v["serving_hf_cache"]),
        shm_size=str(v["serving_shm_size"]),
        hf_token_secret=str(v["serving_hf_token_secret"]),
        gateway_key_secret=str(
            v["serving_gateway_key_secret"]
            or contract.SERVING_DEFAULTS["serving_gateway_key_secret"]
        ),
        startup_timeout=int(v["serving_startup_timeout"]),
        liveness_timeout=int(v["serving_liveness_timeout"]),
        jit_cache=str(v["serving_jit_cache"]),
        fetch_secret=str(v["serving_fetch_secret"]),
        fetch_port=int(v["serving_fetch_port"]),
        fetch_timeout=int(v["serving_fetch_timeout"]),
        memwait_timeout=int(v["serving_memwait_timeout"]),
        prepull=switch_on(v["serving_prepull"]),
        prepull_timeout=int(v["serving_prepull_timeout"]),
        rdma_access=rdma_access(v["serving_rdma_access"]),
        rdma_resource=str(v["serving_rdma_resource"]),
        fetch_image=str(v.get("serving_fetch_image") or ""),
        gid_index=dict(gid_index or {}),
        spark=None if v.get("serving_spark") is None else str(v["serving_spark"]),
    )


def rdma_access(value: Any) -> str:
    """``serving_rdma_access``, refused unless it is one of the known ways."""
    if value not in contract.RDMA_ACCESS:
        raise SparkrackError(
            Problem(
                "serving_rdma_access",
                repr(value),
                "is not a way an NCCL rank reaches RDMA",
                f"use one of: {', '.join(contract.RDMA_ACCESS)}",
                "serving",
            )
        )
    return str(value)


def switch_on(value: Any) -> bool:
    """An inventory switch: a YAML boolean, or its spelling as a string (``-e x=true``)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return value is True


SETTINGS = (*contract.SERVING_DEFAULTS, "serving_fetch_image")
"""The inventory settings a render reads: the serve role passes each one (``serving_settings``
in ``roles/serving/tasks/main.yml``), the CLI reads them from the inventory."""
SERVING_VARS = (*SETTINGS, "serving_spark")


def context_from_inventory(inventory: str, gid: dict[str, int] | None = None) -> ServingContext:
    """The context of an inventory directory (:func:`context_of` its loaded inventory)."""
    return context_of(load_inventory(inventory), gid)


def context_of(inv: Inventory, gid: dict[str, int] | None = None) -> ServingContext:
    """The context of a loaded inventory: its address plan, ``serving_*`` variables and the
    RoCE GID indices its hosts record (``gid`` overrides them per node)."""
    discovered = {
        host: int(inv.hostvars[host]["roce_gid_index"])
        for host in inv.sparks
        if inv.hostvars.get(host, {}).get("roce_gid_index") is not None
    }
    return context_from_vars(
        inv.plan(), {n: inv.var(n) for n in SERVING_VARS}, {**discovered, **(gid or {})}
    )
