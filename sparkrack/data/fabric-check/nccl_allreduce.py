"""Pod-to-pod NCCL all-reduce across all Sparks (runs inside the fabric-check pods).

Stdlib + torch only (the serving image carries both). Every rank joins a torch.distributed NCCL
group over the fabric interface, all-reduces float32 buffers from SPARKRACK_MIN_BYTES (8 KiB, the
sizes tensor-parallel decode sends) to SPARKRACK_MAX_BYTES (1 GiB) and rank 0 prints the result in the nccl-tests table format, which sparkrack.fabric.nccl parses:
busbw = algbw * 2 * (n - 1) / n, the all-reduce bus bandwidth as nccl-tests defines it.
NCCL_DEBUG=INFO in the pod env makes NCCL log its transport choice to the same stream.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

WARMUP = 5
ITERS = 20


MIN_BYTES = 8 << 10
MAX_BYTES = 1 << 30


def sizes(max_bytes: int, min_bytes: int = MIN_BYTES) -> list[int]:
    out = []
    size = min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= 2
    return out


def bus_bandwidth(size: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of one all-reduce of ``size`` bytes taking ``seconds``."""
    algbw = size / seconds / 1e9
    return algbw, algbw * 2 * (ranks - 1) / ranks


def header() -> list[str]:
    return [
        "#                                                              out-of-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
    ]


def row(size: int, seconds: float, ranks: int, wrong: int) -> str:
    algbw, busbw = bus_bandwidth(size, seconds, ranks)
    return (
        f"{size:>12} {size // 4:>13} {'float':>9} {'sum':>7} {-1:>7}"
        f" {seconds * 1e6:>8.1f} {algbw:>7.2f} {busbw:>7.2f} {wrong:>6}"
    )


def footer(busbws: list[float]) -> list[str]:
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    return ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.4f} ", "#"]


def main() -> int:
    import torch  # type: ignore[import-not-found,unused-ignore]
    import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    addr = os.environ["MASTER_ADDR"]
    port = os.environ.get("MASTER_PORT", "29500")
    max_bytes = int(os.environ.get("SPARKRACK_MAX_BYTES", str(MAX_BYTES)))
    min_bytes = int(os.environ.get("SPARKRACK_MIN_BYTES", str(MIN_BYTES)))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
    busbws: list[float] = []
    if rank == 0:
        print("\n".join(header()), flush=True)
    for size in sizes(max_bytes, min_bytes):
        buf: Any = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        for _ in range(WARMUP):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(ITERS):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / ITERS
        buf.fill_(1.0)  # correctness: one more all-reduce of ones must give `world` everywhere
        dist.all_reduce(buf)
        torch.cuda.synchronize()
        wrong = int((buf != float(world)).sum().item())
        busbws.append(bus_bandwidth(size, seconds, world)[1])
        if rank == 0:
            print(row(size, seconds, world, wrong), flush=True)
    if rank == 0:
        print("\n".join(footer(busbws)), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
