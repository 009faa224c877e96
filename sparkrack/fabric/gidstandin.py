"""A GID table laid out as the kernel lays it out, for a lab container that has no RDMA device.

The roce role writes it on each lab Spark and runs the one reader of the table
(:mod:`sparkrack.fabric.gidtable`) against it, so the lab runs the same resolver as a Spark does.
A ConnectX VF with an IPv4 address holds the link-local entries at 0 (RoCE v1) and 1 (RoCE v2) and
the IPv4-mapped entries after them; :func:`files` puts the RoCE v2 IPv4 entry at ``v2_index`` and
its RoCE v1 twin just below it. An empty slot reads as the zero GID and has no type or netdev file
(reading them fails on the kernel's tree).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparkrack.errors import Problem, SparkrackError
from sparkrack.fabric.gidtable import PORT, ROCE_V1, ROCE_V2, ZERO_GID, ipv4_gid

TABLE_SIZE = 8
LINK_LOCAL = "fe80:0000:0000:0000:0253:50ff:fe00:0000"


def check_index(v2_index: int) -> None:
    if not 3 <= v2_index < TABLE_SIZE:
        raise SparkrackError(
            Problem(
                "roce",
                "roce_simulated_gid_index",
                f"the stand-in's RoCE v2 IPv4 entry sits at 3 to {TABLE_SIZE - 1}, not {v2_index}",
                "set roce_simulated_gid_index to 3 (ConnectX-7's usual index) or up to 7",
            )
        )


def slots(address: str, v2_index: int) -> dict[int, tuple[str, str]]:
    """index -> (gid, type) of one VF's table."""
    check_index(v2_index)
    mapped = ipv4_gid(address)
    return {
        0: (LINK_LOCAL, ROCE_V1),
        1: (LINK_LOCAL, ROCE_V2),
        v2_index - 1: (mapped, ROCE_V1),
        v2_index: (mapped, ROCE_V2),
    }


def files(
    root: str, targets: Sequence[tuple[str, str, str]], v2_index: int
) -> tuple[list[str], list[dict[str, Any]]]:
    """(folders, files) of the tree under ``root`` for ``(rdma device, IPv4, netdev)`` targets,
    in the shape the ``sparkrack_files`` module takes."""
    check_index(v2_index)
    folders: list[str] = []
    out: list[dict[str, Any]] = []
    for device, address, netdev in targets:
        base = f"{root}/{device}/ports/{PORT}"
        folders += [f"{base}/gids", f"{base}/gid_attrs/types", f"{base}/gid_attrs/ndevs"]
        table = slots(address, v2_index)
        for i in range(TABLE_SIZE):
            gid, gid_type = table.get(i, (ZERO_GID, ""))
            out.append({"dest": f"{base}/gids/{i}", "content": gid + "\n", "mode": "0444"})
            if gid_type:
                for sub, text in (("types", gid_type), ("ndevs", netdev)):
                    out.append(
                        {
                            "dest": f"{base}/gid_attrs/{sub}/{i}",
                            "content": text + "\n",
                            "mode": "0444",
                        }
                    )
    return folders, out
