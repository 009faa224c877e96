"""vLLM across Sparks: what the pinned releases (0.18.0, 0.19.0) define for the multiprocessing
executor's multi-node launch without Ray, and the table, sockets and rules sparkrack derives from
it. The engine class is :class:`sparkrack.serving.engines.vllm.VLLMAcrossSparks`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sparkrack.errors import Problem
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
        "vllm/engine/arg_utils.py (create_engine_config); read only by data-parallel engines",
    ),
    UpstreamFlag(
        "--data-parallel-rpc-port",
        "data_parallel_rpc_port",
        "29550",
        "vllm/config/parallel.py (ParallelConfig.data_parallel_rpc_port); the handshake of "
        "data-parallel engines on other nodes only",
    ),
)
"""The multi-node options of the pinned releases. sparkrack renders the first five; the
data-parallel ones stay unset (tensor and pipeline parallel only: ``vllm-across-data-parallel``)."""

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
)

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
ACROSS_LISTENERS = (
    *api_listeners(SERVER, "/metrics", gated=True),
    TCP_STORE,
    NCCL_BOOTSTRAP,
    GLOO,
    MESSAGE_QUEUE,
)
"""Every socket of a vLLM rank across Sparks. The API server talks to its engine core and the
local workers over ZeroMQ ipc:// paths and shared memory (no TCP port)."""

ACROSS_RULES = RuleSet()


@ACROSS_RULES.add(
    "vllm-across-ranks",
    "vllm/engine/arg_utils.py create_engine_config (world_size = dp x pp x tp, divisible by "
    "nnodes); one GB10 per Spark",
    "vLLM across Sparks: tp x pp ranks, one per Spark, no more than the Sparks there are; ep = 1",
)
def _across_ranks(c: Ctx) -> Iterator[Problem]:
    # Fewer ranks than Sparks is a profile on part of the inventory: it takes the first tp x pp
    # (VLLMAcrossSparks.ranks), and a deployment naming other Sparks is refused there.
    if c.nodes is not None and c.tp * c.pp > c.nodes:
        yield c.p(
            "topology.tp",
            f"tp·pp = {c.tp}·{c.pp} = {c.tp * c.pp} vLLM ranks, but there are only {c.nodes} "
            "Sparks (one GPU each)",
            f"set tp·pp to at most {c.nodes}, or add Sparks",
            "vllm-across-ranks",
        )
    if c.ep != 1:
        yield c.p(
            "topology.ep",
            f"ep={c.ep}: vLLM has no expert-parallel size (its experts split over tp)",
            "set topology.ep: 1",
            "vllm-across-ranks",
        )


@ACROSS_RULES.add(
    "vllm-across-data-parallel",
    "vllm/entrypoints/cli/serve.py (run_headless: data-parallel engines need "
    "--data-parallel-address/-rpc-port/-size-local per node)",
    "vLLM across Sparks is rendered for tensor and pipeline parallel only",
)
def _across_dp(c: Ctx) -> Iterator[Problem]:
    dp = c.block("vllm").get("data_parallel_size")
    if isinstance(dp, int) and dp > 1:
        yield c.p(
            "vllm.data_parallel_size",
            f"{dp}: sparkrack renders one vLLM engine whose workers run headless on the other "
            "Sparks; data-parallel engines across Sparks are not rendered",
            "set vllm.data_parallel_size: 1 and spread the model with topology.tp or topology.pp",
            "vllm-across-data-parallel",
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
