"""vLLM across Sparks: what the pinned releases (0.18.0, 0.19.0) define for the multiprocessing
executor's multi-node launch without Ray, and the table, sockets and rules sparkrack derives from
it. The engine class is :class:`sparkrack.serving.engines.vllm.VLLMAcrossSparks`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sparkrack.errors import Problem
from sparkrack.serving.engines import listeners
from sparkrack.serving.engines.base import api_listeners
from sparkrack.serving.engines.listeners import GLOO, NCCL_BOOTSTRAP, Bind, Listener, Peer, PortOf
from sparkrack.serving.profile.images import version_tuple
from sparkrack.serving.profile.knobs import Knob, RuntimeKnob, runtime
from sparkrack.serving.profile.ruleset import Ctx, RuleSet

# --- across Sparks: the multiprocessing executor without Ray (vLLM 0.18.0, 0.19.0) --------------
# What the release wheels define (paths inside the wheel; the test reads them with the real parser).


@dataclass(frozen=True)
class UpstreamFlag:
    """One option of vLLM's multi-node launch, as its release defines it."""

    flag: str
    dest: str
    default: str
    source: str


ACROSS_FLAGS: tuple[UpstreamFlag, ...] = (
    UpstreamFlag(
        "--nnodes",
        "nnodes",
        "1",
        "vllm/engine/arg_utils.py (add_cli_args, alias -n); vllm/config/parallel.py "
        "(ParallelConfig.nnodes: nnodes > 1 selects the mp backend on CUDA)",
    ),
    UpstreamFlag(
        "--node-rank",
        "node_rank",
        "0",
        "vllm/engine/arg_utils.py (add_cli_args, alias -r); vllm/config/parallel.py "
        "(ParallelConfig.node_rank)",
    ),
    UpstreamFlag(
        "--master-addr",
        "master_addr",
        "127.0.0.1",
        "vllm/config/parallel.py (ParallelConfig.master_addr); vllm/distributed/parallel_state.py "
        "(init_distributed_environment: nnodes > 1 -> tcp://master_addr:master_port)",
    ),
    UpstreamFlag(
        "--master-port",
        "master_port",
        "29501",
        "vllm/config/parallel.py (ParallelConfig.master_port)",
    ),
    UpstreamFlag(
        "--headless",
        "headless",
        "False",
        "vllm/entrypoints/openai/cli_args.py (make_arg_parser); vllm/entrypoints/cli/serve.py "
        "(run_headless: node_rank_within_dp > 0 runs MultiprocExecutor(monitor_workers=False), "
        "no API server)",
    ),
    UpstreamFlag(
        "--data-parallel-address",
        "data_parallel_address",
        "None (master_addr with the mp backend)",
        "vllm/engine/arg_utils.py (create_engine_config: ParallelConfig.data_parallel_master_ip, "
        "the address of the handshake, the front-end queues and the DP coordinator)",
    ),
    UpstreamFlag(
        "--data-parallel-rpc-port",
        "data_parallel_rpc_port",
        "29550",
        "vllm/config/parallel.py (ParallelConfig.data_parallel_rpc_port); vllm/v1/engine/utils.py "
        "(launch_core_engines: the handshake port when some engine is on another node)",
    ),
    UpstreamFlag(
        "--data-parallel-start-rank",
        "data_parallel_start_rank",
        "None (node_rank x GPUs per node // tp x pp with --nnodes)",
        "vllm/engine/arg_utils.py (create_engine_config: the first DP rank a node runs; on a "
        "server that is not headless it turns on the hybrid load balancer)",
    ),
    UpstreamFlag(
        "--data-parallel-size-local",
        "data_parallel_size_local",
        "None (GPUs per node // tp x pp, at least 1, with --nnodes)",
        "vllm/engine/arg_utils.py (create_engine_config: the DP engines a node runs)",
    ),
)
"""The multi-node options of the pinned releases. sparkrack renders the first five, and with
``vllm.data_parallel_size`` > 1 the DP address, RPC port and the start rank of ranks 1..; the
local DP size is left to vLLM's inference from ``--nnodes`` (1: one GB10 per Spark)."""

ACROSS_KNOBS: tuple[Knob, ...] = (
    runtime("--nnodes", "nnodes", aliases=("-n",)),
    runtime("--node-rank", "node_rank", aliases=("-r",)),
    runtime("--master-addr", "master_addr"),
    runtime("--master-port", "master_port"),
    RuntimeKnob(
        key="runtime.headless",
        type="boolean",
        help="headless worker (ranks 1..)",
        flag="--headless",
        kind="bool",
        runtime="headless",
    ),
    # Data parallel only (VLLMAcrossSparks.runtime_value leaves them out at DP size 1).
    runtime("--data-parallel-address", "dp_address", aliases=("-dpa",)),
    runtime("--data-parallel-rpc-port", "dp_rpc_port", aliases=("-dpp",)),
    runtime("--data-parallel-start-rank", "dp_start_rank", aliases=("-dpr",)),
)
DP_FLAGS = tuple(f.flag for f in ACROSS_FLAGS if f.flag.startswith("--data-parallel-"))
DP_RUNTIME = ("dp_address", "dp_rpc_port", "dp_start_rank")
"""The data-parallel deployment flags' names (:data:`ACROSS_KNOBS`)."""

SERVER = "vllm/entrypoints/openai/api_server.py (--host, --port)"
TCP_STORE = Listener(
    "dist-init (torch TCPStore)",
    "head",
    Bind.ALL,
    PortOf.DIST,
    (Peer.RANKS,),
    "vllm/distributed/parallel_state.py (init_distributed_environment: nnodes > 1 -> "
    "tcp://<--master-addr>:<--master-port>)",
    reach=Bind.FABRIC,
)
MESSAGE_QUEUE = Listener(
    "message queues across nodes (ZeroMQ XPUB)",
    "every",
    Bind.FABRIC,
    PortOf.RANDOM,
    (Peer.RANKS,),
    "vllm/distributed/device_communicators/shm_broadcast.py (MessageQueue remote socket at "
    "connect_ip or get_ip()); vllm/v1/executor/multiproc_executor.py (the head's scheduler "
    "broadcast, each worker's response queue)",
    chosen_by=("VLLM_HOST_IP",),
    fallback=Bind.CLUSTER,
)
DATA_PARALLEL = "data parallel"
"""The launch of :data:`DP_LISTENERS` (``Listener.when``): ``vllm.data_parallel_size`` > 1."""
# With an engine on another node, vLLM puts these on tcp://<--data-parallel-address> instead of
# ipc:// paths: the head's fabric address, which sparkrack renders, so they bind the fabric VF.
# The DP ranks' worker groups (one torch world of dp x tp x pp at --master-addr:--master-port)
# are TCP_STORE, NCCL_BOOTSTRAP and GLOO; so are the gloo pairs of the DP group.
DP_HANDSHAKE = Listener(
    "data-parallel handshake (ZeroMQ ROUTER)",
    "head",
    Bind.FABRIC,
    PortOf.DIST_NEXT,
    (Peer.RANKS,),
    "vllm/v1/engine/utils.py (launch_core_engines: ROUTER bound at "
    "tcp://<--data-parallel-address>:<--data-parallel-rpc-port>); vllm/v1/engine/core.py "
    "(EngineCoreProc._perform_handshake: each remote engine's DEALER connects)",
    when=DATA_PARALLEL,
)
DP_FRONT_END = Listener(
    "front-end request and output queues (ZeroMQ ROUTER, PULL)",
    "head",
    Bind.FABRIC,
    PortOf.RANDOM,
    (Peer.RANKS,),
    "vllm/v1/engine/utils.py (get_engine_zmq_addresses: tcp://<--data-parallel-address>:<free "
    "port> per API server); vllm/v1/engine/core_client.py (MPClient binds them; engines "
    "connect DEALER and PUSH)",
    when=DATA_PARALLEL,
)
DP_COORDINATOR = Listener(
    "DP coordinator (ZeroMQ XPUB, PULL)",
    "head",
    Bind.FABRIC,
    PortOf.RANDOM,
    (Peer.RANKS,),
    "vllm/v1/engine/coordinator.py (DPCoordinator: the engines' publish and output sockets at "
    "tcp://<--data-parallel-address>:<free port>; the front-end's stays ipc://)",
    when=DATA_PARALLEL,
)
DP_GROUP_STORE = Listener(
    "DP group store (torch TCPStore, stateless group)",
    "head",
    Bind.ALL,
    PortOf.RANDOM,
    (Peer.RANKS,),
    "vllm/config/parallel.py (ParallelConfig.stateless_init_dp_group at "
    "<--data-parallel-address>:data_parallel_master_port, a free port of the head's, sent in "
    "the handshake); "
    "vllm/v1/engine/core.py (DPEngineCoreProc._init_data_parallel, MoE models)",
    reach=Bind.FABRIC,
    when=DATA_PARALLEL,
)
DP_LISTENERS = (DP_HANDSHAKE, DP_FRONT_END, DP_COORDINATOR, DP_GROUP_STORE)
ACROSS_LISTENERS = (
    *api_listeners(SERVER, "/metrics", gated=True),
    TCP_STORE,
    NCCL_BOOTSTRAP,
    GLOO,
    MESSAGE_QUEUE,
    *DP_LISTENERS,
)
"""Every socket of a vLLM rank across Sparks. The API server talks to its engine core and the
local workers over ZeroMQ ipc:// paths and shared memory (no TCP port); with data parallel, to
the engines of other Sparks over :data:`DP_LISTENERS`."""

ACROSS_RULES = RuleSet()


DP_READ = ((0, 18), (0, 19))
"""The vLLM releases (major, minor) whose data-parallel launch across nodes sparkrack has read."""


def data_parallel(c: Ctx) -> int:
    """The profile's ``vllm.data_parallel_size`` (1 when unset)."""
    dp = c.block("vllm").get("data_parallel_size", 1)
    return dp if isinstance(dp, int) and dp > 0 else 1


@ACROSS_RULES.add(
    "vllm-across-ranks",
    "vllm/engine/arg_utils.py create_engine_config (world_size = dp x pp x tp, divisible by "
    "nnodes); one GB10 per Spark",
    "vLLM across Sparks: dp x tp x pp ranks, one per Spark, no more than the Sparks there are; "
    "ep = 1",
)
def _across_ranks(c: Ctx) -> Iterator[Problem]:
    # Fewer ranks than Sparks is a profile on part of the inventory: it takes the first
    # dp x tp x pp (VLLMAcrossSparks.ranks), and a deployment naming other Sparks is refused there.
    dp = data_parallel(c)
    if c.nodes is not None and dp * c.tp * c.pp > c.nodes:
        if dp > 1:
            yield c.p(
                "vllm.data_parallel_size",
                f"dp·tp·pp = {dp}·{c.tp}·{c.pp} = {dp * c.tp * c.pp} vLLM ranks, but there are "
                f"only {c.nodes} Sparks (one GPU each)",
                f"set vllm.data_parallel_size·tp·pp to at most {c.nodes}, or add Sparks",
                "vllm-across-ranks",
            )
        else:
            yield c.p(
                "topology.tp",
                f"tp·pp = {c.tp}·{c.pp} = {c.tp * c.pp} vLLM ranks, but there are only "
                f"{c.nodes} Sparks (one GPU each)",
                f"set tp·pp to at most {c.nodes}, or add Sparks",
                "vllm-across-ranks",
            )
    if c.ep != 1:
        yield c.p(
            "topology.ep",
            f"ep={c.ep}: vLLM has no expert-parallel size (its experts split over tp, and over "
            "dp x tp with data parallel)",
            "set topology.ep: 1",
            "vllm-across-ranks",
        )


def is_moe(c: Ctx) -> bool:
    """The model has routed experts (``model_info.experts.routed`` or ``layers.moe``)."""
    experts = c.info("experts") or {}
    layers = c.info("layers") or {}
    routed = experts.get("routed", 0) if isinstance(experts, dict) else 0
    moe = layers.get("moe", 0) if isinstance(layers, dict) else 0
    return bool(routed) or bool(moe)


@ACROSS_RULES.add(
    "vllm-across-data-parallel",
    "vllm/v1/engine/core.py (EngineCoreProc.run_engine_core: the DP engines of a dense model run "
    "as independent engines of DP size 1); vllm/distributed/parallel_state.py "
    "(init_distributed_environment: with --nnodes every engine's group meets at "
    "--master-addr:--master-port); DP_LISTENERS (read from the 0.18.0 and 0.19.0 wheels)",
    "vLLM data parallel across Sparks is rendered for MoE models, on vLLM 0.18 and 0.19 only",
)
def _across_dp(c: Ctx) -> Iterator[Problem]:
    dp = data_parallel(c)
    version = c.image.version if c.image is not None else None
    if dp > 1 and version is not None and version_tuple(version)[:2] not in DP_READ:
        read = " and ".join(".".join(map(str, v)) for v in DP_READ)
        yield c.p(
            "image",
            f"vLLM {version}: sparkrack has read the data-parallel launch across nodes (its "
            f"flags and sockets, DP_LISTENERS) of vLLM {read} only",
            f"use an image of vLLM {read} (image_info.vllm states it), or set "
            "vllm.data_parallel_size: 1",
            "vllm-across-data-parallel",
        )
    if dp > 1 and not is_moe(c):
        yield c.p(
            "vllm.data_parallel_size",
            f"{dp}: vLLM runs the DP engines of a dense model as independent engines of DP size "
            "1, yet with --nnodes each one's process group meets at the same --master-addr and "
            "--master-port; sparkrack renders data parallel across Sparks for MoE models only "
            "(model_info.experts), whose DP ranks form one group",
            "set vllm.data_parallel_size: 1 and spread the model with topology.tp or topology.pp, "
            "or run one single-Spark deployment per Spark behind the gateway",
            "vllm-across-data-parallel",
        )


ACROSS_RESERVED = {
    **dict.fromkeys(
        ("--distributed-executor-backend", "--data-parallel-backend"),
        # docs.ray.io ray-core/scheduling/ray-oom-prevention: the raylet's memory monitor kills
        # workers past its threshold of node memory (0.95 by default).
        "sparkrack (vLLM's multiprocessing executor across Sparks: every rank gets "
        "--nnodes, --node-rank, --master-addr and --master-port, ranks 1.. --headless; "
        "not Ray, whose memory monitor counts a GB10's unified memory, which the "
        "weights fill, and kills the workers past 95 % of it)",
    ),
    **dict.fromkeys(
        (
            *DP_FLAGS,
            "--data-parallel-rank",
            "--data-parallel-hybrid-lb",
            "--data-parallel-external-lb",
            "--api-server-count",
        ),
        "sparkrack (vllm.data_parallel_size: every rank gets --data-parallel-size, the "
        "head's fabric address as --data-parallel-address and serving_dist_port + 1 as "
        "--data-parallel-rpc-port, ranks 1.. their --data-parallel-start-rank; the head's "
        "API servers, one per DP rank by vLLM's default, balance them)",
    ),
}
"""Options of ``extra_args`` that a profile across Sparks may not set -> who sets them."""


@dataclass(frozen=True)
class LaunchPlan:
    """One multi-node launch: ``nodes`` = dp x tp x pp ranks, one per Spark, meeting at the
    head's fabric address; node rank r runs DP rank r // (tp x pp)."""

    nodes: int
    dp: int
    head: str
    """The head's fabric address (the address plan's)."""
    dist_port: int

    FLAGS = ("nnodes", "node_rank", "master_addr", "master_port", *DP_RUNTIME)

    def flag(self, what: str, rank: int) -> str | None:
        """A deployment flag's value for one rank; None (left out): the data-parallel ones at DP
        size 1, and the start rank on the head (there it turns on vLLM's hybrid balancer)."""
        if what in DP_RUNTIME and self.dp == 1:
            return None
        values = {
            "nnodes": str(self.nodes),
            "node_rank": str(rank),
            "master_addr": self.head,
            "master_port": str(self.dist_port),
            "dp_address": self.head,
            "dp_rpc_port": str(listeners.next_port(self.dist_port)),
            "dp_start_rank": str(self.dp_rank(rank)) if rank > 0 else None,
        }
        return values[what]

    def dp_rank(self, rank: int) -> int:
        return rank // (self.nodes // self.dp)

    def facts(self, rank: int) -> dict[str, str]:
        """The ParallelConfig vLLM must build for the rank (vllm/config/parallel.py) for the
        ranks to meet as this launch; ranks disagree with each other only where one disagrees
        with this."""
        facts = {
            "nnodes": str(self.nodes),
            "node_rank": str(rank),
            "data_parallel_size": str(self.dp),
            "data_parallel_rank": str(self.dp_rank(rank)),
            "master_addr": self.head,
            "master_port": str(self.dist_port),
        }
        if self.dp > 1:
            facts["data_parallel_master_ip"] = self.head
            facts["data_parallel_rpc_port"] = str(listeners.next_port(self.dist_port))
        return facts

    def port_clash(self, api_port: int) -> Problem | None:
        """The DP handshake's port is the API port too."""
        if self.dp == 1 or listeners.next_port(self.dist_port) != api_port:
            return None
        return Problem(
            "inventory",
            "serving_dist_port",
            f"serving_dist_port + 1 = {api_port} is the API port too: a data-parallel vLLM "
            "head binds its DP handshake there",
            "choose serving_dist_port and serving_api_port at least 2 apart",
            "vllm-across-ranks",
        )


def data_parallel_memory(dp: int) -> str:
    """What each Spark of a data-parallel profile holds, as the plan assumes it."""
    return (
        f"vllm data parallel: each of the {dp} DP ranks holds its own copy of the weights, split "
        "over its tp x pp Sparks, and its own KV pool and recurrent state; vLLM 0.18-0.19 also "
        "shards a MoE model's routed experts over dp x tp (vllm/model_executor/layers/fused_moe/"
        "config.py, flatten_tp_across_dp_and_pcp), which the plan does not credit: its weights "
        "per Spark are an upper bound"
    )


EARLIEST_READ = "0.18.0"
"""The earliest vLLM release whose multi-node launch sparkrack has read (:data:`ACROSS_FLAGS`)."""


@ACROSS_RULES.add(
    "vllm-across-release",
    f"ACROSS_FLAGS (read from the vLLM {EARLIEST_READ} and 0.19.0 wheels)",
    "vLLM across Sparks needs a release whose headless multi-node launch sparkrack has read",
)
def _across_release(c: Ctx) -> Iterator[Problem]:
    if c.image is None:
        yield c.p(
            "image",
            f"{c.data.get('image')}: its vLLM release is unknown, so is its multi-node launch "
            "(--nnodes, --node-rank, --master-addr, --headless)",
            f"state image_info: {{vllm: <its release, {EARLIEST_READ} or later>}}",
            "vllm-across-release",
        )
    elif version_tuple(c.image.version) < version_tuple(EARLIEST_READ):
        yield c.p(
            "image",
            f"vLLM {c.image.version} predates the headless multi-node launch sparkrack renders "
            f"(read from {EARLIEST_READ} on)",
            f"use an image of vLLM {EARLIEST_READ} or later (image_info.vllm states it)",
            "vllm-across-release",
        )
