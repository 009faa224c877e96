"""Netplan document for a Spark's QSFP fabric, built from the address plan (never recomputed).

The qsfp_network role renders ``netplan_config(...)`` as YAML. It addresses the PF port(s) as
planned (MTU from the plan, static IPv4) and every VF *in use* with its planned IPv4 and fixed
MAC: without the host-side IPv4 the VF's RoCE GID table holds only link-local entries and NCCL
fails with "Network is unreachable" (src:roce-post). The management interface is never part of the
document; an interface that is both planned and management is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sparkrack.errors import Problem, SparkrackError

RENDERERS = ("networkd", "NetworkManager")


def fabric_interfaces(plan: Mapping[str, Any], host: str) -> list[str]:
    """Every netdev of ``host`` the netplan document configures: PF port(s), then VFs in use."""
    node = _node(plan, host)
    return [p["name"] for p in node["ports"]] + [v["netdev"] for v in node["vfs"] if v["in_use"]]


def netplan_config(
    plan: Mapping[str, Any],
    host: str,
    management_interfaces: Iterable[str] = (),
    renderer: str = "networkd",
    source: str = "qsfp_network",
) -> dict[str, Any]:
    """The netplan ``network:`` document for ``host`` (plain data, rendered as YAML)."""
    node = _node(plan, host)
    problems: list[Problem] = []
    if renderer not in RENDERERS:
        problems.append(
            Problem(
                source,
                "qsfp_network_renderer",
                f"{renderer!r} is not a netplan renderer",
                f"use one of {', '.join(RENDERERS)}",
            )
        )
    mgmt = {m for m in management_interfaces if m}
    for name in fabric_interfaces(plan, host):
        if name in mgmt:
            problems.append(
                Problem(
                    source,
                    f"{host}: fabric.ports / fabric.vfs_in_use",
                    f"{name} carries the management address; the fabric config must never touch it",
                    "list the ConnectX-7 ports in fabric.ports, not the management NIC",
                )
            )
    if problems:
        raise SparkrackError(problems)
    mtu = int(plan["mtu"])
    ethernets: dict[str, Any] = {}
    for port in node["ports"]:
        ethernets[port["name"]] = _iface(port["cidr"], mtu)
    for vf in node["vfs"]:
        if vf["in_use"]:
            ethernets[vf["netdev"]] = {**_iface(vf["cidr"], mtu), "macaddress": vf["mac"]}
    return {"network": {"version": 2, "renderer": renderer, "ethernets": ethernets}}


def _iface(cidr: str, mtu: int) -> dict[str, Any]:
    # No DHCP, no gateway: the fabric is a flat L2 segment; the default route stays on management.
    return {"mtu": mtu, "addresses": [cidr], "dhcp4": False, "dhcp6": False, "accept-ra": False}


def _node(plan: Mapping[str, Any], host: str) -> Mapping[str, Any]:
    nodes = plan.get("nodes", {})
    if host not in nodes:
        raise SparkrackError(
            Problem("inventory", host, "is not a Spark in the address plan", "add it to 'sparks'")
        )
    node: Mapping[str, Any] = nodes[host]
    return node
