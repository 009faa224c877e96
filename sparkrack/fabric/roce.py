"""RoCE GID table checks: find the IPv4 RoCEv2 GID of a VF instead of hard-coding index 3.

The roce role dumps ``/sys/class/infiniband/<dev>/ports/<port>/gids/*`` with their
``gid_attrs/types`` and ``gid_attrs/ndevs`` as tab-separated lines
``<device> <index> <gid> <type> <ndev>``; :func:`roce_v2_ipv4_index` picks the entry NCCL needs
(``NCCL_IB_GID_INDEX``). Without a host-side IPv4 on the VF the table holds only ``fe80::``
entries and ``ibv_modify_qp`` fails with "Network is unreachable" (src:roce-post).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack.errors import Problem, SparkrackError
from sparkrack.fabric.gidtable import ROCE_V2, ZERO_GID, ipv4_gid

__all__ = ["ROCE_V2", "GidEntry", "ipv4_gid", "parse_gid_dump", "roce_v2_ipv4_index"]


@dataclass(frozen=True)
class GidEntry:
    device: str
    index: int
    gid: str
    type: str
    ndev: str


def parse_gid_dump(text: str) -> list[GidEntry]:
    entries = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 5 or not fields[1].isdigit():
            continue
        device, index, gid, gid_type, ndev = (f.strip() for f in fields)
        if gid.lower() == ZERO_GID:
            continue
        entries.append(GidEntry(device, int(index), gid.lower(), gid_type, ndev))
    return entries


def roce_v2_ipv4_index(text: str, device: str, address: str, netdev: str) -> int:
    """GID index of the RoCEv2 entry of ``address`` on ``device``, or a clear refusal."""
    entries = [e for e in parse_gid_dump(text) if e.device == device]
    wanted = ipv4_gid(address)
    for entry in sorted(entries, key=lambda e: e.index):
        if entry.gid == wanted and entry.type == ROCE_V2:
            return entry.index
    if not entries:
        message = f"RDMA device {device} (VF {netdev}) has no GID entries"
        fix = f"check `rdma link show` lists {device} for {netdev} and that the VF exists"
    else:
        present = ", ".join(
            f"{e.index}={e.gid} ({e.type or '?'}, {e.ndev or '?'})" for e in entries
        )
        message = f"no RoCE v2 GID for {address} on {device} (VF {netdev}); present: {present}"
        fix = (
            f"give {netdev} its planned IPv4 {address} on the host (qsfp_network netplan); "
            "with only fe80:: entries NCCL fails with 'Network is unreachable'"
        )
    raise SparkrackError(Problem("roce", f"{device}.gids", message, fix))
