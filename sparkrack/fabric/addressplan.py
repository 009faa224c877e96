"""The fabric address plan: the single source of truth for every QSFP/RoCE address.

Netplan (``qsfp_network``), the SR-IOV/RoCE roles, the Multus NetworkAttachmentDefinitions,
the NCCL environment of the serving pods and K3s all read the plan; none of them computes an
address on its own. This module holds the plan's records, the device names, and the plan as the
``sparkrack_plan`` fact; :func:`sparkrack.fabric.layout.compute_plan` computes it.

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
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, TypeVar, cast, get_args, get_origin, get_type_hints

from sparkrack.errors import Problem, SparkrackError


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
    rails: tuple[str, ...]
    """PFs whose VFs serve NCCL, in rail order (``rails[0] == sriov_port``)."""
    rail_subnets: tuple[str, ...]
    """The network of every rail (``rail_subnets[0] == subnet``)."""
    vf_count: int
    vfs_in_use: tuple[int, ...]
    gid_index: int | None
    nodes: tuple[NodePlan, ...]
    """Every Spark, in rank order."""

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

    def to_dict(self) -> dict[str, Any]:
        """The plan as the ``sparkrack_plan`` fact: every field by its name, nodes keyed by
        inventory name, plus ``head`` and ``order`` (by rank)."""
        fact = {
            f.name: fact_value(getattr(self, f.name)) for f in fields(self) if f.name != "nodes"
        }
        return {
            **fact,
            "head": self.head.name,
            "order": [n.name for n in self.nodes],
            "nodes": {n.name: {**record(n), "serving_vf": n.serving_vf.index} for n in self.nodes},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FabricPlan:
        """The plan :meth:`to_dict` wrote (the ``sparkrack_plan`` fact).

        Plays hand the fact computed by preflight to every renderer, so the plan is computed once
        per run and every consumer reads exactly that plan.
        """
        try:
            prefix = {"prefixlen": int(data["prefixlen"])}
            nodes = tuple(
                from_record(
                    NodePlan,
                    n,
                    ports=tuple(from_record(PortPlan, p, **prefix) for p in n["ports"]),
                    vfs=tuple(
                        from_record(VfPlan, {"pf": data["sriov_port"], **v}, **prefix)
                        for v in n["vfs"]
                    ),
                )
                for n in (data["nodes"][name] for name in data["order"])
            )
            return from_record(
                cls,
                {
                    **data,
                    "rails": data.get("rails") or [data["sriov_port"]],
                    "rail_subnets": data.get("rail_subnets") or [data["subnet"]],
                },
                nodes=nodes,
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


# --- the plan as fact data: written and read by the records' own fields ----------------------

Record = TypeVar("Record")


def record(obj: Any) -> dict[str, Any]:
    """A plan record as fact data: its fields in declaration order, nested records as lists of
    records; a record with an address writes its prefix length as its ``cidr``."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        if f.name == "prefixlen" and hasattr(obj, "cidr"):
            out["cidr"] = obj.cidr
        else:
            out[f.name] = fact_value(getattr(obj, f.name))
    return out


def fact_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [record(v) if is_dataclass(v) else v for v in value]
    return value


def from_record(cls: type[Record], data: Mapping[str, Any], **given: Any) -> Record:
    """A plan record from fact data: every field of ``cls`` read from ``data`` as its type says
    (``given`` fields as passed); a field the data lacks keeps its default."""
    hints = get_type_hints(cls)
    values = {
        f.name: given[f.name] if f.name in given else typed(hints[f.name], data[f.name])
        for f in fields(cast(Any, cls))
        if f.name in given or f.name in data
    }
    return cls(**values)


def typed(hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` (int, str, bool, ``X | None``, ``tuple[X, ...]``) says."""
    args = get_args(hint)
    if get_origin(hint) is tuple:
        return tuple(typed(args[0], v) for v in value)
    if type(None) in args:
        return None if value is None else typed(next(a for a in args if a is not type(None)), value)
    if hint in (int, str, bool):
        return hint(value)
    raise TypeError(f"no fact conversion to {hint!r}")


def port_base(port: str) -> str:
    """``enp1s0f0np0`` -> ``enp1s0f0`` (drop the physical-port-name suffix)."""
    return re.sub(r"np\d+$", "", port)


def rdma_name(port: str) -> str:
    """RDMA device of a PF netdev: ``enp1s0f0np0`` -> ``rocep1s0f0``."""
    return "roce" + port_base(port)[2:]


def rail_subnets(subnet: ipaddress.IPv4Network, rails: int) -> list[ipaddress.IPv4Network]:
    """The network of every rail: ``fabric.subnet`` for the first, then the next networks of the
    same size (``10.77.0.0/24`` -> ``10.77.1.0/24`` for rail 1). Raises ValueError past IPv4."""
    base = int(subnet.network_address)
    return [
        ipaddress.IPv4Network((base + r * subnet.num_addresses, subnet.prefixlen))
        for r in range(rails)
    ]


def in_fabric(address: str, nets: Sequence[ipaddress.IPv4Network]) -> ipaddress.IPv4Network | None:
    """The fabric network that holds ``address`` (None: none does, or it is no IPv4 address).

    The one check that a management or control-plane address stays off the QSFP fabric."""
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        return None
    return next((net for net in nets if ip in net), None)


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
