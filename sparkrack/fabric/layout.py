"""Computing the fabric address plan: the inventory's ``fabric`` block and Sparks, checked, then
laid out (:mod:`sparkrack.fabric.addressplan` describes the layout and holds the records).

:func:`compute_plan` reads the block key by key, then the Sparks, then whether the layout fits
the subnet; every problem of all three is reported at once, and only a sound input is laid out.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkrack.errors import Problem, SparkrackError, shown
from sparkrack.fabric.addressplan import (
    FabricPlan,
    NodeInput,
    NodePlan,
    PortPlan,
    VfPlan,
    in_fabric,
    port_base,
    rail_subnets,
    rdma_name,
)
from sparkrack.k3s.network import CLUSTER_CIDR, SERVICE_CIDR

FABRIC_KEYS: dict[str, str] = {
    "subnet": "IPv4 network of the QSFP fabric, e.g. 10.77.0.0/24",
    "mtu": "MTU of the fabric ports and VFs (9000 on the ConnectX-7 fabric)",
    "ports": "list of ConnectX-7 PF netdevs addressed on every Spark",
    "rails": "PFs (from ports) whose VFs serve NCCL; default: the first port only",
    "vf_count": "number of SR-IOV VFs created on every rail",
    "vfs_in_use": "VF indices handed to serving pods (each gets a NAD and a host IPv4)",
    "block": "addresses per block of the plan; every spark_index must be below it",
    "mac_prefix": "first three octets of VF MACs; must be locally administered unicast",
    "gid_index": "RoCE GID index override; null = each rank reads its own from sysfs at start",
}

DEFAULTS: dict[str, Any] = {
    "mtu": 9000,
    "ports": ["enp1s0f0np0"],
    "rails": None,
    "vf_count": 4,
    "vfs_in_use": [0],
    "block": 16,
    "mac_prefix": "02:53:50",
    "gid_index": None,
}

MIN_FABRIC_MTU = 9000
"""Smallest fabric MTU the plan accepts: RoCE on the ConnectX-7 fabric is planned for jumbo frames."""

RULE = "fabric"
PORT_NAME = re.compile(r"en[A-Za-z0-9]+?(np\d+)?")
IFNAMSIZ = 15
"""Longest Linux interface name (``IFNAMSIZ`` 16 with its NUL): a VF's name is the PF's base and
``v<index>``, so the VF names of every index must fit too."""
MAX_VFS = 127
"""VFs per PF: the ConnectX-7 firmware release notes ("VF Network Function Limitations in SR-IOV
Legacy Mode") give 127 VFs per PF; the VF's MAC octet holds it too."""
MAX_PORTS = 4
"""A DGX Spark has two QSFP cages of its ConnectX-7, each two PCIe functions: four PFs."""
MAX_BLOCK = 256
"""A block holds every Spark's host offset; the MAC carries the spark_index in one octet."""


def reserved_ranges() -> list[tuple[ipaddress.IPv4Network, str]]:
    """Networks a fabric subnet must stay clear of, and why: the cluster's own pod and Service
    networks (from the K3s config sparkrack renders) and the address blocks IPv4 reserves."""
    return [
        (ipaddress.IPv4Network(CLUSTER_CIDR), "K3s' pod network (cluster-cidr)"),
        (ipaddress.IPv4Network(SERVICE_CIDR), "K3s' Service network (service-cidr)"),
        (ipaddress.IPv4Network("0.0.0.0/8"), "'this network' (0.0.0.0/8)"),
        (ipaddress.IPv4Network("127.0.0.0/8"), "loopback (127.0.0.0/8)"),
        (ipaddress.IPv4Network("169.254.0.0/16"), "link-local (169.254.0.0/16)"),
        (ipaddress.IPv4Network("224.0.0.0/4"), "multicast (224.0.0.0/4)"),
        (ipaddress.IPv4Network("240.0.0.0/4"), "reserved (240.0.0.0/4, broadcast included)"),
    ]


@dataclass(frozen=True)
class Spec:
    """The ``fabric`` block as read: every value usable once no problem was found."""

    subnet: ipaddress.IPv4Network | None
    mtu: int
    block: int
    vf_count: int
    ports: list[str]
    in_use: list[int]
    mac_prefix: str
    gid_index: int | None
    rails: list[str]


class Reader:
    """Reads one inventory's fabric block and Sparks, collecting every problem."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[Problem] = []

    def fabric(self, key: str, message: str, fix: str) -> None:
        self.problems.append(
            Problem(self.source, f"fabric.{key}" if key else "fabric", message, fix, RULE)
        )

    def node(self, key: str, message: str, fix: str) -> None:
        self.problems.append(Problem(self.source, key, message, fix, RULE))

    def integer(self, value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fabric(key, f"must be a whole number, got {shown(value)}", "write a number")
            return 0
        return value

    # --- the fabric block, key by key ------------------------------------------------------

    def spec(self, fabric: Mapping[str, Any]) -> Spec:
        for key in sorted(set(fabric) - set(FABRIC_KEYS)):
            self.fabric(key, "unknown key", f"remove it; known keys: {', '.join(FABRIC_KEYS)}")
        spec = {**DEFAULTS, **{k: v for k, v in fabric.items() if k in FABRIC_KEYS}}
        subnet = self.subnet(spec.get("subnet"))
        mtu = self.mtu(spec["mtu"])
        block = self.integer(spec["block"], "block")
        if block and not 2 <= block <= MAX_BLOCK:
            self.fabric("block", f"{block} is outside 2..{MAX_BLOCK}", "use 16")
            block = 0
        vf_count = self.integer(spec["vf_count"], "vf_count")
        if vf_count < 1 and not any(p.key == "fabric.vf_count" for p in self.problems):
            self.fabric("vf_count", "must be at least 1", "create at least one VF")
        if vf_count > MAX_VFS:
            self.fabric(
                "vf_count",
                f"{vf_count} is more than the {MAX_VFS} VFs a ConnectX-7 PF supports",
                "create the VFs the deployments use (4 is plenty for a few models per Spark)",
            )
            vf_count = 0
        ports = self.ports(spec["ports"])
        in_use = self.vfs_in_use(spec["vfs_in_use"], vf_count)
        mac_prefix = self.mac_prefix(str(spec["mac_prefix"]).lower())
        gid_index = self.gid_index(spec["gid_index"])
        rails = self.rails(spec["rails"], ports)
        return Spec(subnet, mtu, block, vf_count, ports, in_use, mac_prefix, gid_index, rails)

    def subnet(self, raw: Any) -> ipaddress.IPv4Network | None:
        if raw is None:
            self.fabric("subnet", "is required", "set e.g. subnet: 10.77.0.0/24")
            return None
        if not isinstance(raw, str):
            self.fabric(
                "subnet", f"is {shown(raw)}, not text", "write it as text, e.g. 10.77.0.0/24"
            )
            return None
        try:
            subnet = ipaddress.IPv4Network(raw, strict=True)
        except ValueError as exc:
            self.fabric(
                "subnet",
                f"{shown(raw)} is not an IPv4 network ({shown(str(exc), 60)})",
                "use network/prefix with host bits zero, e.g. 10.77.0.0/24",
            )
            return None
        return subnet

    def mtu(self, raw: Any) -> int:
        mtu = self.integer(raw, "mtu")
        if mtu and not 1280 <= mtu <= 9216:
            self.fabric("mtu", f"{mtu} is out of range", "use 9000 on the fabric")
        elif mtu and mtu < MIN_FABRIC_MTU:
            self.fabric(
                "mtu",
                f"{mtu} is below {MIN_FABRIC_MTU}: RoCE then runs with small frames and NCCL does "
                "not reach the link's bandwidth",
                f"set fabric.mtu: {MIN_FABRIC_MTU} (and jumbo frames on the switch, if any)",
            )
        return mtu

    def ports(self, ports: Any) -> list[str]:
        if not isinstance(ports, list) or not ports or not all(isinstance(p, str) for p in ports):
            self.fabric(
                "ports", "must be a non-empty list of interface names", "e.g. ports: [enp1s0f0np0]"
            )
            return ["invalid"]
        if len(ports) > MAX_PORTS:
            self.fabric(
                "ports",
                f"lists {len(ports)} ports; a DGX Spark has {MAX_PORTS} (two QSFP cages, two "
                "PCIe functions each)",
                "list the PFs `ip link` shows on a Spark",
            )
            return ["invalid"]
        for port in ports:
            if not PORT_NAME.fullmatch(port):
                self.fabric(
                    "ports",
                    f"{shown(port)} is not an Ethernet netdev name",
                    "use the name `ip link` shows, e.g. enp1s0f0np0",
                )
            elif len(f"{port_base(port)}v{MAX_VFS}") > IFNAMSIZ:
                self.fabric(
                    "ports",
                    f"{shown(port)}: its VF names ({port_base(port)}v<index>) would be longer "
                    f"than Linux's {IFNAMSIZ} characters",
                    "use the name `ip link` shows, e.g. enp1s0f0np0",
                )
        if len(set(ports)) != len(ports):
            self.fabric("ports", "lists a port twice", "list each port once")
        return ports

    def vfs_in_use(self, raw: Any, vf_count: int) -> list[int]:
        if not isinstance(raw, list) or not raw or len(raw) > MAX_VFS:
            self.fabric(
                "vfs_in_use",
                f"must be a list of 1 to {MAX_VFS} VF indices",
                "e.g. vfs_in_use: [0]",
            )
            return []
        in_use = [self.integer(v, "vfs_in_use") for v in raw]
        for v in in_use:
            if vf_count and not 0 <= v < vf_count:
                self.fabric(
                    "vfs_in_use",
                    f"VF index {v} is beyond the VF count ({vf_count} VFs: 0..{vf_count - 1})",
                    "use a lower index or raise fabric.vf_count",
                )
        if len(set(in_use)) != len(in_use):
            self.fabric("vfs_in_use", "lists a VF twice", "list each VF once")
        return in_use

    def mac_prefix(self, mac_prefix: str) -> str:
        octets = mac_prefix.split(":")
        if len(octets) != 3 or not all(re.fullmatch(r"[0-9a-f]{2}", o) for o in octets):
            self.fabric(
                "mac_prefix", f"{shown(mac_prefix)} is not three hex octets", "e.g. 02:53:50"
            )
        elif int(octets[0], 16) & 0x03 != 0x02:
            self.fabric(
                "mac_prefix",
                f"{shown(mac_prefix)} is not locally administered unicast",
                "the first octet must have bit 1 set and bit 0 clear, e.g. 02",
            )
        return mac_prefix

    def gid_index(self, raw: Any) -> int | None:
        if raw is None:
            return None
        gid_index = self.integer(raw, "gid_index")
        if gid_index < 0:
            self.fabric(
                "gid_index",
                f"{gid_index} is not a GID table index (NCCL would get NCCL_IB_GID_INDEX="
                f"{gid_index})",
                "remove it (null: the roce role discovers the RoCE v2 IPv4 index) or set the "
                "index `show_gids` lists for the VF's address",
            )
        return gid_index

    def rails(self, raw: Any, ports: list[str]) -> list[str]:
        if raw is None:
            return [ports[0]] if ports else []
        if not isinstance(raw, list) or not raw or not all(isinstance(r, str) for r in raw):
            self.fabric(
                "rails",
                "must be a non-empty list of PF names from fabric.ports",
                "e.g. rails: [enp1s0f0np0, enP2p1s0f0np0], or remove it for the first port only",
            )
            return []
        rails = list(raw)
        for rail in rails:
            if rail not in ports:
                self.fabric(
                    "rails",
                    f"{shown(rail)} is not in fabric.ports ({', '.join(map(str, ports))})",
                    "add it to fabric.ports too: a rail's PF needs its own planned address",
                )
        if len(set(rails)) != len(rails):
            self.fabric("rails", "lists a PF twice", "list each PF once")
        return rails

    # --- the Sparks --------------------------------------------------------------------------

    def sparks(self, nodes: Sequence[NodeInput], block: int) -> list[tuple[int, NodeInput]]:
        """(spark_index, node) of every Spark with a usable index."""
        if not nodes:
            self.node(
                "sparks", "the inventory has no Spark", "add the Spark hosts to the 'sparks' group"
            )
        indexed: list[tuple[int, NodeInput]] = []
        seen_names: set[str] = set()
        for position, node in enumerate(nodes, start=1):
            if node.name in seen_names:
                self.node(node.name, "appears twice", "list each Spark once")
            seen_names.add(node.name)
            index = position if node.spark_index is None else node.spark_index
            if isinstance(index, bool) or not isinstance(index, int):
                self.node(
                    f"{node.name}.spark_index",
                    f"must be an integer, got {shown(index)}",
                    "write a number",
                )
                continue
            if block and not 1 <= index < block:
                self.node(
                    f"{node.name}.spark_index",
                    f"{index} is out of range 1..{block - 1}",
                    "use a smaller index or raise fabric.block",
                )
            indexed.append((index, node))
        by_index: dict[int, str] = {}
        for index, node in indexed:
            if index in by_index:
                self.node(
                    f"{node.name}.spark_index",
                    f"{index} is already used by {by_index[index]}",
                    "give every Spark its own spark_index",
                )
            by_index.setdefault(index, node.name)
        return indexed

    def networks(self, spec: Spec) -> list[ipaddress.IPv4Network]:
        """Every rail's network, from ``fabric.subnet`` on."""
        if spec.subnet is None:
            return []
        try:
            nets = rail_subnets(spec.subnet, max(len(spec.rails), 1))
        except ValueError:
            self.fabric(
                "rails",
                f"{len(spec.rails)} rails need {len(spec.rails)} networks of "
                f"/{spec.subnet.prefixlen} from {spec.subnet} on, beyond the IPv4 space",
                "use a lower fabric.subnet",
            )
            return []
        for rail, rail_net in enumerate(nets):
            for net, what in reserved_ranges():
                if rail_net.overlaps(net):
                    where = "" if rail == 0 else f" (rail {rail}'s network {rail_net})"
                    self.fabric(
                        "subnet",
                        f"{spec.subnet}{where} overlaps {what}",
                        "use a private network of its own for the fabric, e.g. 10.77.0.0/24",
                    )
                    return []
        return nets

    def management(
        self, indexed: Sequence[tuple[int, NodeInput]], nets: Sequence[ipaddress.IPv4Network]
    ) -> None:
        """Every node IP is an IPv4 address of its own, off the fabric."""
        node_ips: dict[str, str] = {}
        for _, node in indexed:
            try:
                ip = ipaddress.IPv4Address(node.node_ip)
            except ValueError:
                self.node(
                    f"{node.name}.node_ip",
                    f"{shown(node.node_ip)} is not an IPv4 address",
                    "set ansible_host (or k3s_node_ip) to the management IPv4",
                )
                continue
            inside = in_fabric(str(ip), nets)
            if inside is not None:
                self.node(
                    f"{node.name}.node_ip",
                    f"management address {ip} lies inside the fabric subnet {inside}",
                    "use separate networks for management and the QSFP fabric",
                )
            if str(ip) in node_ips:
                self.node(
                    f"{node.name}.node_ip",
                    f"{ip} is already the node IP of {node_ips[str(ip)]}",
                    "every node needs its own management address",
                )
            node_ips.setdefault(str(ip), node.name)

    def room(self, spec: Spec) -> None:
        """The subnet holds a block per port and per VF."""
        if spec.subnet is None or spec.block < 2:
            return
        blocks_needed = len(spec.ports) + max(spec.vf_count, 0)
        if blocks_needed * spec.block - 1 >= spec.subnet.num_addresses - 1:
            self.fabric(
                "subnet",
                f"{spec.subnet} has {spec.subnet.num_addresses} addresses but the plan needs "
                f"{blocks_needed} blocks of {spec.block} ({len(spec.ports)} port(s) + "
                f"{spec.vf_count} VFs)",
                "use a larger subnet (e.g. /24), fewer VFs or a smaller block",
            )


def compute_plan(
    fabric: Mapping[str, Any], nodes: Sequence[NodeInput], source: str = "group_vars"
) -> FabricPlan:
    """Compute the plan or raise :class:`SparkrackError` listing every problem found."""
    read = Reader(source)
    if not isinstance(fabric, Mapping):
        read.fabric("", "must be a mapping", "see inventories/example/group_vars/all.yml")
        raise SparkrackError(read.problems)
    spec = read.spec(fabric)
    indexed = read.sparks(nodes, spec.block)
    nets = read.networks(spec)
    read.management(indexed, nets)
    read.room(spec)
    if read.problems:
        raise SparkrackError(read.problems)
    return lay_out(spec, indexed, nets, source)


def lay_out(
    spec: Spec,
    indexed: Sequence[tuple[int, NodeInput]],
    nets: Sequence[ipaddress.IPv4Network],
    source: str,
) -> FabricPlan:
    """The plan of a sound input: a block per port and per VF, the node's spark_index as the
    host offset inside each block, on every rail's network (see the addressplan module)."""
    assert spec.subnet is not None
    ports, rails, block = spec.ports, spec.rails, spec.block

    def addr(block_no: int, index: int, rail: int = 0) -> str:
        return str(nets[rail].network_address + block_no * block + index)

    def rail_of(port: str) -> int:
        return rails.index(port) if port in rails else 0

    plans: list[NodePlan] = []
    for rank, (index, node) in enumerate(sorted(indexed, key=lambda item: item[0])):
        port_plans = tuple(
            PortPlan(
                name=p,
                address=addr(i, index, rail_of(p)),
                prefixlen=spec.subnet.prefixlen,
                rdma_device=rdma_name(p),
            )
            for i, p in enumerate(ports)
        )
        vf_plans = tuple(
            VfPlan(
                index=v,
                netdev=f"{port_base(pf)}v{v}",
                rdma_device=f"{rdma_name(pf)}v{v}",
                address=addr(len(ports) + v, index, r),
                prefixlen=spec.subnet.prefixlen,
                mac=f"{spec.mac_prefix}:{index:02x}:{ports.index(pf):02x}:{v:02x}",
                in_use=v in spec.in_use,
                rail=r,
                pf=pf,
            )
            for r, pf in enumerate(rails)
            for v in range(spec.vf_count)
        )
        plans.append(
            NodePlan(
                name=node.name,
                spark_index=index,
                rank=rank,
                node_ip=node.node_ip,
                ports=port_plans,
                vfs=vf_plans,
            )
        )
    # Defence in depth: the layout above cannot collide, but a future change might.
    all_addresses = [p.address for n in plans for p in n.ports] + [
        v.address for n in plans for v in n.vfs
    ]
    if len(set(all_addresses)) != len(all_addresses):  # pragma: no cover - layout invariant
        raise SparkrackError(
            Problem(
                source, "fabric", "the plan produced duplicate addresses", "report this as a bug"
            )
        )
    return FabricPlan(
        subnet=str(spec.subnet),
        prefixlen=spec.subnet.prefixlen,
        mtu=spec.mtu,
        sriov_port=rails[0] if rails else ports[0],
        rails=tuple(rails),
        rail_subnets=tuple(str(net) for net in nets),
        vf_count=spec.vf_count,
        vfs_in_use=tuple(spec.in_use),
        gid_index=spec.gid_index,
        nodes=tuple(plans),
    )
