#!/usr/bin/env python3
"""Capture the real error of a Gloo ``monitored_barrier`` that a rank reaches too late, on CPU.

SGLang's loading barrier (``sglang/srt/model_executor/model_runner.py``) is
``torch.distributed.monitored_barrier(group=<the TP group's Gloo CPU group>, timeout=...,
wait_all_ranks=True)``. This script runs the same call with two processes, Gloo over 127.0.0.1:
rank 0 enters the barrier at once, rank 1 sleeps past the barrier's timeout first. Each rank's
whole output (stdout and stderr, nothing added or rewritten) lands in ``OUT/rank<N>.log``, the
exit codes and the torch version in ``OUT/scenario.json``. Nothing of SGLang runs: rank 0 lets
PyTorch's own exception end it, the ValueError SGLang raises in its place is not written.

    python3 lab/gloo_barrier_capture.py OUT                 # the driver: both ranks
    python3 lab/gloo_barrier_capture.py --rank N --port P   # one rank (the driver starts these)

Any Python with torch on its path runs it; sparkrack's captures used the engine check's base
environment read-only: ``.venv/bin/python -I lab/gloo_barrier_capture.py --torch-path
.cache/enginecheck/base OUT``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

BARRIER_TIMEOUT_S = 5
"""The barrier's timeout (SGLang's is 480 s)."""
LATE_S = 12
"""How long rank 1 sleeps before it reaches the barrier."""
BOUND_S = 60
"""Wall bound of the whole run; a rank still alive then is killed and the fact recorded."""


def rank_main(rank: int, port: int) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        world_size=2,
        rank=rank,
        timeout=datetime.timedelta(seconds=30),
    )
    print(f"rank {rank}: torch {torch.__version__}, gloo group up", flush=True)
    if rank == 1:
        time.sleep(LATE_S)
    print(f"rank {rank}: entering monitored_barrier", flush=True)
    dist.monitored_barrier(
        timeout=datetime.timedelta(seconds=BARRIER_TIMEOUT_S), wait_all_ranks=True
    )
    print(f"rank {rank}: passed monitored_barrier", flush=True)
    dist.destroy_process_group()
    return 0


def driver(out: Path, torch_path: str | None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prefix = [sys.executable, "-I", __file__]
    if torch_path:
        prefix += ["--torch-path", torch_path]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["GLOO_SOCKET_IFNAME"] = "lo"
    started = time.monotonic()
    procs = []
    for rank in (0, 1):
        log = (out / f"rank{rank}.log").open("wb")
        procs.append(
            (
                subprocess.Popen(
                    [*prefix, "--rank", str(rank), "--port", str(port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                ),
                log,
            )
        )
    killed = []
    codes = []
    for rank, (proc, log) in enumerate(procs):
        left = max(1.0, BOUND_S - (time.monotonic() - started))
        try:
            codes.append(proc.wait(timeout=left))
        except subprocess.TimeoutExpired:
            proc.kill()
            killed.append(rank)
            codes.append(proc.wait())
        log.close()
    facts = {
        "what": "gloo monitored_barrier(wait_all_ranks=True), rank 1 late",
        "barrier_timeout_s": BARRIER_TIMEOUT_S,
        "rank1_late_s": LATE_S,
        "exit_codes": codes,
        "killed_by_harness": killed,
        "seconds": round(time.monotonic() - started, 1),
        "python": sys.version.split()[0],
        "torch": subprocess.run(
            [*prefix, "--version-only"], capture_output=True, text=True, env=env, check=False
        ).stdout.strip(),
    }
    (out / "scenario.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(json.dumps(facts))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--torch-path", help="a folder to put first on sys.path (holds torch)")
    parser.add_argument("--version-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_path:
        sys.path.insert(0, args.torch_path)
    if args.version_only:
        import torch

        print(torch.__version__)
        return 0
    if args.rank is not None:
        return rank_main(args.rank, args.port)
    if args.out is None:
        parser.error("give OUT (the driver) or --rank and --port")
    return driver(args.out, args.torch_path)


if __name__ == "__main__":
    sys.exit(main())
