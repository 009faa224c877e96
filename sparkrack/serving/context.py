"""Everything outside a profile that a deployment's ranks depend on: the serving context.

The address plan preflight computed, the inventory's ``serving_*`` settings and the discovered
RoCE GID indices; a deployment narrows it to its Sparks, VF and name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem, SparkrackError, shown
from sparkrack.fabric.addressplan import FabricPlan, NodePlan, nodes_from_hostvars
from sparkrack.inputs.forms import switch_on
from sparkrack.inputs.inventory import Inventory, load_inventory
from sparkrack.inputs.variable_table import BY_NAME, RULE, SERVING_DEFAULTS, SETTINGS
from sparkrack.serving.agent_settings import MemguardSettings, WatchdogSettings
from sparkrack.serving.trust import Trust, trust_of


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
    gateway_key_secret: str = SERVING_DEFAULTS["serving_gateway_key_secret"]
    """Secret with the gateway's master key (created by the serve play)."""
    startup_timeout: int = SERVING_DEFAULTS["serving_startup_timeout"]
    liveness_timeout: int = SERVING_DEFAULTS["serving_liveness_timeout"]
    jit_cache: str = SERVING_DEFAULTS["serving_jit_cache"]
    """Host directory under which each Spark keeps one JIT-cache directory per image."""
    fetch_secret: str = SERVING_DEFAULTS["serving_fetch_secret"]
    """Secret with the rsync password of the fetch step (created by the serve play)."""
    fetch_port: int = SERVING_DEFAULTS["serving_fetch_port"]
    """TCP port of the receivers' rsync daemon on the fabric PF addresses."""
    fetch_timeout: int = SERVING_DEFAULTS["serving_fetch_timeout"]
    """Seconds the download + copy of one model may take."""
    memwait_timeout: int = SERVING_DEFAULTS["serving_memwait_timeout"]
    """Seconds a rank waits for MemFree, after a flush, to cover its planned footprint."""
    rail_mbit_s: int = SERVING_DEFAULTS["serving_rail_mbit_s"]
    """What the weight copy reaches on one fabric rail (the switch estimate)."""
    download_mbit_s: int = SERVING_DEFAULTS["serving_download_mbit_s"]
    """What the head Spark downloads from the Hub at (the switch estimate)."""
    disk_mbyte_s: int = SERVING_DEFAULTS["serving_disk_mbyte_s"]
    """What a Spark's disk reads and writes the weights at (the switch estimate)."""
    prepull: bool = SERVING_DEFAULTS["serving_prepull"]
    """Render one image pre-pull Job per Spark, applied before a switch."""
    prepull_timeout: int = SERVING_DEFAULTS["serving_prepull_timeout"]
    rdma_access: str = SERVING_DEFAULTS["serving_rdma_access"]
    """How an NCCL rank reaches RDMA (one of :data:`~sparkrack.contract.RDMA_ACCESS`)."""
    rdma_resource: str = SERVING_DEFAULTS["serving_rdma_resource"]
    """The RDMA device plugin's resource a rank asks for with ``rdma_access: device-plugin``."""
    fetch_image: str = ""
    """Image of the push and receiver containers (``serving_fetch_image``; no default)."""
    gid_index: dict[str, int] = field(default_factory=dict)
    """RoCE GID index overrides per node (an inventory's host var ``roce_gid_index`` or
    ``render --gid-index``): handed to the rank's resolver, which warns when sysfs disagrees."""
    spark: str | None = None
    """Spark that hosts a single-Spark engine (vllm/trtllm); None = the rank-0 Spark."""
    sparks: tuple[str, ...] = ()
    """The Sparks of one deployment, head first (empty: every Spark of the plan, in rank order)."""
    vf_index: int | None = None
    """The VF index the deployment's pods use on every rail (None: the plan's serving VF)."""
    deployment: str = ""
    """The deployment's name (empty: derived from the profile's name)."""
    deployment_fetch_port: int | None = None
    """The deployment's receivers' port, resolved across the inventory's deployments so that no
    two on one Spark share it (``switch.plan.deployment_ports``); None: derived from its name."""
    gateway_clients: tuple[str, ...] = ()
    """CIDR blocks that may call the gateway (``serving_gateway_clients``; empty: every pod of
    the cluster)."""
    image_reference: str = ""
    """The reference by digest of the image in ``serving_image_archive`` (empty: none)."""
    gateway_node_port: int | None = None
    """The NodePort the gateway listens on at the control-plane node's LAN address
    (``serving_gateway_node_port``; None: closed, the cluster's pods only)."""
    trust: Trust = field(default_factory=Trust)
    """The images and model repos whose code the inventory lets run (nothing by default)."""
    api_server: str = ""
    """The K3s server's node address (the control-plane host's ``k3s_node_ip``): the one host
    the watchdog and the memory guard may reach, at the API port (empty: no inventory, and no
    pod of the namespace may reach the API)."""
    watchdog: WatchdogSettings | None = None
    """The stall watchdog of every deployment (``serving_watchdog_*``; None: no image given,
    no watchdog)."""
    settings: dict[str, Any] = field(default_factory=lambda: dict(SERVING_DEFAULTS))
    """Every setting the render reads (:data:`~sparkrack.inputs.variable_table.SETTINGS`),
    checked against its form, the table's default where the inventory leaves it unset: a
    setting with no field of its own above is read here by its name."""
    memguard: MemguardSettings | None = None
    """The memory guard of every Spark (``serving_memguard_*``, the watchdog's image; None: no
    watchdog image, no guard)."""

    @property
    def agents_namespace(self) -> str:
        """Where the gateway, the watchdogs and the memory guard run."""
        return contract.agents_namespace(self.namespace)

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

    def rank_address(self, node: NodePlan) -> str:
        """A rank's own address on the deployment's VF of rail 0 (the address plan's, which the
        pod's Multus annotation gives the VF)."""
        return node.serving_vf.address if self.vf_index is None else node.vf(self.vf_index).address

    @property
    def head_address(self) -> str:
        """The head's address on the deployment's VF (rail 0): the rendezvous address."""
        return self.rank_address(self.group()[0])


def context_from_vars(
    plan: FabricPlan,
    variables: Mapping[str, Any],
    gid_index: dict[str, int] | None = None,
    sources: Mapping[str, str] | None = None,
) -> ServingContext:
    """Build the context from inventory variables (``serving_*``), defaults where unset; each
    is checked against its form first (:data:`sparkrack.inputs.variable_table.VARIABLES`), and a
    refusal names the file ``sources`` gives for it (else the inventory)."""
    given = {k: val for k, val in variables.items() if val is not None and val != ""}
    problems = setting_problems(given, sources or {})
    if problems:
        raise SparkrackError(problems)
    from_archive = archive_images(given, sources or {})
    v = {**SERVING_DEFAULTS, **from_archive, **given}
    return ServingContext(
        plan=plan,
        image_reference=from_archive.get("serving_fetch_image", ""),
        namespace=str(v["serving_namespace"]),
        api_port=int(v["serving_api_port"]),
        dist_port=int(v["serving_dist_port"]),
        hf_cache=str(v["serving_hf_cache"]),
        shm_size=str(v["serving_shm_size"]),
        hf_token_secret=str(v["serving_hf_token_secret"]),
        gateway_key_secret=str(v["serving_gateway_key_secret"]),
        startup_timeout=int(v["serving_startup_timeout"]),
        liveness_timeout=int(v["serving_liveness_timeout"]),
        jit_cache=str(v["serving_jit_cache"]),
        fetch_secret=str(v["serving_fetch_secret"]),
        fetch_port=int(v["serving_fetch_port"]),
        fetch_timeout=int(v["serving_fetch_timeout"]),
        memwait_timeout=int(v["serving_memwait_timeout"]),
        rail_mbit_s=int(v["serving_rail_mbit_s"]),
        download_mbit_s=int(v["serving_download_mbit_s"]),
        disk_mbyte_s=int(v["serving_disk_mbyte_s"]),
        prepull=switch_on(v["serving_prepull"]),
        prepull_timeout=int(v["serving_prepull_timeout"]),
        rdma_access=rdma_access(v["serving_rdma_access"]),
        rdma_resource=str(v["serving_rdma_resource"]),
        fetch_image=str(v.get("serving_fetch_image") or ""),
        gid_index=dict(gid_index or {}),
        spark=None if v.get("serving_spark") is None else str(v["serving_spark"]),
        gateway_clients=tuple(str(c) for c in variables.get("serving_gateway_clients") or ()),
        gateway_node_port=(
            None
            if v.get("serving_gateway_node_port") is None
            else int(v["serving_gateway_node_port"])
        ),
        trust=trust_of(variables),
        watchdog=watchdog_settings(v),
        memguard=memguard_settings(v),
        settings={name: v.get(name, BY_NAME[name].default) for name in SETTINGS},
    )


def archive_images(given: Mapping[str, Any], sources: Mapping[str, str]) -> dict[str, str]:
    """With ``serving_image_archive``: its reference by digest as the fetch and watchdog image
    (an image the inventory names itself takes precedence). An archive that is not one is
    refused in the file that names it."""
    key = "serving_image_archive"
    if not given.get(key):
        return {}
    from sparkrack.serving.image_archive import read

    path = str(given[key])
    try:
        reference = read(path).reference
    except SparkrackError as exc:
        raise SparkrackError(
            [
                Problem(sources.get(key, "inventory"), key, f"{path} {p.message}", p.fix, RULE)
                for p in exc.problems
            ]
        ) from None
    return {"serving_fetch_image": reference, "serving_watchdog_image": reference}


def watchdog_settings(v: Mapping[str, Any]) -> WatchdogSettings | None:
    """The watchdog's settings from checked ``serving_*`` values; its restart grace is the
    startup budget (bad verdicts while a restarted group loads are not a new failure)."""
    image = str(v.get("serving_watchdog_image") or "")
    if not image:
        return None
    return WatchdogSettings(
        image=image,
        stall_s=float(v["serving_watchdog_stall_s"]),
        interval_s=float(v["serving_watchdog_interval_s"]),
        max_restarts=int(v["serving_watchdog_max_restarts"]),
        restart_window_s=float(v["serving_watchdog_restart_window_s"]),
        restart_grace_s=float(v["serving_startup_timeout"]),
        evidence_dir=str(v["serving_watchdog_evidence_dir"]),
    )


def memguard_settings(v: Mapping[str, Any]) -> MemguardSettings | None:
    """The memory guard's settings from checked ``serving_*`` values (the watchdog's image)."""
    image = str(v.get("serving_watchdog_image") or "")
    if not image:
        return None
    return MemguardSettings(
        image=image,
        floor=str(v["serving_memguard_floor"]),
        psi_full=float(v["serving_memguard_psi_full"]),
    )


def setting_problems(given: Mapping[str, Any], sources: Mapping[str, str]) -> list[Problem]:
    """Each ``serving_*`` setting against its form, then the settings against each other: the
    ports of one pod apart, the two host caches apart, the three Secrets apart."""
    problems = []
    for name in SERVING_VARS:
        if name not in given:
            continue
        value = given[name]
        wrong = BY_NAME[name].form.problem(value)
        if wrong:
            problems.append(
                Problem(sources.get(name, "inventory"), name, wrong, BY_NAME[name].form.fix, RULE)
            )
    if problems:
        return problems
    v = {**SERVING_DEFAULTS, **given}
    source = sources.get
    if int(v["serving_api_port"]) == int(v["serving_dist_port"]):
        problems.append(
            Problem(
                source("serving_dist_port", "inventory"),
                "serving_dist_port",
                f"is the API port too ({v['serving_api_port']}): the head's server and its "
                "rendezvous cannot share a port",
                "give them different ports (defaults 30000 and 20000)",
                RULE,
            )
        )
    hf, jit = str(v["serving_hf_cache"]).rstrip("/"), str(v["serving_jit_cache"]).rstrip("/")
    if hf == jit or hf.startswith(f"{jit}/") or jit.startswith(f"{hf}/"):
        problems.append(
            Problem(
                source("serving_jit_cache", "inventory"),
                "serving_jit_cache",
                f"{jit} and serving_hf_cache {hf} overlap: a new image must never load kernels "
                "from the weights' directory, nor the weights' pruning touch the kernels",
                "give each its own directory (defaults /var/lib/sparkrack/{huggingface,jit})",
                RULE,
            )
        )
    if v.get("serving_gateway_node_port") is not None and not v.get("serving_gateway_clients"):
        problems.append(
            Problem(
                source("serving_gateway_node_port", "inventory"),
                "serving_gateway_node_port",
                "opens the gateway on the LAN, but serving_gateway_clients is empty: the "
                "gateway's NetworkPolicy admits the cluster's pods only, so every laptop would "
                "be refused",
                "set serving_gateway_clients to the LAN that may call it, e.g. [192.168.1.0/24]",
                RULE,
            )
        )
    secrets = [
        (name, str(v[name]))
        for name in (
            "serving_hf_token_secret",
            "serving_gateway_key_secret",
            "serving_fetch_secret",
        )
    ]
    for i, (name, value) in enumerate(secrets):
        for other, value_other in secrets[:i]:
            if value == value_other:
                problems.append(
                    Problem(
                        source(name, "inventory"),
                        name,
                        f"names the Secret {other} names ({value}): one would overwrite the other",
                        "give every Secret its own name",
                        RULE,
                    )
                )
    return problems


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


SERVING_VARS = (*SETTINGS, "serving_spark")


def context_from_inventory(
    inventory: str | Inventory, gid: dict[str, int] | None = None
) -> ServingContext:
    """The context of an inventory directory (:func:`context_of` its loaded inventory)."""
    return context_of(
        inventory if isinstance(inventory, Inventory) else load_inventory(inventory), gid
    )


def context_of(inv: Inventory, gid: dict[str, int] | None = None) -> ServingContext:
    """The context of a loaded inventory: its address plan, ``serving_*`` variables and the
    RoCE GID index overrides its hosts set (``gid`` overrides them per node)."""
    discovered: dict[str, int] = {}
    for host in inv.sparks:
        value = inv.hostvars.get(host, {}).get("roce_gid_index")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise SparkrackError(
                Problem(
                    inv.source("roce_gid_index", host),
                    f"{host}.roce_gid_index",
                    f"is {shown(value)}, not a GID table index",
                    "write the index `show_gids` lists for the VF's address (0-255), or remove it",
                    RULE,
                )
            )
        discovered[host] = value
    ctx = context_from_vars(
        inv.plan(),
        {n: inv.var(n) for n in SERVING_VARS},
        {**discovered, **(gid or {})},
        {n: inv.source(n) for n in SERVING_VARS},
    )
    return replace(ctx, api_server=api_server(inv.control_plane, inv.hostvars))


def api_server(control_plane: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> str:
    """The K3s server's node address: the one control-plane host's (empty: none listed)."""
    nodes = nodes_from_hostvars(control_plane[:1], hostvars)
    return nodes[0].node_ip if nodes else ""
