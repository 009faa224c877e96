"""Every socket an engine's rank listens on: the declaration the rest of sparkrack is derived from.

Each :class:`~sparkrack.serving.engines.base.Engine` lists its :class:`Listener` rows, for
multi-rank and single-rank use. From them come the variables that choose a rank's bind address
(:func:`address_env`: ``SGLANG_HOST_IP`` = the rank's own fabric address from the address plan),
the deployment's NetworkPolicy (:mod:`sparkrack.serving.objects.network`), the check of a rendered
deployment (:mod:`sparkrack.serving.objects.connections`) and docs/reference/ports.md
(:func:`port_table`).

A pod has two networks: the cluster network (``eth0``, where NetworkPolicies act, enforced by
K3s's embedded kube-router) and the fabric VFs Multus moves in (``net1``.., static addresses from
the address plan, outside every policy). Traffic between ranks belongs on the fabric.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sparkrack import contract

LOOPBACK_ADDRESS = "127.0.0.1"
"""Where a gated engine's HTTP server listens: only its gate, in the same pod, reaches it."""
GATE_SOURCE = "sparkrack serving/scripts/engine_gate.py (--host-env POD_IP --port)"
"""What opens a gated engine's API port: the gate container of its head pod."""


class Bind(StrEnum):
    """The address a listener binds."""

    CLUSTER = "cluster"
    """The pod's cluster address (``$(POD_IP)``, eth0): NetworkPolicies act on it."""
    FABRIC = "fabric"
    """The rank's own fabric VF address from the address plan: outside every policy."""
    ALL = "all"
    """Every address of the pod; its peers connect to the one named in :attr:`Listener.reach`."""
    LOOPBACK = "loopback"
    """:data:`LOOPBACK_ADDRESS`: only the pod itself connects."""


class Peer(StrEnum):
    """Who connects to a listener."""

    GATEWAY = "gateway"
    MONITORING = "monitoring"
    WATCHDOG = "watchdog"
    RANKS = "ranks"
    """The deployment's own ranks."""
    KUBELET = "kubelet"
    """The node's kubelet (probes; policies admit the node's own traffic)."""
    POD = "pod"
    """Processes of the same pod."""


class PortOf(StrEnum):
    """Where a listener's port comes from."""

    API = "api"
    """``serving_api_port``."""
    DIST = "dist"
    """``serving_dist_port``."""
    DIST_NEXT = "dist-next"
    """``serving_dist_port`` + 1: a second fixed port of the ranks' own (:func:`next_port`)."""
    RANDOM = "random"
    """A free port the process picks at start-up: no policy can name it."""


@dataclass(frozen=True)
class Listener:
    """One socket a rank listens on, the address it binds and who connects to it."""

    name: str
    """Short name (the port table, the check's refusals)."""
    opens: str
    """``head`` (rank 0 only) or ``every`` rank."""
    bind: Bind
    port: PortOf
    peers: tuple[Peer, ...]
    source: str
    """Where the engine's release opens it (file, function)."""
    reach: Bind | None = None
    """The address peers connect to, when it is not :attr:`bind` (a wildcard bind)."""
    chosen_by: tuple[str, ...] = ()
    """Variables that choose the bind address, in the order the engine reads them; a
    :attr:`Bind.FABRIC` listener with an address variable gets the rank's fabric address
    (:func:`address_env`); without any of them set the engine falls back to :attr:`fallback`."""
    fallback: Bind | None = None
    """Where the engine binds when none of :attr:`chosen_by` is set."""
    interface: bool = False
    """:attr:`chosen_by` names an interface (``NCCL_SOCKET_IFNAME``), not an address."""
    when: str = ""
    """The launch that opens it, when not every one of the engine's multi-rank launches does
    (the engine's ``listeners`` keeps it only for that launch); empty: always."""

    def on_rank(self, rank: int) -> bool:
        return self.opens == "every" or rank == 0

    def reached_on(self) -> Bind:
        """The network peers connect over."""
        return self.reach or self.bind

    def port_of(self, api_port: int, dist_port: int) -> int | None:
        """The port number (None: random)."""
        if self.port is PortOf.API:
            return api_port
        if self.port is PortOf.DIST:
            return dist_port
        if self.port is PortOf.DIST_NEXT:
            return next_port(dist_port)
        return None


def next_port(dist_port: int) -> int:
    """The port of :attr:`PortOf.DIST_NEXT`."""
    return dist_port + 1


def behind_gate(source: str) -> Listener:
    """A gated engine's own HTTP server: on loopback at the API port, reached by its gate only."""
    return Listener(
        "engine HTTP, behind the gate", "head", Bind.LOOPBACK, PortOf.API, (Peer.POD,), source
    )


# The sockets of torch's NCCL and Gloo process groups: every engine whose ranks form one group over
# the fabric opens them, bound by the interface the fabric env names (sparkrack.fabric.ncclenv).
NCCL_BOOTSTRAP = Listener(
    "NCCL bootstrap and socket transport",
    "every",
    Bind.FABRIC,
    PortOf.RANDOM,
    (Peer.RANKS,),
    "NCCL bootstrap (NCCL_SOCKET_IFNAME)",
    chosen_by=("NCCL_SOCKET_IFNAME",),
    fallback=Bind.CLUSTER,
    interface=True,
)
GLOO = Listener(
    "gloo pairs (CPU group)",
    "every",
    Bind.FABRIC,
    PortOf.RANDOM,
    (Peer.RANKS,),
    "torch gloo backend (GLOO_SOCKET_IFNAME)",
    chosen_by=("GLOO_SOCKET_IFNAME",),
    fallback=Bind.CLUSTER,
    interface=True,
)


def address_env(listeners: tuple[Listener, ...], fabric_address: str) -> dict[str, str]:
    """The variables that make every fabric listener chosen by an address bind the rank's own
    fabric address: the first variable each reads (the one it obeys over the others)."""
    return {
        rows.chosen_by[0]: fabric_address
        for rows in listeners
        if rows.bind is Bind.FABRIC and rows.chosen_by and not rows.interface
    }


def interface_env(listeners: tuple[Listener, ...]) -> dict[str, str]:
    """Interface variables the fabric listeners need (set by :mod:`sparkrack.fabric.ncclenv`)."""
    return {
        name: contract.POD_FABRIC_IFNAME
        for rows in listeners
        if rows.bind is Bind.FABRIC and rows.interface
        for name in rows.chosen_by
    }


def bind_variables(listeners: tuple[Listener, ...]) -> dict[str, str]:
    """Every variable that chooses a listener's address -> the listener's name."""
    return {name: rows.name for rows in listeners for name in rows.chosen_by}


TABLE_BEGIN = "<!-- ports: begin (written from sparkrack/serving/engines/listeners.py) -->"
TABLE_END = "<!-- ports: end -->"


def port_table(engines: dict[str, tuple[tuple[Listener, ...], tuple[Listener, ...]]]) -> str:
    """The port table of docs/reference/ports.md: engine -> (multi-rank, single-rank) declarations."""
    rows = [
        "| engine | use | listener | ranks | binds | port | who connects | opened by |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (multi, single) in engines.items():
        for use, listeners in (("multi-rank", multi), ("single-rank", single)):
            for row in listeners:
                binds = str(row.bind)
                if row.reach:
                    binds += f", reached on {row.reach}"
                if row.chosen_by:
                    binds += f" ({', '.join(f'`{v}`' for v in row.chosen_by)})"
                port = {
                    PortOf.API: "`serving_api_port`",
                    PortOf.DIST: "`serving_dist_port`",
                    PortOf.DIST_NEXT: "`serving_dist_port` + 1",
                    PortOf.RANDOM: "random",
                }[row.port]
                peers = ", ".join(str(p) for p in row.peers)
                opens = f"{row.opens} ({row.when})" if row.when else row.opens
                rows.append(
                    f"| {name} | {use} | {row.name} | {opens} | {binds} | {port} | {peers} "
                    f"| `{row.source}` |"
                )
    return "\n".join([TABLE_BEGIN, *rows, TABLE_END])
