#!/usr/bin/env python3
"""Capture real NCCL hang logs and flight-recorder dumps on a machine with two GPUs.

Runs on the device machine (not in CI, not in the lab): two ranks, one per GPU, NCCL through
PyTorch, ``NCCL_DEBUG=INFO``, a short process-group timeout and the flight recorder on, through a
set of scenarios (a healthy loop, a silent rank, a killed rank, a rank out of memory, mismatched sizes, a missing socket
interface, the socket transport). Every rank's whole output, the flight-recorder dumps and a note
of the versions land under ``OUT/<scenario>/`` and are packed into ``OUT/nccl-captures.tar.gz``;
``tests/data/nccl/captured/`` holds the unpacked result, which ``sparkrack diagnose`` is tested on.

    python3 lab/nccl_capture.py OUT            # the driver: every scenario, then the tarball
    python3 lab/nccl_capture.py --rank ...     # one rank (the driver starts these)

NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends) in every rank's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

TIMEOUT_S = 30
"""The process group's collective timeout (``init_process_group(timeout=...)``)."""
SCENARIO_BOUND_S = 140
"""Wall bound of one scenario; ranks still alive then are killed and the fact is recorded."""
GRACE_S = 75
"""How long the other ranks may live on once one rank has exited."""
ITERATIONS = 12
DIVERGE_AT = 5
"""The iteration at which the faulty rank misbehaves (0-based)."""

# One dict per scenario: extra environment, and what rank 1 does at DIVERGE_AT.
SCENARIOS: dict[str, dict[str, object]] = {
    "healthy": {"env": {}, "fault": "none"},
    "rank1_stops": {"env": {}, "fault": "stop"},
    "rank1_killed": {"env": {}, "fault": "kill"},
    "size_mismatch": {"env": {}, "fault": "mismatch"},
    "op_mismatch": {"env": {}, "fault": "op_mismatch"},
    "rank1_oom": {"env": {}, "fault": "oom"},
    "bad_socket_ifname": {"env": {"NCCL_SOCKET_IFNAME": "sparkrack-nosuch0"}, "fault": "none"},
    "socket_transport": {
        "env": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"},
        "fault": "none",
    },
    "socket_transport_rank1_stops": {
        "env": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"},
        "fault": "stop",
    },
}

NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def flight_recorder_env(dump_prefix: str) -> dict[str, str]:
    """Both spellings: releases before the rename read TORCH_NCCL_*, later ones TORCH_FR_*."""
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": dump_prefix,
        "TORCH_FR_DUMP_TEMP_FILE": dump_prefix,
    }


def rank_main(rank: int, world: int, port: int, fault: str) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    print(f"[capture] rank {rank} pid {os.getpid()} fault={fault}", flush=True)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=TIMEOUT_S),
        device_id=device,
    )
    for step in range(ITERATIONS):
        numel = 1 << 20
        if rank == 1 and step == DIVERGE_AT:
            if fault == "stop":
                print(
                    f"[capture] rank {rank} stops calling the collective at step {step}", flush=True
                )
                time.sleep(SCENARIO_BOUND_S * 2)
            elif fault == "oom":
                total = torch.cuda.get_device_properties(device).total_memory
                print(
                    f"[capture] rank {rank} allocates twice its GPU's memory at step {step}",
                    flush=True,
                )
                torch.empty(2 * total, dtype=torch.uint8, device=device)
            elif fault == "kill":
                print(f"[capture] rank {rank} SIGKILLs itself at step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        if fault == "mismatch" and step >= DIVERGE_AT:
            numel = (1 << 20) * (64 if rank == 1 else 1)
        t = torch.ones(numel, device=device) * (rank + 1)
        if fault == "op_mismatch" and step >= DIVERGE_AT and rank == 1:
            gathered = torch.empty(numel * world, device=device)
            dist.all_gather_into_tensor(gathered, t)
        else:
            dist.all_reduce(t)
        torch.cuda.synchronize(device)
        print(f"[capture] rank {rank} step {step} numel {numel} sum[0]={t[0].item()}", flush=True)
    dist.barrier()
    print(f"[capture] rank {rank} finished {ITERATIONS} steps", flush=True)
    dist.destroy_process_group()
    return 0


def versions() -> dict[str, object]:
    import torch

    info: dict[str, object] = {"torch": torch.__version__}
    try:
        info["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        info["nccl"] = f"unknown ({exc})"
    info["cuda_runtime"] = torch.version.cuda
    info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    info["nvidia_smi"] = smi.stdout.strip().splitlines()
    info["kernel"] = os.uname().release
    # Which flight-recorder variable names this PyTorch's own library reads (strings in libtorch).
    lib = Path(torch.__file__).parent / "lib"
    names: set[str] = set()
    for so in lib.glob("libtorch_cuda*.so"):
        data = so.read_bytes()
        for prefix in (b"TORCH_FR_", b"TORCH_NCCL_"):
            start = 0
            while (i := data.find(prefix, start)) != -1:
                end = i
                while end < len(data) and (chr(data[end]).isalnum() or data[end] == ord("_")):
                    end += 1
                names.add(data[i:end].decode())
                start = end
    info["libtorch_env_names"] = sorted(names)
    return info


def pickle_to_json(path: Path) -> None:
    """Our own dump, made here: converted next to itself so the tests compare both readers."""
    import pickle

    try:
        data = pickle.loads(path.read_bytes())  # noqa: S301 - written by this run's own ranks
    except Exception as exc:  # noqa: BLE001
        path.with_suffix(".convert-error.txt").write_text(f"{exc!r}\n")
        return

    def plain(obj: object) -> object:
        if isinstance(obj, dict):
            return {str(k): plain(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [plain(v) for v in obj]
        if isinstance(obj, (str, int, float, bool)) or obj is None:
            return obj
        return repr(obj)

    path.with_name(path.name + ".json").write_text(json.dumps(plain(data), indent=1) + "\n")


def run_scenario(name: str, spec: dict[str, object], out: Path, port: int) -> dict[str, object]:
    sdir = out / name
    sdir.mkdir(parents=True, exist_ok=True)
    dump_prefix = str(sdir / "fr_dump_rank_")
    procs: list[tuple[subprocess.Popen[bytes], object]] = []
    start = time.monotonic()
    for rank in range(2):
        env = {**os.environ, **NO_MULTICAST, **flight_recorder_env(dump_prefix)}
        env.update({"NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1", "TORCH_CPP_LOG_LEVEL": "INFO"})
        env.update({k: str(v) for k, v in dict(spec["env"]).items()})  # type: ignore[call-overload]
        log = (sdir / f"rank{rank}.log").open("wb")
        cmd = [sys.executable, __file__, "--rank", str(rank), "--world", "2", "--port", str(port)]
        cmd += ["--fault", str(spec["fault"])]
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    result: dict[str, object] = {"scenario": name, "env": spec["env"], "fault": spec["fault"]}
    codes: dict[str, object] = {}
    killed: list[int] = []
    deadline = start + SCENARIO_BOUND_S
    while len(codes) < len(procs) and time.monotonic() < deadline:
        for rank, (proc, _) in enumerate(procs):
            if f"rank{rank}" not in codes and proc.poll() is not None:
                codes[f"rank{rank}"] = proc.returncode
                # The others get GRACE_S after the first exit, then count as silent.
                deadline = min(deadline, time.monotonic() + GRACE_S)
        time.sleep(0.5)
    for rank, (proc, _) in enumerate(procs):
        if f"rank{rank}" not in codes:
            proc.kill()
            codes[f"rank{rank}"] = proc.wait()
            killed.append(rank)
    # A rank that outlived the other by the bound is a silent one: the harness ended it.
    for _, log in procs:
        log.close()  # type: ignore[attr-defined]
    result["exit_codes"] = codes
    result["killed_by_harness"] = killed
    result["seconds"] = round(time.monotonic() - start, 1)
    for dump in sdir.glob("fr_dump_rank_*"):
        if not dump.name.endswith((".json", ".txt")):
            pickle_to_json(dump)
    (sdir / "scenario.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"[capture] {name}: {result}", flush=True)
    return result


def driver(out: Path, only: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    info = versions()
    print(f"[capture] versions: {json.dumps(info)}", flush=True)
    results = []
    for i, (name, spec) in enumerate(SCENARIOS.items()):
        if only and name not in only:
            continue
        results.append(run_scenario(name, spec, out, 29500 + i))
    info["capture_seconds"] = round(time.monotonic() - begin, 1)
    info["scenarios"] = results
    (out / "versions.json").write_text(json.dumps(info, indent=2) + "\n")
    with tarfile.open(out / "nccl-captures.tar.gz", "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path.name != "nccl-captures.tar.gz":
                tar.add(path, arcname=str(path.relative_to(out)))
    print(f"[capture] all done in {info['capture_seconds']} s", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--rank", type=int)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--port", type=int, default=29500)
    parser.add_argument("--fault", default="none")
    args = parser.parse_args()
    if args.rank is not None:
        return rank_main(args.rank, args.world, args.port, args.fault)
    if args.out is None:
        parser.error("OUT is required")
    return driver(args.out, args.only)


if __name__ == "__main__":
    sys.exit(main())
