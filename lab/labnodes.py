"""The lab's nodes: the topology read from the address plan, the Docker networks (management
and one per rail), the systemd containers with their ConnectX-7 port names, the Kubernetes control
plane (lab/controlplane.py) in the control-plane node's network namespace, and their removal by
name. Used by the lab driver (lab/lab.py); stdlib only (and lab/controlplane.py), typed.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# lab/ is a folder of scripts, not a package: its modules are imported from beside this one.
import controlplane  # noqa: E402
from labhost import (  # noqa: E402
    FABRIC_NETWORK,
    INVENTORY,
    LABEL,
    MGMT_GATEWAY,
    MGMT_NETWORK,
    MGMT_SUBNET,
    PREFIX,
    STATE_DIR,
    SYSTEMD_RUN_ARGS,
    LabError,
    docker,
    ensure_engine,
    ensure_image,
    log,
    run,
    venv_tool,
)

CONTROL_PLANE_STATE = STATE_DIR / "controlplane"
K3S_NODE_FILES = {
    "k3s.yaml": "/etc/rancher/k3s/k3s.yaml",
    "pki/ca.crt": "/var/lib/rancher/k3s/server/tls/server-ca.crt",
    "pki/admin.crt": "/var/lib/rancher/k3s/server/tls/client-admin.crt",
    "pki/admin.key": "/var/lib/rancher/k3s/server/tls/client-admin.key",
}
"""Where K3s keeps its admin kubeconfig and certificates on the server: the roles read them
there."""


# --- topology -----------------------------------------------------------------------------


def fabric_network(rail: int) -> str:
    return FABRIC_NETWORK if rail == 0 else f"{FABRIC_NETWORK}{rail}"


@dataclass(frozen=True)
class FabricPort:
    """One rail PF of a Spark: the ConnectX-7 name, its planned address and its Docker network."""

    name: str
    address: str
    network: str


@dataclass(frozen=True)
class Node:
    host: str
    mgmt_ip: str
    spark: bool
    fabric: tuple[FabricPort, ...] = ()

    @property
    def container(self) -> str:
        return PREFIX + self.host


@dataclass(frozen=True)
class RailNetwork:
    name: str
    subnet: ipaddress.IPv4Network
    gateway: str


@dataclass(frozen=True)
class Topology:
    nodes: tuple[Node, ...]
    rails: tuple[RailNetwork, ...]
    fabric_mtu: int


def load_topology() -> Topology:
    inv = json.loads(run([venv_tool("ansible-inventory"), "-i", str(INVENTORY), "--list"]).stdout)
    plan = json.loads(
        run([venv_tool("sparkrack"), "addresses", "-i", str(INVENTORY), "--json"]).stdout
    )
    hostvars: dict[str, dict[str, Any]] = inv.get("_meta", {}).get("hostvars", {})
    sparks = set(inv.get("sparks", {}).get("hosts", []))
    hosts = list(inv.get("control_plane", {}).get("hosts", [])) + [
        h for h in plan["order"] if h in sparks
    ]
    planned = {
        str(a)
        for n in plan["nodes"].values()
        for a in [*(p["address"] for p in n["ports"]), *(v["address"] for v in n["vfs"])]
    }
    rails = []
    for r, cidr in enumerate(plan["rail_subnets"]):
        subnet = ipaddress.IPv4Network(cidr)
        # Docker's bridge needs an address on each fabric network: the last host address,
        # which the plan never hands out (checked, not assumed).
        gateway = str(subnet.broadcast_address - 1)
        if gateway in planned:
            raise LabError(f"fabric gateway {gateway} collides with the address plan")
        rails.append(RailNetwork(fabric_network(r), subnet, gateway))
    nodes = []
    for host in hosts:
        mgmt = str(hostvars.get(host, {}).get("mgmt_ip", ""))
        if not mgmt or ipaddress.IPv4Address(mgmt) not in MGMT_SUBNET:
            raise LabError(
                f"{INVENTORY}/hosts.yml: {host}.mgmt_ip {mgmt!r} must lie in {MGMT_SUBNET}"
            )
        if host in sparks:
            ports = {p["name"]: p["address"] for p in plan["nodes"][host]["ports"]}
            fabric = tuple(
                FabricPort(pf, ports[pf], fabric_network(r)) for r, pf in enumerate(plan["rails"])
            )
            nodes.append(Node(host, mgmt, True, fabric))
        else:
            nodes.append(Node(host, mgmt, False))
    return Topology(tuple(nodes), tuple(rails), int(plan["mtu"]))


def _exists(kind: str, name: str) -> bool:
    return docker(kind, "inspect", name, check=False).returncode == 0


def ensure_networks(topo: Topology) -> None:
    wanted = [(MGMT_NETWORK, MGMT_SUBNET), *((r.name, r.subnet) for r in topo.rails)]
    for net, subnet in wanted:
        if _exists("network", net) and _network_subnets(net) != [str(subnet)]:
            raise LabError(
                f"network {net} exists with subnet {_network_subnets(net)}, the lab needs "
                f"{subnet}: remove it (`docker network rm {net}`) and run `make lab` again"
            )
    if not _exists("network", MGMT_NETWORK):
        log(f"network {MGMT_NETWORK} {MGMT_SUBNET}")
        docker(
            "network", "create", "--driver", "bridge", "--subnet", str(MGMT_SUBNET),
            "--gateway", MGMT_GATEWAY, "--label", f"{LABEL}=mgmt", MGMT_NETWORK,
        )  # fmt: skip
    for rail in topo.rails:
        if _exists("network", rail.name):
            continue
        log(f"network {rail.name} {rail.subnet} MTU {topo.fabric_mtu} (internal)")
        docker(
            "network", "create", "--driver", "bridge", "--internal",
            "--subnet", str(rail.subnet), "--gateway", rail.gateway,
            "-o", f"com.docker.network.driver.mtu={topo.fabric_mtu}",
            "--label", f"{LABEL}=fabric", rail.name,
        )  # fmt: skip


def _inspect(name: str) -> dict[str, Any] | None:
    result = docker("container", "inspect", name, check=False)
    if result.returncode != 0:
        return None
    data: list[dict[str, Any]] = json.loads(result.stdout)
    return data[0]


def _create_node(node: Node, tag: str) -> None:
    docker(
        "create", "--name", node.container, "--hostname", node.host,
        "--network", MGMT_NETWORK, "--ip", node.mgmt_ip,
        "--label", f"{LABEL}=node", *SYSTEMD_RUN_ARGS, tag, "/sbin/init",
    )  # fmt: skip
    for port in node.fabric:
        docker("network", "connect", "--ip", port.address, port.network, node.container)


def _exec(node: Node, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return docker("exec", node.container, *cmd, check=check)


def _rename_fabric_port(node: Node, port: FabricPort, info: dict[str, Any]) -> None:
    """Give a rail's NIC the ConnectX-7 name and hand it over bare (no address)."""
    mac = info["NetworkSettings"]["Networks"][port.network]["MacAddress"].lower()
    links = json.loads(_exec(node, "ip", "-j", "link", "show").stdout)
    current = next((ln["ifname"] for ln in links if ln.get("address", "").lower() == mac), None)
    if current is None:
        raise LabError(f"{node.container}: no interface with the {port.network} MAC {mac}")
    if current != port.name:
        _exec(node, "ip", "link", "set", "dev", current, "down")
        _exec(node, "ip", "link", "set", "dev", current, "name", port.name)
        # Docker configured the planned PF address; qsfp_network (netplan) must configure it,
        # so the lab hands over the port without an address, like a freshly installed Spark.
        _exec(node, "ip", "-4", "addr", "flush", "dev", port.name)
        log(f"{node.container}: {current} -> {port.name}")
    _exec(node, "ip", "link", "set", "dev", port.name, "up")


def _wait_booted(node: Node, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = _exec(node, "systemctl", "is-system-running", check=False).stdout.strip()
        if state in {"running", "degraded"}:
            return state
        time.sleep(1)
    raise LabError(f"{node.container}: systemd did not finish booting (state {state!r})")


def up(fresh: bool = False) -> Topology:
    ensure_engine()
    tag, _ = ensure_image()
    topo = load_topology()
    if fresh:
        down(topo)
    ensure_networks(topo)
    for node in topo.nodes:
        info = _inspect(node.container)
        if info is not None and info["Config"]["Image"] != tag:
            log(f"{node.container}: image changed, recreating")
            docker("rm", "-f", node.container)
            info = None
        if info is not None and {p.network for p in node.fabric} - set(
            info["NetworkSettings"]["Networks"]
        ):
            log(f"{node.container}: fabric.rails changed, recreating")
            docker("rm", "-f", node.container)
            info = None
        if info is None:
            log(f"create {node.container} ({node.mgmt_ip})")
            _create_node(node, tag)
        if info is None or not info["State"]["Running"]:
            docker("start", node.container)
    for node in topo.nodes:
        state = _wait_booted(node)
        if state != "running":
            failed = _exec(node, "systemctl", "--failed", "--no-legend", "--plain", check=False)
            log(f"{node.container}: systemd {state}: {failed.stdout.strip()}")
        if node.fabric:
            info = _inspect(node.container)
            assert info is not None
            for port in node.fabric:
                _rename_fabric_port(node, port, info)
    log("nodes up: " + ", ".join(f"{n.container} {n.mgmt_ip}" for n in topo.nodes))
    start_control_plane(topo)
    return topo


def _control_plane_node(topo: Topology) -> Node:
    nodes = [n for n in topo.nodes if not n.spark]
    if len(nodes) != 1:
        raise LabError(f"{INVENTORY}/hosts.yml: the lab needs exactly one control_plane host")
    return nodes[0]


def start_control_plane(topo: Topology) -> controlplane.ControlPlane:
    """The API in cp1's network namespace (kept when it already runs there), K3s' files in cp1."""
    node = _control_plane_node(topo)
    try:
        built = controlplane.build()
    except controlplane.ControlPlaneError as exc:
        raise LabError(str(exc)) from None
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / "controlplane-build.json").write_text(json.dumps(built) + "\n")
    placement = controlplane.Placement.in_container(node.container)
    plane = controlplane.ControlPlane.load(CONTROL_PLANE_STATE)
    if (
        plane.running()
        and plane.placement == placement
        and plane.inputs == controlplane.inputs_digest()
    ):
        log(f"control plane already runs in {node.container} ({placement.server})")
    else:
        try:
            seconds = plane.start(placement)
        except controlplane.ControlPlaneError as exc:
            raise LabError(str(exc)) from None
        rss = ", ".join(f"{k} {v:.0f}" for k, v in plane.rss_mib().items())
        log(f"control plane in {node.container}: {placement.server} /readyz in {seconds:.1f} s")
        log(f"control plane RSS MiB: {rss}")
        (STATE_DIR / "controlplane-start.json").write_text(
            json.dumps({"readyz_seconds": round(seconds, 1), "rss_mib": plane.rss_mib()}) + "\n"
        )
    for source, dest in K3S_NODE_FILES.items():
        _exec(node, "mkdir", "-p", "-m", "0700", str(Path(dest).parent))
        docker("cp", str(plane.state_dir / source), f"{node.container}:{dest}")
        _exec(node, "chmod", "0600", dest)
        _exec(node, "chown", "root:root", dest)
    return plane


def stop_control_plane() -> None:
    stopped = controlplane.ControlPlane.load(CONTROL_PLANE_STATE).stop()
    if stopped:
        log(f"control plane stopped: {', '.join(stopped)}")


def down(topo: Topology | None = None) -> None:
    stop_control_plane()
    topo = topo or load_topology()
    names = [n.container for n in topo.nodes]
    present = [n for n in names if _exists("container", n)]
    if present:
        log("removing " + ", ".join(present))
        docker("rm", "-f", "-v", *present)
    fabric = docker(
        "network", "ls", "--filter", f"label={LABEL}=fabric", "--format", "{{.Name}}"
    ).stdout.split()  # every rail network, also those of an earlier, larger fabric.rails
    for net in (*sorted(set(fabric) | {r.name for r in topo.rails}), MGMT_NETWORK):
        if _exists("network", net):
            log(f"removing network {net}")
            _remove_network(net)


def _remove_network(net: str, timeout: float = 10.0) -> None:
    """``docker network rm``, tolerating endpoints dockerd has not released or has leaked.

    dockerd 20.10 frees a removed container's endpoint shortly *after* ``docker rm -f`` returns,
    and it can also leak the network's persisted endpoint count: "has active endpoints" while no
    container is attached (seen in CI here; only a daemon restart clears it). The first case is
    waited out; in the second the empty network is left in place with a warning — ``up`` reuses
    it (same name, subnet checked). A network that still has containers attached is an error.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = docker("network", "rm", net, check=False)
        if result.returncode == 0:
            return
        if "active endpoints" not in result.stderr:
            raise LabError(
                f"`docker network rm {net}` failed (exit {result.returncode}): "
                f"{result.stderr.strip()}"
            )
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    attached = _network_containers(net)
    if attached:
        raise LabError(
            f"network {net} still has containers attached ({', '.join(attached)}): "
            f"remove them (docker rm -f) and run `make lab-down` again"
        )
    log(
        f"WARNING: dockerd reports a stale endpoint on the empty network {net} (a dockerd "
        f"bookkeeping leak; a daemon restart clears it). Leaving it; `make lab` reuses it."
    )


def _network_containers(net: str) -> list[str]:
    result = docker("network", "inspect", net, "--format", "{{json .Containers}}", check=False)
    if result.returncode != 0:
        return []
    containers: dict[str, dict[str, Any]] = json.loads(result.stdout or "{}") or {}
    return sorted(str(c.get("Name", cid)) for cid, c in containers.items())


def _network_subnets(net: str) -> list[str]:
    result = docker("network", "inspect", net, "--format", "{{json .IPAM.Config}}", check=False)
    if result.returncode != 0:
        return []
    config: list[dict[str, Any]] = json.loads(result.stdout or "[]") or []
    return [str(c.get("Subnet")) for c in config]
