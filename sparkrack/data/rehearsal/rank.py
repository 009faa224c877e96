"""One rank of the rehearsal: the engine's own cross-node connection code, on CPU torch (gloo).

Runs in the engine-check environment (``python -I``; ``sys.path`` = the release's pure-Python
package, its pinned dependencies, torch), inside the network namespace of the rank's Spark and a
mount namespace with a /dev/shm of its own. Reads one JSON request on stdin; appends one JSON
line per stage to the status file the request names, so that the caller can see where a rank
stands and which connection it waits on:

1. the engine's own parser reads the rendered argv (SGLang: ``--dist-init-addr``, ``--nnodes``;
   vLLM: ``--nnodes``, ``--node-rank``, ``--master-addr``, ``--master-port``, ``--headless``);
2. the engine's ``init_distributed_environment`` joins the world group (torch.distributed's
   TCPStore, then gloo) with backend gloo. SGLang is handed its dist-init address; vLLM is
   handed the parallel config its parser's values make, and picks
   ``tcp://<master_addr>:<master_port>`` itself, as a multi-node worker does;
3. the engine's ``MessageQueue.create_from_process_group`` builds the group's broadcaster: it
   decides "same node" through shared memory, rank 0 binds its remote socket where the engine's
   own address choice says (SGLang: ``SGLANG_HOST_IP``...; vLLM: ``VLLM_HOST_IP``, else the
   default route's address) and the other ranks connect to it;
4. rank 0 broadcasts one object through it; every other rank reports what it received.

Only what needs a GPU is a stand-in (the engine-check harness' inert modules, loaded from the
file beside the enginecheck data); ``create_from_handle`` and ``export_handle`` are observed,
not replaced.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
from typing import Any

REQUEST: dict[str, Any] = {}


def status(stage: str, **fields: Any) -> None:
    line = json.dumps({"stage": stage, "t": round(time.monotonic(), 3), **fields})
    with open(REQUEST["status"], "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def _harness() -> Any:
    spec = importlib.util.spec_from_file_location("sparkrack_harness", REQUEST["harness"])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    REQUEST.update(json.load(sys.stdin))
    os.environ.update(REQUEST["env"])
    status("start", pid=os.getpid())
    harness = _harness()
    import torch  # type: ignore[import-not-found]

    # The engine's modules query the GPU at import; a GB10 answers (no kernel runs here).
    real_is_available = torch.cuda.is_available
    harness.install_gb10(torch)

    for name in REQUEST.get("torch_preimport", []):
        importlib.import_module(name)
    sys.meta_path.append(harness.StandinFinder(REQUEST["standins"]))
    if REQUEST.get("engine") == "vllm":
        vllm_rank(harness, torch, real_is_available)
        return

    import sglang.srt.server_args as server_args  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    args = parser.parse_args(REQUEST["argv"])
    nnodes, node_rank = int(args.nnodes), int(args.node_rank)
    world = int(args.tensor_parallel_size) * int(args.pipeline_parallel_size or 1)
    rank = node_rank * (world // nnodes)
    status("parsed", dist_init_addr=args.dist_init_addr, world=world, rank=rank)

    from sglang.srt.distributed import parallel_state  # type: ignore[import-not-found]
    from sglang.srt.distributed.device_communicators import (  # type: ignore[import-not-found]
        shm_broadcast,
    )
    from sglang.srt.utils import common  # type: ignore[import-not-found]

    # Past the imports there is no GPU: the groups' tensors live on the CPU (gloo).
    torch.cuda.is_available = real_is_available
    common.is_cuda_alike.cache_clear()
    mq_cls = shm_broadcast.MessageQueue
    _observe(mq_cls, lambda h: str(h.connect_ip), lambda h: h.remote_subscribe_port)

    host, _, port = str(args.dist_init_addr).rpartition(":")
    status("connect", what="dist-init (TCPStore)", host=host, port=int(port))
    parallel_state.init_distributed_environment(
        world_size=world,
        rank=rank,
        distributed_init_method=f"tcp://{args.dist_init_addr}",
        local_rank=0,
        backend="gloo",
    )
    _exchange(torch, mq_cls, parallel_state.get_world_group().cpu_group, rank)


def _exchange(torch: Any, mq_cls: Any, group: Any, rank: int) -> None:
    """The broadcaster over the world group; rank 0 sends one object, the others receive it."""
    status("initialized")
    # The sizes SGLang's GroupCoordinator gives the TP group's broadcaster.
    queue = mq_cls.create_from_process_group(group, 1 << 22, 6)
    status("ready")
    if rank == 0:
        queue.broadcast_object({"from": 0, "nonce": REQUEST["nonce"]})
        status("sent")
    else:
        got = queue.broadcast_object(None)
        status("received", ok=got == {"from": 0, "nonce": REQUEST["nonce"]})
    # Rank 0 waits for every reader before the group is torn down.
    torch.distributed.barrier(group=group)
    status("done")


def _observe(mq_cls: Any, host_of: Any, port_of: Any) -> None:
    """Report every broadcaster a rank binds or connects to (the engine's own objects)."""
    from_handle = mq_cls.create_from_handle
    export = mq_cls.export_handle

    def observed_from_handle(handle: Any, group_rank: int) -> Any:
        status(
            "connect",
            what="message-queue broadcaster",
            host=host_of(handle),
            port=port_of(handle),
            local=group_rank in (handle.local_reader_ranks or []),
        )
        return from_handle(handle, group_rank)

    def observed_export(self: Any) -> Any:
        handle = export(self)
        status(
            "bind",
            what="message-queue broadcaster",
            host=host_of(handle),
            port=port_of(handle),
            remote_readers=self.n_remote_reader,
        )
        return handle

    mq_cls.create_from_handle = staticmethod(observed_from_handle)
    mq_cls.export_handle = observed_export


def _zmq_host(handle: Any) -> str | None:
    addr = handle.remote_subscribe_addr
    return None if addr is None else str(addr).rpartition(":")[0].removeprefix("tcp://").strip("[]")


def _zmq_port(handle: Any) -> int | None:
    addr = handle.remote_subscribe_addr
    return None if addr is None else int(str(addr).rpartition(":")[2])


def vllm_rank(harness: Any, torch: Any, real_is_available: Any) -> None:
    """vLLM's multi-node init, as a worker of the multiprocessing executor runs it."""
    engine = harness.VLLM()  # vLLM's kernels' op namespaces and NVML: inert, a GB10 answers
    args = engine.parser().parse_args(REQUEST["argv"])
    from vllm.config import ParallelConfig, VllmConfig, set_current_vllm_config  # type: ignore[import-not-found]

    parallel = ParallelConfig(
        tensor_parallel_size=int(args.tensor_parallel_size),
        pipeline_parallel_size=int(args.pipeline_parallel_size),
        data_parallel_size=int(args.data_parallel_size or 1),
        nnodes=int(args.nnodes),
        node_rank=int(args.node_rank),
        master_addr=args.master_addr,
        master_port=int(args.master_port),
        distributed_executor_backend="mp",
    )
    world = parallel.world_size
    local = world // parallel.nnodes
    rank = parallel.node_rank * local
    status(
        "parsed",
        master=f"{parallel.master_addr}:{parallel.master_port}",
        world=world,
        rank=rank,
        headless=bool(args.headless),
    )
    from vllm.distributed import parallel_state  # type: ignore[import-not-found]
    from vllm.distributed.device_communicators import shm_broadcast  # type: ignore[import-not-found]

    torch.cuda.is_available = real_is_available
    mq_cls = shm_broadcast.MessageQueue
    _observe(mq_cls, _zmq_host, _zmq_port)
    config = VllmConfig(parallel_config=parallel)
    status(
        "connect", what="dist-init (TCPStore)", host=parallel.master_addr, port=parallel.master_port
    )
    with set_current_vllm_config(config):
        # The executor hands its workers a loopback address; nnodes > 1 replaces it with
        # tcp://master_addr:master_port (vllm/distributed/parallel_state.py).
        parallel_state.init_distributed_environment(
            world_size=world,
            rank=rank,
            distributed_init_method="tcp://127.0.0.1:1",
            local_rank=0,
            backend="gloo",
        )
    _exchange(torch, mq_cls, parallel_state.get_world_group().cpu_group, rank)


if __name__ == "__main__":
    try:
        main()
    except BaseException as exc:
        if REQUEST.get("status"):
            status(
                "error", error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-2000:]
            )
        raise
