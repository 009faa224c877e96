"""The fabric address plan: the single source of truth for every QSFP/RoCE address.

Netplan (``qsfp_network``), the SR-IOV/RoCE roles, the Multus NetworkAttachmentDefinitions,
the NCCL environment of the serving pods and K3s all read the plan computed here; none of them
computes an address on its own.

Layout inside ``fabric.subnet`` (default block of 16 addresses)::

    block 0 .. P-1        PF address of port p          host offset = p * block + spark_index
    block P .. P+V-1      VF v on the rail               host offset = (P + v) * block + spark_index

A *rail* is a PF whose VFs serve NCCL (``fabric.rails``, default: the first port only). Each GB10
QSFP cage enumerates as two PCIe Gen5 x4 functions (``enp1s0f0np0`` and ``enP2p1s0f0np0``) of about
100 Gb/s each; NCCL reaches the cable's ~200 Gb/s only with a VF of both in ``NCCL_IB_HCA``, so a
serving pod gets VF v of *every* rail. Rail r has its own network, the r-th network of the same
size from ``fabric.subnet`` on (rail 0 = ``fabric.subnet``, so the one-rail plan is unchanged):
two interfaces of one host in one subnet would leave the kernel one route for both. Inside its
network a rail uses the layout above with its own PF and VFs, so only the third octet tells the
rail: ``10.77.0.35`` is spark3's VF1 on rail 0, ``10.77.1.35`` on rail 1.

With ``10.77.0.0/24``, one port and 4 VFs: spark3's PF is ``10.77.0.3`` and its VF1 is
``10.77.0.35`` — the last digits always tell the node. Every VF gets a fixed, locally
administered MAC ``<mac_prefix>:<spark_index>:<port>:<vf>`` (``port`` = the rail's position in
``fabric.ports``) so the GID table and ARP entries survive VF re-creation.

Device names follow the kernel's predictable naming on DGX OS: the PF ``enp1s0f0np0`` has the
base ``enp1s0f0``; its VF v is the netdev ``enp1s0f0v<v>`` and the RDMA device
``rocep1s0f0v<v>`` (the RDMA name is the netdev base with ``en`` replaced by ``roce``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkrack.errors import Problem, SparkrackError

FABRIC_KEYS: dict[str, str] = {
    "subnet": "IPv4 network of the QSFP fabric, e.g. 10.77.0.0/24",
    "mtu": "MTU of the fabric ports and VFs (9000 on the ConnectX-7 fabric)",
    "ports": "list of ConnectX-7 PF netdevs addressed on every Spark",
    "rails": "PFs (from ports) whose VFs serve NCCL; default: the first port only",
    "vf_count": "number of SR-IOV VFs created on every rail",
    "vfs_in_use": "VF indices handed to serving pods (each gets a NAD and a host IPv4)",
    "block": "addresses per block of the plan; every spark_index must be below it",
    "mac_prefix": "first three octets of VF MACs; must be locally administered unicast",
    "gid_index": "RoCE GID index override; null = discovered on the host by the roce role",
}

_DEFAULTS: dict[str, Any] = {
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

_PORT_RE = re.compile(r"^en[A-Za-z0-9]+?(np\d+)?$")


@dataclass(frozen=True)
class NodeInput:
    """What the inventory says about one Spark."""

    name: str
    node_ip: str
    spark_index: int | None = None


@dataclass(frozen=True)
class PortPlan:
    name: str
    address: str
    prefixlen: int
    rdma_device: str

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefixlen}"


@dataclass(frozen=True)
class VfPlan:
    index: int
    netdev: str
    rdma_device: str
    address: str
    prefixlen: int
    mac: str
    in_use: bool
    rail: int = 0
    """Position of the VF's PF in ``fabric.rails`` (0 = the first rail)."""
    pf: str = ""
    """The PF netdev the VF is created on."""

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefixlen}"


@dataclass(frozen=True)
class NodePlan:
    name: str
    spark_index: int
    rank: int
    node_ip: str
    ports: tuple[PortPlan, ...]
    vfs: tuple[VfPlan, ...]
    """Every planned VF, rail by rail (rail 0's VFs first)."""

    def vf(self, index: int, rail: int = 0) -> VfPlan:
        for vf in self.vfs:
            if vf.index == index and vf.rail == rail:
                return vf
        count = sum(1 for vf in self.vfs if vf.rail == 0)
        raise SparkrackError(
            Problem(
                "fabric",
                "vfs_in_use",
                f"VF index {index} does not exist on {self.name} rail {rail} (VFs 0..{count - 1})",
                "use an index below fabric.vf_count or raise fabric.vf_count",
            )
        )

    def rail_vfs(self, index: int) -> tuple[VfPlan, ...]:
        """VF ``index`` of every rail, in rail order: what one NCCL rank is given."""
        found = tuple(vf for vf in self.vfs if vf.index == index)
        if not found:
            self.vf(index)  # raises the error naming the key and the fix
        return found

    @property
    def serving_vf(self) -> VfPlan:
        """The first rail's VF of the serving pod on this node (first VF in use)."""
        return next(vf for vf in self.vfs if vf.in_use and vf.rail == 0)


@dataclass(frozen=True)
class FabricPlan:
    subnet: str
    prefixlen: int
    mtu: int
    sriov_port: str
    vf_count: int
    vfs_in_use: tuple[int, ...]
    gid_index: int | None
    nodes: tuple[NodePlan, ...] = field(default_factory=tuple)
    rails: tuple[str, ...] = ()
    """PFs whose VFs serve NCCL, in rail order (``rails[0] == sriov_port``)."""
    rail_subnets: tuple[str, ...] = ()
    """The network of every rail (``rail_subnets[0] == subnet``)."""

    @property
    def serving_vf_index(self) -> int:
        """The VF index a deployment gets when it names none (first VF in use)."""
        return self.vfs_in_use[0]

    def node(self, name: str) -> NodePlan:
        for node in self.nodes:
            if node.name == name:
                return node
        raise SparkrackError(
            Problem("inventory", name, "is not a Spark in the address plan", "add it to 'sparks'")
        )

    @property
    def head(self) -> NodePlan:
        """Rank 0: the Spark with the lowest spark_index."""
        return self.nodes[0]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FabricPlan:
        """Rebuild the plan from :meth:`to_dict` output (the ``sparkrack_plan`` fact).

        Plays hand the fact computed by preflight to every renderer, so the plan is computed once
        per run and every consumer reads exactly that plan.
        """
        try:
            nodes = tuple(
                NodePlan(
                    name=str(n["name"]),
                    spark_index=int(n["spark_index"]),
                    rank=int(n["rank"]),
                    node_ip=str(n["node_ip"]),
                    ports=tuple(
                        PortPlan(
                            name=str(p["name"]),
                            address=str(p["address"]),
                            prefixlen=int(data["prefixlen"]),
                            rdma_device=str(p["rdma_device"]),
                        )
                        for p in n["ports"]
                    ),
                    vfs=tuple(
                        VfPlan(
                            index=int(v["index"]),
                            netdev=str(v["netdev"]),
                            rdma_device=str(v["rdma_device"]),
                            address=str(v["address"]),
                            prefixlen=int(data["prefixlen"]),
                            mac=str(v["mac"]),
                            in_use=bool(v["in_use"]),
                            rail=int(v.get("rail", 0)),
                            pf=str(v.get("pf", data["sriov_port"])),
                        )
                        for v in n["vfs"]
                    ),
                )
                for n in (data["nodes"][name] for name in data["order"])
            )
            gid = data.get("gid_index")
            return cls(
                subnet=str(data["subnet"]),
                prefixlen=int(data["prefixlen"]),
                mtu=int(data["mtu"]),
                sriov_port=str(data["sriov_port"]),
                vf_count=int(data["vf_count"]),
                vfs_in_use=tuple(int(v) for v in data["vfs_in_use"]),
                gid_index=None if gid is None else int(gid),
                nodes=nodes,
                rails=tuple(str(r) for r in data.get("rails") or [data["sriov_port"]]),
                rail_subnets=tuple(str(n) for n in data.get("rail_subnets") or [data["subnet"]]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SparkrackError(
                Problem(
                    "sparkrack_plan",
                    "(fact)",
                    f"is not an address plan ({exc!r})",
                    "import playbooks/preflight.yml first; it sets sparkrack_plan",
                )
            ) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for Jinja/JSON: nodes keyed by inventory name, plus ``order`` by rank."""
        return {
            "subnet": self.subnet,
            "prefixlen": self.prefixlen,
            "mtu": self.mtu,
            "sriov_port": self.sriov_port,
            "rails": list(self.rails),
            "rail_subnets": list(self.rail_subnets),
            "vf_count": self.vf_count,
            "vfs_in_use": list(self.vfs_in_use),
            "gid_index": self.gid_index,
            "head": self.head.name,
            "order": [n.name for n in self.nodes],
            "nodes": {
                n.name: {
                    "name": n.name,
                    "spark_index": n.spark_index,
                    "rank": n.rank,
                    "node_ip": n.node_ip,
                    "ports": [
                        {
                            "name": p.name,
                            "address": p.address,
                            "cidr": p.cidr,
                            "rdma_device": p.rdma_device,
                        }
                        for p in n.ports
                    ],
                    "vfs": [
                        {
                            "index": v.index,
                            "netdev": v.netdev,
                            "rdma_device": v.rdma_device,
                            "address": v.address,
                            "cidr": v.cidr,
                            "mac": v.mac,
                            "in_use": v.in_use,
                            "rail": v.rail,
                            "pf": v.pf,
                        }
                        for v in n.vfs
                    ],
                    "serving_vf": n.serving_vf.index,
                }
                for n in self.nodes
            },
        }


def port_base(port: str) -> str:
    """``enp1s0f0np0`` -> ``enp1s0f0`` (drop the physical-port-name suffix)."""
    return re.sub(r"np\d+$", "", port)


def rdma_name(port: str) -> str:
    """RDMA device of a PF netdev: ``enp1s0f0np0`` -> ``rocep1s0f0``."""
    return "roce" + port_base(port)[2:]


def _problem(key: str, message: str, fix: str, source: str) -> Problem:
    return Problem(source, f"fabric.{key}" if key else "fabric", message, fix)


def _int(value: Any, key: str, source: str, problems: list[Problem]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(
            _problem(key, f"must be an integer, got {value!r}", "write a number", source)
        )
        return 0
    return value


def compute_plan(
    fabric: Mapping[str, Any], nodes: Sequence[NodeInput], source: str = "group_vars"
) -> FabricPlan:
    """Compute the plan or raise :class:`SparkrackError` listing every problem found."""
    problems: list[Problem] = []
    if not isinstance(fabric, Mapping):
        raise SparkrackError(
            _problem("", "must be a mapping", "see inventories/example/group_vars/all.yml", source)
        )
    unknown = sorted(set(fabric) - set(FABRIC_KEYS))
    for key in unknown:
        problems.append(
            _problem(key, "unknown key", f"remove it; known keys: {', '.join(FABRIC_KEYS)}", source)
        )
    spec = {**_DEFAULTS, **{k: v for k, v in fabric.items() if k in FABRIC_KEYS}}

    subnet_raw = spec.get("subnet")
    subnet: ipaddress.IPv4Network | None = None
    if subnet_raw is None:
        problems.append(_problem("subnet", "is required", "set e.g. subnet: 10.77.0.0/24", source))
    else:
        try:
            subnet = ipaddress.IPv4Network(str(subnet_raw), strict=True)
        except ValueError as exc:
            problems.append(
                _problem(
                    "subnet",
                    f"{subnet_raw!r} is not an IPv4 network ({exc})",
                    "use network/prefix with host bits zero, e.g. 10.77.0.0/24",
                    source,
                )
            )

    mtu = _int(spec["mtu"], "mtu", source, problems)
    if mtu and not 1280 <= mtu <= 9216:
        problems.append(_problem("mtu", f"{mtu} is out of range", "use 9000 on the fabric", source))
    elif mtu and mtu < MIN_FABRIC_MTU:
        problems.append(
            _problem(
                "mtu",
                f"{mtu} is below {MIN_FABRIC_MTU}: RoCE then runs with small frames and NCCL does "
                "not reach the link's bandwidth",
                f"set fabric.mtu: {MIN_FABRIC_MTU} (and jumbo frames on the switch, if any)",
                source,
            )
        )
    block = _int(spec["block"], "block", source, problems)
    if block and block < 2:
        problems.append(_problem("block", "must be at least 2", "use 16", source))
    vf_count = _int(spec["vf_count"], "vf_count", source, problems)
    if vf_count < 1 and not any(p.key == "fabric.vf_count" for p in problems):
        problems.append(
            _problem("vf_count", "must be at least 1", "create at least one VF", source)
        )

    ports = spec["ports"]
    if not isinstance(ports, list) or not ports or not all(isinstance(p, str) for p in ports):
        problems.append(
            _problem(
                "ports",
                "must be a non-empty list of interface names",
                "e.g. ports: [enp1s0f0np0]",
                source,
            )
        )
        ports = ["invalid"]
    else:
        for port in ports:
            if not _PORT_RE.match(port):
                problems.append(
                    _problem(
                        "ports",
                        f"{port!r} is not an Ethernet netdev name",
                        "use the name `ip link` shows, e.g. enp1s0f0np0",
                        source,
                    )
                )
        if len(set(ports)) != len(ports):
            problems.append(_problem("ports", "lists a port twice", "list each port once", source))

    in_use_raw = spec["vfs_in_use"]
    if not isinstance(in_use_raw, list) or not in_use_raw:
        problems.append(
            _problem(
                "vfs_in_use",
                "must be a non-empty list of VF indices",
                "e.g. vfs_in_use: [0]",
                source,
            )
        )
        in_use: list[int] = []
    else:
        in_use = [_int(v, "vfs_in_use", source, problems) for v in in_use_raw]
        for v in in_use:
            if vf_count and not 0 <= v < vf_count:
                problems.append(
                    _problem(
                        "vfs_in_use",
                        f"VF index {v} is beyond the VF count ({vf_count} VFs: 0..{vf_count - 1})",
                        "use a lower index or raise fabric.vf_count",
                        source,
                    )
                )
        if len(set(in_use)) != len(in_use):
            problems.append(_problem("vfs_in_use", "lists a VF twice", "list each VF once", source))

    mac_prefix = str(spec["mac_prefix"]).lower()
    octets = mac_prefix.split(":")
    if len(octets) != 3 or not all(re.fullmatch(r"[0-9a-f]{2}", o) for o in octets):
        problems.append(
            _problem(
                "mac_prefix", f"{mac_prefix!r} is not three hex octets", "e.g. 02:53:50", source
            )
        )
    elif int(octets[0], 16) & 0x03 != 0x02:
        problems.append(
            _problem(
                "mac_prefix",
                f"{mac_prefix!r} is not locally administered unicast",
                "the first octet must have bit 1 set and bit 0 clear, e.g. 02",
                source,
            )
        )

    gid_index = spec["gid_index"]
    if gid_index is not None:
        gid_index = _int(gid_index, "gid_index", source, problems)
        if gid_index < 0:
            problems.append(
                _problem(
                    "gid_index",
                    f"{gid_index} is not a GID table index (NCCL would get NCCL_IB_GID_INDEX="
                    f"{gid_index})",
                    "remove it (null: the roce role discovers the RoCE v2 IPv4 index) or set the "
                    "index `show_gids` lists for the VF's address",
                    source,
                )
            )

    rails_raw = spec["rails"]
    rails: list[str]
    if rails_raw is None:
        rails = [ports[0]] if isinstance(ports, list) and ports else []
    elif (
        not isinstance(rails_raw, list)
        or not rails_raw
        or not all(isinstance(r, str) for r in rails_raw)
    ):
        problems.append(
            _problem(
                "rails",
                "must be a non-empty list of PF names from fabric.ports",
                "e.g. rails: [enp1s0f0np0, enP2p1s0f0np0], or remove it for the first port only",
                source,
            )
        )
        rails = []
    else:
        rails = list(rails_raw)
        for rail in rails:
            if isinstance(ports, list) and rail not in ports:
                problems.append(
                    _problem(
                        "rails",
                        f"{rail!r} is not in fabric.ports ({', '.join(map(str, ports))})",
                        "add it to fabric.ports too: a rail's PF needs its own planned address",
                        source,
                    )
                )
        if len(set(rails)) != len(rails):
            problems.append(_problem("rails", "lists a PF twice", "list each PF once", source))

    # --- nodes -------------------------------------------------------------------------
    if not nodes:
        problems.append(
            Problem(
                source,
                "sparks",
                "the inventory has no Spark",
                "add the Spark hosts to the 'sparks' group",
            )
        )
    indexed: list[tuple[int, NodeInput]] = []
    seen_names: set[str] = set()
    for position, node in enumerate(nodes, start=1):
        if node.name in seen_names:
            problems.append(Problem(source, node.name, "appears twice", "list each Spark once"))
        seen_names.add(node.name)
        index = position if node.spark_index is None else node.spark_index
        if isinstance(index, bool) or not isinstance(index, int):
            problems.append(
                Problem(
                    source,
                    f"{node.name}.spark_index",
                    f"must be an integer, got {index!r}",
                    "write a number",
                )
            )
            continue
        if block and not 1 <= index < block:
            problems.append(
                Problem(
                    source,
                    f"{node.name}.spark_index",
                    f"{index} is out of range 1..{block - 1}",
                    "use a smaller index or raise fabric.block",
                )
            )
        indexed.append((index, node))
    by_index: dict[int, str] = {}
    for index, node in indexed:
        if index in by_index:
            problems.append(
                Problem(
                    source,
                    f"{node.name}.spark_index",
                    f"{index} is already used by {by_index[index]}",
                    "give every Spark its own spark_index",
                )
            )
        by_index.setdefault(index, node.name)
    nets: list[ipaddress.IPv4Network] = []
    if subnet is not None:
        try:
            nets = rail_subnets(subnet, max(len(rails), 1))
        except ValueError:
            problems.append(
                _problem(
                    "rails",
                    f"{len(rails)} rails need {len(rails)} networks of /{subnet.prefixlen} from "
                    f"{subnet} on, beyond the IPv4 space",
                    "use a lower fabric.subnet",
                    source,
                )
            )
    node_ips: dict[str, str] = {}
    for _, node in indexed:
        try:
            ip = ipaddress.IPv4Address(node.node_ip)
        except ValueError:
            problems.append(
                Problem(
                    source,
                    f"{node.name}.node_ip",
                    f"{node.node_ip!r} is not an IPv4 address",
                    "set ansible_host (or k3s_node_ip) to the management IPv4",
                )
            )
            continue
        inside = next((net for net in nets if ip in net), None)
        if inside is not None:
            problems.append(
                Problem(
                    source,
                    f"{node.name}.node_ip",
                    f"management address {ip} lies inside the fabric subnet {inside}",
                    "use separate networks for management and the QSFP fabric",
                )
            )
        if str(ip) in node_ips:
            problems.append(
                Problem(
                    source,
                    f"{node.name}.node_ip",
                    f"{ip} is already the node IP of {node_ips[str(ip)]}",
                    "every node needs its own management address",
                )
            )
        node_ips.setdefault(str(ip), node.name)

    if subnet is not None and block >= 2 and isinstance(ports, list):
        blocks_needed = len(ports) + max(vf_count, 0)
        last_offset = blocks_needed * block - 1
        if last_offset >= subnet.num_addresses - 1:
            problems.append(
                _problem(
                    "subnet",
                    f"{subnet} has {subnet.num_addresses} addresses but the "
                    f"plan needs {blocks_needed} blocks of {block} "
                    f"({len(ports)} port(s) + {vf_count} VFs)",
                    "use a larger subnet (e.g. /24), fewer VFs or a smaller block",
                    source,
                )
            )
    if problems:
        raise SparkrackError(problems)
    assert subnet is not None

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
                prefixlen=subnet.prefixlen,
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
                prefixlen=subnet.prefixlen,
                mac=f"{mac_prefix}:{index:02x}:{ports.index(pf):02x}:{v:02x}",
                in_use=v in in_use,
                rail=r,
                pf=pf,
            )
            for r, pf in enumerate(rails)
            for v in range(vf_count)
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
            _problem("", "the plan produced duplicate addresses", "report this as a bug", source)
        )
    return FabricPlan(
        subnet=str(subnet),
        prefixlen=subnet.prefixlen,
        mtu=mtu,
        sriov_port=rails[0] if rails else ports[0],
        vf_count=vf_count,
        vfs_in_use=tuple(in_use),
        gid_index=gid_index,
        nodes=tuple(plans),
        rails=tuple(rails),
        rail_subnets=tuple(str(net) for net in nets),
    )


def rail_subnets(subnet: ipaddress.IPv4Network, rails: int) -> list[ipaddress.IPv4Network]:
    """The network of every rail: ``fabric.subnet`` for the first, then the next networks of the
    same size (``10.77.0.0/24`` -> ``10.77.1.0/24`` for rail 1). Raises ValueError past IPv4."""
    base = int(subnet.network_address)
    return [
        ipaddress.IPv4Network((base + r * subnet.num_addresses, subnet.prefixlen))
        for r in range(rails)
    ]


def nodes_from_hostvars(
    hosts: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[NodeInput]:
    """Build node inputs from Ansible host variables (``spark_index``, ``k3s_node_ip``/``ansible_host``)."""
    result = []
    for host in hosts:
        hv = hostvars.get(host, {})
        node_ip = hv.get("k3s_node_ip") or hv.get("mgmt_ip") or hv.get("ansible_host") or ""
        result.append(NodeInput(name=host, node_ip=str(node_ip), spark_index=hv.get("spark_index")))
    return result


# --- How a serving pod gets its node's VFs (read by the NAD renderer and the pod renderer) ----
#
# One NetworkAttachmentDefinition per (rail, VF index) (``sparkrack-vf<v>`` on the first rail,
# ``sparkrack-rail<r>-vf<v>`` on the others; host-device moving the VF netdev ``<base>v<v>`` into
# the pod, static IPAM with the ``ips`` capability). The netdev name is the same on every Spark, so
# one NAD serves all nodes; each pod asks for *its* node's planned addresses through the Multus
# annotation below, one interface per rail, each equal to the host-side netplan address of that
# VF (seed 003: without the same IPv4 on the host the GID table holds only fe80:: entries).

POD_FABRIC_IFNAME = "net1"
"""The first rail's VF inside the pod; NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME point here."""


def pod_ifname(rail: int) -> str:
    """Name of rail ``rail``'s VF inside the pod: ``net1`` for the first rail, then ``net2``..."""
    return f"net{rail + 1}"


def nad_name(vf_index: int, rail: int = 0) -> str:
    if rail == 0:
        return f"sparkrack-vf{vf_index}"
    return f"sparkrack-rail{rail}-vf{vf_index}"


def pod_network_annotation(node: NodePlan, namespace: str, vf_index: int | None = None) -> str:
    """Value of ``k8s.v1.cni.cncf.io/networks`` for a pod on ``node``: VF ``vf_index`` of every
    rail (None = the serving VF), one Multus interface each."""
    import json

    index = node.serving_vf.index if vf_index is None else vf_index
    return json.dumps(
        [
            {
                "name": nad_name(vf.index, vf.rail),
                "namespace": namespace,
                "interface": pod_ifname(vf.rail),
                "ips": [vf.cidr],
                "mac": vf.mac,
            }
            for vf in node.rail_vfs(index)
        ],
        separators=(",", ":"),
    )
