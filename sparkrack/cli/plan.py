"""``sparkrack plan [PROFILE ...]``: capacity + decode roofline of serving profiles."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.options import add_format, add_inventory, print_warnings
from sparkrack.planner.memory import (
    DEFAULT_OS_HEADROOM_GB,
    DEFAULT_RUNTIME_OVERHEAD_GB,
    CapacityPlan,
    Hardware,
)
from sparkrack.planner.switch import SwitchPrediction
from sparkrack.planner.switch import table as switch_table
from sparkrack.serving.profile.capacity import SameModel, plan_profile, same_model, unmatched

COLUMNS = (
    ("profile", 7),
    ("engine", 6),
    ("tp/pp/ep", 8),
    ("weights/GPU", 11),
    ("KV pool", 8),
    ("KV tokens", 10),
    ("Mamba slots", 11),
    ("max run", 7),
    ("used/GPU", 8),
    ("fits", 4),
    ("tok/s bound", 11),
)


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "profiles", nargs="*", metavar="PROFILE", help="path, file stem or HF id (default: all)"
    )
    p.add_argument("--nodes", type=int, default=None, help="Sparks available (checks tp x pp)")
    add_inventory(
        p,
        default=None,
        help="the per-Spark memory of every deployment of this inventory (exit 1 on over-commit)",
    )
    p.add_argument(
        "--os-headroom-gb",
        type=float,
        default=DEFAULT_OS_HEADROOM_GB,
        help="unified memory kept for OS/K3s per Spark",
    )
    p.add_argument(
        "--overhead-gb",
        type=float,
        default=DEFAULT_RUNTIME_OVERHEAD_GB,
        help="CUDA/NCCL/workspace per GPU before the KV pool is sized",
    )
    add_format(p, "table", "json")
    p.set_defaults(handler=run)


def _profiles(refs: list[str]) -> list[Any]:
    from sparkrack.serving import PROFILE_DIR, load_profile

    if not refs:
        refs = sorted(str(p) for p in PROFILE_DIR.glob("*.yml"))
    return [load_profile(ref) for ref in refs]


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def row(plan: CapacityPlan) -> list[str]:
    bound = plan.roofline_tokens_per_s()
    return [
        plan.name,
        plan.engine,
        f"{plan.tp}/{plan.pp}/{plan.ep}",
        _gb(plan.weights_per_gpu_gb),
        _gb(plan.kv_pool_gb),
        "-" if plan.kv_tokens is None else f"{plan.kv_tokens:,}",
        "-" if plan.mamba_slots is None else str(plan.mamba_slots),
        "-" if plan.max_running_requests is None else str(plan.max_running_requests),
        f"{plan.used_per_gpu_gb:.1f}",
        "yes" if plan.fits else "NO",
        f"{bound:.0f}",
    ]


def to_dict(
    plan: CapacityPlan, compared: list[SameModel] | None = None, alone: str | None = None
) -> dict[str, Any]:
    return {
        "profile": plan.name,
        "engine": plan.engine,
        "tp": plan.tp,
        "pp": plan.pp,
        "ep": plan.ep,
        "weights_total_gb": round(plan.weights_total_gb, 2),
        "weights_per_gpu_gb": round(plan.weights_per_gpu_gb, 2),
        "kv_pool_gb": round(plan.kv_pool_gb or 0.0, 2),
        "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token,
        "kv_tokens": plan.kv_tokens,
        "context_length": plan.context_length,
        "mamba_slots": plan.mamba_slots,
        "mamba_slots_per_request": plan.mamba_slots_per_request,
        "max_running_requests": plan.max_running_requests,
        "used_per_gpu_gb": round(plan.used_per_gpu_gb, 2),
        "usable_per_gpu_gb": plan.hardware.usable_gb,
        "fits": plan.fits,
        "bandwidth_gbps": plan.bandwidth_gbps,
        "bytes_per_token_gb": round(plan.bytes_per_token_gb(), 3),
        "roofline_tokens_per_s": round(plan.roofline_tokens_per_s(), 1),
        "problems": [str(p) for p in plan.problems],
        "notes": list(plan.notes),
        "assumptions": plan.assumptions(),
        "same_model": [c.to_dict() for c in compared or []],
        "same_model_note": alone,
    }


def run(args: argparse.Namespace) -> int:
    hw = Hardware(os_headroom_gb=args.os_headroom_gb, runtime_overhead_gb=args.overhead_gb)
    if args.inventory:
        return run_inventory(args.inventory, hw, args.format)
    profiles = _profiles(args.profiles)
    plans = [plan_profile(p, nodes=args.nodes, hardware=hw) for p in profiles]
    shipped = profiles if not args.profiles else _profiles([])
    compared = [
        same_model(p, shipped, hw, mine=plan) for p, plan in zip(profiles, plans, strict=True)
    ]
    alone = [unmatched(p, shipped) for p in profiles]
    if args.format == "json":
        out = [to_dict(*t) for t in zip(plans, compared, alone, strict=True)]
        print(json.dumps(out, indent=2))
        return ExitCode.OK if all(p.fits for p in plans) else ExitCode.FAILED
    rows = [row(p) for p in plans]
    widths = [max([w, *(len(r[i]) for r in rows)]) for i, (_t, w) in enumerate(COLUMNS)]
    print(" ".join(f"{t:<{w}}" for (t, _w), w in zip(COLUMNS, widths, strict=True)).rstrip())
    for cells in rows:
        print(" ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)).rstrip())
    print("\n(GB = 10^9 bytes, per GPU; tok/s bound = single-stream decode step at empty context)")
    for p, same, note in zip(plans, compared, alone, strict=True):
        extra = [*p.notes, *(str(problem) for problem in p.problems), *(c.line() for c in same)]
        extra += [note] if note else []
        for line in extra:
            print(f"{p.name}: {line}")
    print("\nassumptions:")
    for line in plans[0].assumptions() if plans else []:
        print(f"  - {line}")
    return ExitCode.OK if all(p.fits for p in plans) else ExitCode.FAILED


def switch_lines(name: str, prediction: SwitchPrediction) -> list[str]:
    lines = [
        f"{name}: down {prediction.outage_s:.0f} s (old engine stopped -> new one ready), "
        f"{prediction.total_s:.0f} s from the switch's start to ready",
        f"switch to {name}: {prediction.model_bytes / 1e9:.1f} GB to {1 + prediction.peers} "
        f"Spark(s)"
        + (
            f", {prediction.rails} rail(s) per peer, as a {prediction.shape}"
            if prediction.peers
            else ""
        ),
        *(f"  {line}" for line in switch_table(prediction)),
    ]
    return lines


def run_inventory(inventory: str, hw: Hardware, fmt: str) -> int:
    """Per Spark: what each deployment of the inventory plans, total vs usable; then per
    deployment how long a switch to it takes, phase by phase (the switch estimate)."""
    from sparkrack.serving.deployments.bundle import from_inventory
    from sparkrack.serving.deployments.load import format_table, memory_table
    from sparkrack.serving.switch.plan import estimate

    deployments = from_inventory(inventory, check_memory=False)
    print_warnings(deployments.warnings)
    rows, over = memory_table(deployments.deployments, hw)
    switches = [(d.name, estimate(d.res)) for d in deployments.deployments]
    if fmt == "json":
        print(
            json.dumps(
                {
                    "memory": [
                        {
                            "spark": r.spark,
                            "deployments": {name: round(gb, 2) for name, gb in r.parts},
                            "total_gb": round(r.total_gb, 2),
                            "usable_gb": r.usable_gb,
                            "over": r.over,
                        }
                        for r in rows
                    ],
                    "switch": {
                        name: {
                            "model_bytes": p.model_bytes,
                            "peers": p.peers,
                            "rails": p.rails,
                            "shape": p.shape,
                            "phases": {e.name: e.seconds for e in p.phases},
                            "ready_s": round(p.total_s, 1),
                            "outage_s": round(p.outage_s, 1),
                            "assumptions": list(p.assumptions),
                        }
                        for name, p in switches
                    },
                },
                indent=2,
            )
        )
    else:
        print(format_table(rows))
        if over:
            print(f"\nover-committed: {', '.join(over)}")
        for name, p in switches:
            print()
            print("\n".join(switch_lines(name, p)))
        if switches:
            print("\nswitch estimate assumptions (rates: the inventory's serving_rail_mbit_s,")
            print("serving_download_mbit_s, serving_disk_mbyte_s):")
            for line in switches[0][1].assumptions:
                print(f"  - {line}")
    return ExitCode.FAILED if over else ExitCode.OK
