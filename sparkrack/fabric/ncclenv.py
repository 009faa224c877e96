"""The NCCL/Gloo environment of one rank: the only place it is built.

Serving pods (``sparkrack.serving``) and the fabric-check pods (``sparkrack.k8s``) both call
:func:`rank_env`, so the fabric gate measures exactly the environment serving runs with.

- ``NCCL_IB_HCA`` uses NCCL's exact-match form ``=dev1,dev2``: a bare name is a *prefix*, so
  ``rocep1s0f0v1`` would also select ``rocep1s0f0v10`` .. ``v15``.
- It lists VF ``vf_index`` of every rail (``fabric.rails``): each GB10 QSFP cage is two PCIe Gen5
  x4 functions of ~100 Gb/s, and NCCL reaches the cable's ~200 Gb/s only with both in
  ``NCCL_IB_HCA``; with more than one rail ``NCCL_IB_MERGE_NICS=1`` lets NCCL drive them as one
  fused NIC (public back-to-back measurements: 98 -> 161 Gb/s busbw with both HCAs merged).
- ``NCCL_NET=IB`` makes a pod that cannot open the verbs devices fail at init ("NET/IB : No
  device found", "Failed to initialize any NET plugin") instead of silently running over TCP
  sockets (src:roce-post); :mod:`sparkrack.fabric.nccl` names that failure.
- PyTorch's NCCL flight recorder is on (:func:`flight_recorder_env`): a trace buffer of the
  last collectives and a dump of it on a collective timeout, so a hang leaves a record of which
  collective each rank was in (``sparkrack diagnose`` reads it).
- ``NCCL_DEBUG=INFO`` alone logs the transport lines the gate reads (NCCL 2.28.9, captured in
  tests/data/nccl/captured/): no ``NCCL_DEBUG_SUBSYS`` needed.
"""

from __future__ import annotations

import re
from typing import Literal

from sparkrack.contract import POD_FABRIC_IFNAME
from sparkrack.errors import Problem, SparkrackError
from sparkrack.fabric.addressplan import FabricPlan, NodePlan

Transport = Literal["roce", "socket"]
"""The NCCL transport a profile, the fabric check or the gate asks for (the one definition)."""
TRANSPORTS: tuple[Transport, ...] = ("roce", "socket")


FR_BUFFER_ENTRIES = 2000
"""Collectives the flight recorder keeps per rank (a few MB of host memory)."""
FR_DUMP_PREFIX = "fr_dump_rank_"
"""PyTorch appends the rank: rank N writes ``<dir>/fr_dump_rank_N``."""
FR_RENAMED = (2, 11)
"""The first PyTorch release sparkrack has seen with the ``TORCH_FR_*`` spellings (2.11.0: its
libtorch reads ``TORCH_FR_BUFFER_SIZE`` and ``TORCH_FR_DUMP_TEMP_FILE`` and warns that
``TORCH_NCCL_TRACE_BUFFER_SIZE`` and ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` are deprecated;
captured in tests/data/nccl/captured/hangs). Earlier releases read the ``TORCH_NCCL_*`` names."""


def flight_recorder_env(torch: str | None, dump_dir: str) -> dict[str, str]:
    """The flight recorder of a rank whose image carries PyTorch ``torch`` (None: unknown):
    a trace buffer, a dump on a collective timeout into ``dump_dir``
    (:func:`sparkrack.contract.flight_recorder_dir`).

    From :data:`FR_RENAMED` on, the ``TORCH_FR_*`` names alone (the old ones only add deprecation
    warnings); before it, or for an unknown release, both spellings: a release reads the names it
    knows and ignores the others, so the recorder is on in every release either way.
    ``TORCH_NCCL_DUMP_ON_TIMEOUT`` kept its name."""
    prefix = f"{dump_dir.rstrip('/')}/{FR_DUMP_PREFIX}"
    new = {"TORCH_FR_BUFFER_SIZE": str(FR_BUFFER_ENTRIES), "TORCH_FR_DUMP_TEMP_FILE": prefix}
    old = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": str(FR_BUFFER_ENTRIES),
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
    }
    release = _release(torch)
    names = new if release is not None and release >= FR_RENAMED else {**old, **new}
    return {**names, "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}


def _release(version: str | None) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def hca_list(plan: FabricPlan, node: NodePlan, vf_index: int | None = None) -> str:
    """``NCCL_IB_HCA`` of a rank: ``=<VF vf_index of rail 0>,<... of rail 1>`` (exact match)."""
    index = plan.serving_vf_index if vf_index is None else vf_index
    return "=" + ",".join(vf.rdma_device for vf in node.rail_vfs(index))


def rank_env(
    plan: FabricPlan,
    node: NodePlan,
    *,
    transport: str,
    gid_index: int | None,
    vf_index: int | None = None,
) -> dict[str, str]:
    """NCCL/Gloo environment of the rank on ``node`` using VF ``vf_index`` of every rail.

    ``gid_index`` is the RoCE v2 IPv4 GID index discovered on ``node`` (roce role); the plan's
    ``fabric.gid_index`` overrides it. ``vf_index`` None = the plan's serving VF.
    """
    if transport not in TRANSPORTS:
        raise SparkrackError(
            Problem(
                "model profile",
                "transport",
                f"{transport!r} is not a fabric transport",
                f"use one of {', '.join(TRANSPORTS)}",
            )
        )
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": POD_FABRIC_IFNAME,
        "GLOO_SOCKET_IFNAME": POD_FABRIC_IFNAME,
    }
    if transport == "socket":
        env.update({"NCCL_NET": "Socket", "NCCL_IB_DISABLE": "1"})
        return env
    env.update({"NCCL_NET": "IB", "NCCL_IB_HCA": hca_list(plan, node, vf_index)})
    if len(plan.rails) > 1:
        env["NCCL_IB_MERGE_NICS"] = "1"
    index = plan.gid_index if plan.gid_index is not None else gid_index
    if index is not None:
        env["NCCL_IB_GID_INDEX"] = str(index)
    return env
