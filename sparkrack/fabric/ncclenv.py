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
from collections.abc import Sequence
from typing import Literal

from sparkrack import contract
from sparkrack.contract import POD_FABRIC_IFNAME
from sparkrack.errors import Problem, SparkrackError
from sparkrack.fabric import gidtable
from sparkrack.fabric.addressplan import FabricPlan, NodePlan, VfPlan

Transport = Literal["roce", "socket"]
"""The NCCL transport a profile, the fabric check or the gate asks for (the one definition)."""
TRANSPORTS: tuple[Transport, ...] = ("roce", "socket")


FR_BUFFER_ENTRIES = 2000
"""Collectives the flight recorder keeps per rank (a few MB of host memory)."""
FR_RENAMED = (2, 11)
"""The first PyTorch release whose every flight-recorder reader takes the ``TORCH_FR_*`` names.

- 2.11.0 (captured in tests/data/nccl/captured/hangs): the recorder reads
  ``TORCH_FR_BUFFER_SIZE`` and the dump writer ``TORCH_FR_DUMP_TEMP_FILE``; both warn that
  ``TORCH_NCCL_TRACE_BUFFER_SIZE`` and ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` are deprecated.
- 2.9.1 (its wheel's headers and libraries): the recorder (``c10d/FlightRecorder.hpp``) reads
  ``TORCH_FR_BUFFER_SIZE`` first and the old name as a fallback, but ``ProcessGroupNCCL.hpp``
  reads its own copy of the buffer size from ``TORCH_NCCL_TRACE_BUFFER_SIZE`` alone; the dump
  writer knows both ``TORCH_FR_DUMP_TEMP_FILE`` and ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``.

The names each release reads are test data: tests/data/nccl/torch_flight_recorder_names.json."""


def flight_recorder_env(torch: str | None, dump_dir: str) -> dict[str, str]:
    """The flight recorder of a rank whose image carries PyTorch ``torch`` (None: unknown):
    a trace buffer, a dump on a collective timeout into ``dump_dir``
    (:func:`sparkrack.contract.flight_recorder_dir`).

    From :data:`FR_RENAMED` on, the ``TORCH_FR_*`` names alone (the old ones only add deprecation
    warnings); before it (2.9: a reader of the old name alone remains), or for an unknown
    release, both spellings with one value: each reader takes the name it knows.
    ``TORCH_NCCL_DUMP_ON_TIMEOUT`` kept its name."""
    prefix = f"{dump_dir.rstrip('/')}/{contract.FLIGHT_RECORDER_DUMP_PREFIX}"
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


def rank_vfs(
    plan: FabricPlan,
    node: NodePlan,
    vf_index: int | None = None,
    rails: Sequence[int] | None = None,
) -> tuple[VfPlan, ...]:
    """The VFs one rank is given: VF ``vf_index`` (None = the serving VF) of every rail, or of
    the rails numbered in ``rails`` only (the fabric gate's one-rail sweeps)."""
    index = plan.serving_vf_index if vf_index is None else vf_index
    vfs = node.rail_vfs(index)
    if rails is None:
        return vfs
    unknown = [r for r in rails if not 0 <= r < len(plan.rails)]
    if unknown or not rails:
        raise SparkrackError(
            Problem(
                "fabric",
                "rails",
                f"rail(s) {unknown or 'none'} asked for, the plan has {len(plan.rails)}",
                f"name rails 0..{len(plan.rails) - 1} of fabric.rails",
            )
        )
    return tuple(vf for vf in vfs if vf.rail in rails)


def hca_list(
    plan: FabricPlan,
    node: NodePlan,
    vf_index: int | None = None,
    rails: Sequence[int] | None = None,
) -> str:
    """``NCCL_IB_HCA`` of a rank: ``=<VF vf_index of rail 0>,<... of rail 1>`` (exact match)."""
    return "=" + ",".join(vf.rdma_device for vf in rank_vfs(plan, node, vf_index, rails))


def rank_env(
    plan: FabricPlan,
    node: NodePlan,
    *,
    transport: str,
    gid_override: int | None = None,
    vf_index: int | None = None,
    rails: Sequence[int] | None = None,
) -> dict[str, str]:
    """NCCL/Gloo environment of the rank on ``node`` using VF ``vf_index`` of every rail (or of
    the rails numbered in ``rails``: the fabric gate's sweep of one rail).

    ``NCCL_IB_GID_INDEX`` is not in it: the index moves when the VFs are re-created, so the rank
    reads it from sysfs at start (:func:`gid_env`); ``gid_override`` (an inventory's per-node
    value) or else the plan's ``fabric.gid_index`` is handed to it as an override.
    ``vf_index`` None = the plan's serving VF. With one rail of several in ``rails``, RoCE
    traffic goes over that rail's device alone; a socket sweep binds NCCL to that rail's pod
    interface (Gloo and the rendezvous stay on the first rail's, where MASTER_ADDR lives).
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
    vfs = rank_vfs(plan, node, vf_index, rails)
    if transport == "socket":
        env.update({"NCCL_NET": "Socket", "NCCL_IB_DISABLE": "1"})
        if rails is not None and len(vfs) == 1:
            env["NCCL_SOCKET_IFNAME"] = contract.pod_ifname(vfs[0].rail)
        return env
    env.update({"NCCL_NET": "IB", "NCCL_IB_HCA": hca_list(plan, node, vf_index, rails)})
    if len(vfs) > 1:
        env["NCCL_IB_MERGE_NICS"] = "1"
    env.update(gid_env(plan, node, vf_index, gid_override, rails))
    return env


def gid_env(
    plan: FabricPlan,
    node: NodePlan,
    vf_index: int | None = None,
    override: int | None = None,
    rails: Sequence[int] | None = None,
) -> dict[str, str]:
    """What the rank's GID resolver (:mod:`sparkrack.fabric.gidtable`, run in the rank's container
    before the engine) reads to set ``NCCL_IB_GID_INDEX``: the RDMA device and planned IPv4 of
    every rail's VF, and the override (a node's own, else the plan's ``fabric.gid_index``)."""
    vfs = rank_vfs(plan, node, vf_index, rails)
    targets = ",".join(f"{vf.rdma_device}={vf.address}" for vf in vfs)
    env = {gidtable.TARGETS_ENV: targets}
    chosen = override if override is not None else plan.gid_index
    if chosen is not None:
        env[gidtable.OVERRIDE_ENV] = str(chosen)
    return env
