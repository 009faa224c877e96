"""One rank of the rehearsal: the engine's own cross-node connection code, on CPU torch (gloo).

Runs in the engine-check environment (``python -I``; ``sys.path`` = the release's pure-Python
package, its pinned dependencies, torch), inside the network namespace of the rank's Spark and a
mount namespace with a /dev/shm of its own. Reads one JSON request on stdin; appends one JSON
line per stage to the status file the request names, so that the caller can see where a rank
stands and which connection it waits on:

1. the engine's own parser reads the rendered argv (``--dist-init-addr``, ``--nnodes``...);
2. SGLang's ``init_distributed_environment`` joins the world group through the dist-init address
   (torch.distributed's TCPStore, then gloo) with backend gloo;
3. SGLang's ``MessageQueue.create_from_process_group`` builds the TP group's broadcaster: it
   decides "same node" through shared memory, rank 0 binds its remote socket where SGLang's
   own address choice says and the other ranks connect to it;
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
    from_handle = mq_cls.create_from_handle
    export = mq_cls.export_handle

    def observed_from_handle(handle: Any, group_rank: int) -> Any:
        status(
            "connect",
            what="message-queue broadcaster",
            host=str(handle.connect_ip),
            port=handle.remote_subscribe_port,
            local=group_rank in (handle.local_reader_ranks or []),
        )
        return from_handle(handle, group_rank)

    def observed_export(self: Any) -> Any:
        handle = export(self)
        status(
            "bind",
            what="message-queue broadcaster",
            host=str(handle.connect_ip),
            port=handle.remote_subscribe_port,
            remote_readers=self.n_remote_reader,
        )
        return handle

    mq_cls.create_from_handle = staticmethod(observed_from_handle)
    mq_cls.export_handle = observed_export

    host, _, port = str(args.dist_init_addr).rpartition(":")
    status("connect", what="dist-init (TCPStore)", host=host, port=int(port))
    parallel_state.init_distributed_environment(
        world_size=world,
        rank=rank,
        distributed_init_method=f"tcp://{args.dist_init_addr}",
        local_rank=0,
        backend="gloo",
    )
    group = parallel_state.get_world_group().cpu_group
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


if __name__ == "__main__":
    try:
        main()
    except BaseException as exc:
        if REQUEST.get("status"):
            status(
                "error", error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-2000:]
            )
        raise
