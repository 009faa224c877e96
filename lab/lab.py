#!/usr/bin/env python3
"""The sparkrack container lab: five systemd containers that stand in for a real cluster.

One driver for everything that touches Docker (``make lab``, ``make lab-down`` and molecule's
create/destroy all call this file; callers serialize on ``flock /tmp/sparkrack-lab.lock``):

* ``engine``   ensure a Docker engine (install Debian's docker.io if absent, start dockerd if it
               is not running; an engine that already runs is left alone);
* ``image``    build the node image from scratch (mmdebstrap -> docker import), tagged with the
               hash of its recipe (lab/image/*) so it is rebuilt only when the recipe changes;
* ``up``       networks + nodes: ``sparkrack-<host>`` for every host of inventories/lab on the
               management network, and on the Sparks one fabric network per rail
               (``fabric.rails``, each in its own planned network), its NIC renamed to the real
               ConnectX-7 port name and attached with the planned PF address; then the
               Kubernetes control plane (lab/controlplane.py) in the control-plane node's
               network namespace, with K3s' admin kubeconfig and certificates written into it;
* ``converge`` build the sparkrack image (lab/sparkimage.py, cached by the hash of its inputs)
               and write its archive, then run site.yml with ``serving_image_archive`` set to it,
               run it again and fail unless the rerun reports changed=0. The serve play's import
               play copies the archive onto every node; **the import into containerd is a
               stand-in** (no containerd in a lab node: the node's copy is checked by sha256);
* ``lab``      all of the above plus the rank rehearsal, a per-node summary and the converge/rerun
               wall times;
* ``rehearse`` the rank-connectivity rehearsal (sparkrack/serving/rehearsal) in the running lab:
               each multi-rank deployment's ranks run SGLang's own dist-init and broadcaster in
               their Sparks' network namespaces, behind the kube-router stand-in;
* ``molecule before|after`` molecule's steps around ``make lab`` (``make molecule``), each one's
               wall time printed;
* ``down``     stop the control plane, remove the containers and networks above, by name.

Addresses come from the address plan (``sparkrack addresses --json``); nothing here
computes a fabric address. Stdlib only (and lab/controlplane.py; the rehearsal imports
sparkrack), typed.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import controlplane  # noqa: E402  (lab/ is a folder of scripts, not a package)

from sparkrack.bench import measurements  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LAB_DIR = ROOT / "lab"
IMAGE_DIR = LAB_DIR / "image"
STATE_DIR = LAB_DIR / ".state"
INVENTORY = ROOT / "inventories" / "lab"
VENV_BIN = ROOT / ".venv" / "bin"

PREFIX = "sparkrack-"
IMAGE_REPO = "sparkrack-node"
SUITE = "bookworm"
# Bump when the build procedure below changes in a way the recipe files do not show.
RECIPE_VERSION = "1"
MGMT_NETWORK = "sparkrack-mgmt"
MGMT_SUBNET = ipaddress.IPv4Network("172.28.250.0/24")
MGMT_GATEWAY = "172.28.250.1"
FABRIC_NETWORK = "sparkrack-fabric"
"""Docker network standing in for the first rail; rail r > 0 uses ``sparkrack-fabric<r>``."""
LABEL = "io.sparkrack.lab"
CONTROL_PLANE_STATE = STATE_DIR / "controlplane"
K3S_NODE_FILES = {
    "k3s.yaml": "/etc/rancher/k3s/k3s.yaml",
    "pki/ca.crt": "/var/lib/rancher/k3s/server/tls/server-ca.crt",
    "pki/admin.crt": "/var/lib/rancher/k3s/server/tls/client-admin.crt",
    "pki/admin.key": "/var/lib/rancher/k3s/server/tls/client-admin.key",
}
"""Where K3s keeps its admin kubeconfig and certificates on the server: the roles read them there."""
DOCKERD_LOG = Path("/var/log/sparkrack-dockerd.log")
DOCKER_SOCKET = Path("/var/run/docker.sock")

# How a systemd container boots on this kind of machine (no --privileged: the engine lacks
# CAP_SYS_RESOURCE). /sys and /proc/sys stay read-only: a container must never write a
# kernel-global sysctl of the machine that runs the lab.
SYSTEMD_RUN_ARGS = [
    "--cap-add",
    "SYS_ADMIN",
    "--cap-add",
    "NET_ADMIN",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--cgroupns=host",
    "--stop-signal",
    "SIGRTMIN+3",
    "-e",
    "container=docker",
]


class LabError(Exception):
    """A lab step failed; the message says which and what to do."""


def log(message: str) -> None:
    print(f"[lab] {message}", flush=True)


def run(
    cmd: Sequence[str],
    *,
    check: bool = True,
    capture: bool = True,
    env: dict[str, str] | None = None,
    stdin: Any = None,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(cmd),
        check=False,
        text=True,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        capture_output=capture,
        env=env,
        cwd=ROOT,
    )
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip() if capture else ""
        raise LabError(f"`{' '.join(cmd)}` failed (exit {result.returncode}): {detail}")
    return result


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["docker", *args], check=check)


# --- engine -------------------------------------------------------------------------------


def _apt_install(packages: list[str], updated: list[bool]) -> None:
    if os.geteuid() != 0:
        raise LabError(f"{' '.join(packages)} missing and not root: install them (apt-get install)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not updated[0]:
        log("apt-get update")
        run(["apt-get", "update", "-q"], env=env)
        updated[0] = True
    log(f"apt-get install {' '.join(packages)}")
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], env=env)


def _engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return docker("version", "--format", "{{.Server.Version}}", check=False).returncode == 0


_APT_UPDATED = [False]


def ensure_engine() -> None:
    """Use a running engine as is; else install Debian's docker.io if absent and start dockerd."""
    if _engine_answers():
        version = docker("version", "--format", "{{.Server.Version}}").stdout.strip()
        log(f"docker engine {version} is running (left as is)")
        return
    if shutil.which("docker") is None or shutil.which("dockerd") is None:
        _apt_install(["docker.io"], _APT_UPDATED)
    log(f"starting dockerd (log: {DOCKERD_LOG})")
    with DOCKERD_LOG.open("ab") as out:
        subprocess.Popen(
            ["dockerd"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if DOCKER_SOCKET.exists() and _engine_answers():
            log("dockerd is up")
            return
        time.sleep(1)
    raise LabError(f"dockerd did not answer within 90 s; see {DOCKERD_LOG}")


# --- image --------------------------------------------------------------------------------


def apt_sources() -> list[Path]:
    """The machine's own Debian sources (deb822 or one-line), used as the image's mirror."""
    base = Path("/etc/apt")
    found = [p for p in [base / "sources.list"] if p.is_file() and _has_entries(p)]
    found += sorted(
        p
        for p in (base / "sources.list.d").glob("*")
        if p.suffix in {".list", ".sources"} and p.is_file() and _has_entries(p)
    )
    return found


def _has_entries(path: Path) -> bool:
    text = path.read_text(encoding="utf-8", errors="replace")
    return any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines())


def packages() -> list[str]:
    lines = (IMAGE_DIR / "packages.txt").read_text(encoding="utf-8").splitlines()
    return [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]


def recipe_hash() -> str:
    digest = hashlib.sha256()
    digest.update(f"{SUITE}\n{RECIPE_VERSION}\n".encode())
    for path in [IMAGE_DIR / "packages.txt", IMAGE_DIR / "customize.sh", *apt_sources()]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def image_tag() -> str:
    return f"{IMAGE_REPO}:{recipe_hash()}"


def ensure_image() -> tuple[str, float | None]:
    """Return (tag, build seconds or None when the cached image was used)."""
    tag = image_tag()
    if docker("image", "inspect", tag, check=False).returncode == 0:
        log(f"image {tag} is cached (recipe unchanged)")
        return tag, None
    if shutil.which("mmdebstrap") is None:
        _apt_install(["mmdebstrap"], _APT_UPDATED)
    sources = apt_sources()
    if not sources:
        raise LabError("no apt sources in /etc/apt/sources.list*: configure a Debian mirror")
    log(
        f"building image {tag} with mmdebstrap ({SUITE}, mirror from {', '.join(map(str, sources))})"
    )
    start = time.monotonic()
    mm = [
        "mmdebstrap",
        "--variant=minbase",
        "--mode=root",
        "--format=tar",
        "--include=" + ",".join(packages()),
        "--skip=cleanup/apt/lists",
        f"--customize-hook=upload {IMAGE_DIR / 'customize.sh'} /tmp/sparkrack-customize.sh",
        '--customize-hook=chroot "$1" /bin/sh /tmp/sparkrack-customize.sh',
        '--customize-hook=rm -f "$1/tmp/sparkrack-customize.sh"',
        SUITE,
        "-",
        *map(str, sources),
    ]
    importer = [
        "docker",
        "import",
        "--change",
        'CMD ["/sbin/init"]',
        "--change",
        "ENV container=docker",
        "--change",
        f"LABEL {LABEL}=image {LABEL}.recipe={recipe_hash()}",
        "-",
        tag,
    ]
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    build_log = STATE_DIR / "image-build.log"
    with build_log.open("w") as errlog:
        producer = subprocess.Popen(mm, stdout=subprocess.PIPE, stderr=errlog, cwd=ROOT)
        consumer = subprocess.run(importer, stdin=producer.stdout, capture_output=True, text=True)
        assert producer.stdout is not None
        producer.stdout.close()
        producer.wait()
    if producer.returncode != 0 or consumer.returncode != 0:
        docker("image", "rm", "-f", tag, check=False)
        raise LabError(
            f"image build failed (mmdebstrap exit {producer.returncode}, docker import exit "
            f"{consumer.returncode}: {consumer.stderr.strip()}); see {build_log}"
        )
    seconds = time.monotonic() - start
    log(f"image {tag} built in {seconds:.0f} s")
    # Older builds of the lab image are superseded; remove them unless a container uses them.
    for line in docker(
        "image", "ls", IMAGE_REPO, "--format", "{{.Repository}}:{{.Tag}}"
    ).stdout.split():
        if line != tag:
            docker("image", "rm", line, check=False)
    return tag, seconds


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


def _venv_tool(name: str) -> str:
    tool = VENV_BIN / name
    return str(tool) if tool.exists() else name


def load_topology() -> Topology:
    inv = json.loads(run([_venv_tool("ansible-inventory"), "-i", str(INVENTORY), "--list"]).stdout)
    plan = json.loads(
        run([_venv_tool("sparkrack"), "addresses", "-i", str(INVENTORY), "--json"]).stdout
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


# --- converge -----------------------------------------------------------------------------

FACT_CACHE = STATE_DIR / "facts"
"""Facts gathered by the converge, reused by its rerun (emptied at the start of each converge)."""
FACT_CACHE_ENV = {
    "ANSIBLE_GATHERING": "smart",
    "ANSIBLE_CACHE_PLUGIN": "jsonfile",
    "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(FACT_CACHE),
    "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "3600",
}

_RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")


def playbook(
    extra: Sequence[str], logfile: Path, playbooks: Sequence[str] = ("site.yml",)
) -> tuple[float, dict[str, dict[str, int]]]:
    """Run site.yml (or the given playbooks) against the lab; return wall seconds and the recap."""
    cmd = [_venv_tool("ansible-playbook"), *playbooks, "-i", str(INVENTORY), *extra]
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0"}
    env.update(FACT_CACHE_ENV)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    start = time.monotonic()
    recap: dict[str, dict[str, int]] = {}
    with logfile.open("w") as out:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            out.write(line)
            match = _RECAP.match(line.strip())
            if match:
                host, ok, changed, unreachable, failed = match.groups()
                recap[host] = {
                    "ok": int(ok),
                    "changed": int(changed),
                    "unreachable": int(unreachable),
                    "failed": int(failed),
                }
        proc.wait()
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise LabError(f"ansible-playbook site.yml failed (exit {proc.returncode}); log: {logfile}")
    return seconds, recap


IMAGE_ARCHIVE_GLOB = "sparkrack-image-*.tar"


def image_archive() -> tuple[Path, float]:
    """The sparkrack image of this checkout as the archive the serve play imports, and the
    seconds it took. Built by lab/sparkimage.py over the node image; the archive is named by the
    image's tag (the hash of its inputs), so an unchanged checkout reuses both."""
    import sparkimage

    start = time.monotonic()
    try:
        tag, _ = sparkimage.build(ensure_image()[0], log)
    except sparkimage.ImageError as exc:
        raise LabError(str(exc)) from exc
    path = STATE_DIR / IMAGE_ARCHIVE_GLOB.replace("*", tag.rsplit(":", 1)[1])
    if path.is_file():
        log(f"image archive: {path.name} (cached, image {tag})")
    else:
        for old in STATE_DIR.glob(IMAGE_ARCHIVE_GLOB):
            old.unlink()
        partial = path.with_suffix(".partial")
        try:
            reference = sparkimage.save(tag, partial)
        except sparkimage.ImageError as exc:
            raise LabError(str(exc)) from exc
        partial.rename(path)
        log(f"image archive: {path.name} ({reference})")
    log(
        "image import: STAND-IN: the serve play copies the archive into every node's K3s airgap "
        "image directory and compares its sha256; no containerd runs in a lab node, so "
        "`k3s ctr images import` is not run"
    )
    return path, time.monotonic() - start


def converge(playbooks: Sequence[str] = ("site.yml",)) -> dict[str, Any]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    summary_file = STATE_DIR / "summary.json"
    archive, image_s = image_archive()
    extra = [
        "-e",
        f"sparkrack_summary_file={summary_file}",
        "-e",
        f"serving_image_archive={archive}",
    ]
    shutil.rmtree(FACT_CACHE, ignore_errors=True)
    log("converge: ansible-playbook site.yml -i inventories/lab (facts cached for the rerun)")
    first, _ = playbook(extra, STATE_DIR / "converge.log", playbooks)
    log("rerun: must report changed=0")
    second, recap = playbook(extra, STATE_DIR / "rerun.log", playbooks)
    changed = {h: r["changed"] for h, r in recap.items() if r["changed"]}
    result = {
        "image_seconds": round(image_s, 1),
        "converge_seconds": round(first, 1),
        "rerun_seconds": round(second, 1),
    }
    (STATE_DIR / "timings.json").write_text(json.dumps(result, indent=2) + "\n")
    if not recap:
        raise LabError("rerun printed no PLAY RECAP")
    if changed:
        raise LabError(f"rerun is not idempotent: changed tasks per host {changed}")
    return result


def print_summary() -> None:
    """Per node: addresses and units; then each simulated item once, with the nodes it applies to."""
    path = STATE_DIR / "summary.json"
    if not path.exists():
        log(f"no summary ({path} missing)")
        return
    data: dict[str, dict[str, Any]] = json.loads(path.read_text())
    print("\n== sparkrack lab summary ==")
    simulated: dict[str, list[str]] = {}
    for host, info in data.items():
        print(f"{host}  ({', '.join(info.get('groups', []))})")
        print(f"  mgmt        {info.get('mgmt_ip', '-')}")
        for line in info.get("addresses", []):
            print(f"  address     {line}")
        units = info.get("units", [])
        print(f"  units       {', '.join(units) if units else '-'}")
        for item in info.get("simulated", []):
            simulated.setdefault(item, []).append(host)
    print(
        f"\n== simulated (not done in the lab; docs/dev/lab.md: What the lab does not prove): {len(simulated)} =="
    )
    for item, hosts in simulated.items():
        print(f"  [{','.join(hosts)}] {item}")


def timing_rows(result: dict[str, Any], build: float | None) -> list[tuple[str, str]]:
    """What ``make lab`` measured, one (what, figure) pair per line of its timings."""
    conv, rerun = result["converge_seconds"], result["rerun_seconds"]
    ratio = 100 * rerun / conv if conv else 0.0
    rows = [("image build", "cached" if build is None else f"{build:.0f} s")]
    if "image_seconds" in result:
        rows.append(
            (
                "sparkrack image",
                f"{result['image_seconds']} s (build + archive; cached by input hash)",
            )
        )
    built_file, start_file = (
        STATE_DIR / "controlplane-build.json",
        STATE_DIR / "controlplane-start.json",
    )
    if built_file.is_file():
        built: dict[str, float | None] = json.loads(built_file.read_text())
        rows.append(
            (
                "control plane",
                ", ".join(
                    f"{k} {'cached' if v is None else f'built in {v:.0f} s'}"
                    for k, v in built.items()
                ),
            )
        )
    if start_file.is_file():
        started: dict[str, Any] = json.loads(start_file.read_text())
        rows.append(
            ("control plane", f"/readyz {started['readyz_seconds']} s after start (goal <= 20 s)")
        )
    rss = controlplane.ControlPlane.load(CONTROL_PLANE_STATE).rss_mib()
    if rss:
        rows.append(
            (
                "control plane",
                "RSS now "
                + ", ".join(f"{k} {v:.0f}" for k, v in rss.items())
                + f" = {sum(rss.values()):.0f} MiB",
            )
        )
    rows.append(("converge", f"{conv:.1f} s  (goal <= 240 s)"))
    rows.append(
        (
            "idempotent rerun",
            f"{rerun:.1f} s  ({ratio:.0f} % of converge; changed=0, cluster tasks included)",
        )
    )
    return rows


def print_timings(result: dict[str, Any], build: float | None) -> None:
    print("\n== timings ==")
    for what, figure in timing_rows(result, build):
        print(f"{what:<16} {figure}")


def record_lab(
    before: measurements.Load,
    result: dict[str, Any],
    build: float | None,
    root: Path = measurements.ROOT,
) -> Path:
    """``make lab``'s timings and the rank rehearsal's, with the load before and after, as the
    record named ``lab`` in docs/dev/measurements/ (and the page rewritten)."""
    rows = [[what, figure] for what, figure in timing_rows(result, build)]
    rehearsal = STATE_DIR / "rehearsal.json"
    if rehearsal.is_file():
        done: dict[str, Any] = json.loads(rehearsal.read_text())
        rows.append(
            [
                "rank rehearsal",
                f"{done['seconds']} s, {done['step_seconds']} s with the render "
                f"({'passed' if done['ok'] else 'FAILED'})",
            ]
        )
    record = measurements.measured(
        "lab/lab.py", "The lab", "SPARKRACK_RECORD=1 make lab", before, ["step", "time"], rows
    )
    return measurements.write(record, "lab", root)


def rehearse_ranks(
    host_ip: str = "render", filtered: bool = True, switch: dict[str, str] | None = None
) -> dict[str, Any]:
    """The rank-connectivity rehearsal in the lab Sparks' network namespaces (see
    sparkrack/serving/rehearsal): each engine's own dist-init and broadcaster per rank, behind
    the kube-router stand-in. ``switch`` (deployment -> profile): the deployments as the
    one-line switch of their profile would run them. Uses the engine-check environment in the repository's .cache (the one
    the unit tests build), so it downloads nothing the test run did not."""
    started = time.monotonic()
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(ROOT / ".cache"))
    from sparkrack.serving.enginecheck.upstream import ensure_env
    from sparkrack.serving.rehearsal.plan import HostIp, plan_inventory
    from sparkrack.serving.rehearsal.run import rehearse

    mode: HostIp = "fabric" if host_ip == "fabric" else "unset" if host_ip == "unset" else "render"
    plan = plan_inventory(str(INVENTORY), host_ip=mode, switch=switch)
    for version in sorted({(r.engine, r.version) for r in plan.ranks}):
        ensure_env(*version)
    pids = {
        r.node: docker("inspect", "-f", "{{.State.Pid}}", PREFIX + r.node).stdout.strip()
        for r in plan.ranks
    }
    outcome = rehearse(plan, lambda node: f"/proc/{pids[node]}/ns/net", filtered=filtered, say=log)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for line in outcome.lines:
        log(f"rehearsal: {line}")
    step = round(time.monotonic() - started, 1)
    log(
        f"rehearsal: {'passed' if outcome.ok else 'FAILED'} in {outcome.seconds} s, "
        f"{step} s with the render (load {load})"
    )
    result = {
        "ok": outcome.ok,
        "seconds": outcome.seconds,
        "step_seconds": step,
        "load": load,
        "lines": outcome.lines,
    }
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / "rehearsal.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def lab() -> None:
    before = measurements.load_now()
    ensure_engine()
    _, build = ensure_image()
    up()
    result = converge()
    if not rehearse_ranks()["ok"]:
        raise LabError(f"rank rehearsal failed; see {STATE_DIR}/rehearsal.json")
    print_summary()
    print_timings(result, build)
    if RECORD:
        log(f"record: {record_lab(before, result, build)}")


# --- molecule -----------------------------------------------------------------------------

MOLECULE_BEFORE = ("destroy", "syntax", "create", "check")
"""molecule's steps before the converge: a fresh lab, site.yml --check on the new nodes."""
MOLECULE_AFTER = ("verify", "destroy")
"""molecule's steps after it: testinfra against the converged lab, then the lab removed."""
MOLECULE_TIMINGS = STATE_DIR / "molecule-timings.json"
RECORD = os.environ.get("SPARKRACK_RECORD") == "1"
"""``SPARKRACK_RECORD=1 make lab`` (or ``make molecule``) stores its figures as a measurement
record and rewrites docs/dev/measurements.md; without it the checkout stays untouched."""
MOLECULE_LOAD = STATE_DIR / "molecule-load.json"
"""The load average when ``make molecule``'s first step began."""


def molecule_steps(steps: Sequence[str]) -> None:
    """``molecule STEP`` of the default scenario for each step, each step's wall time recorded.

    ``make molecule`` runs :data:`MOLECULE_BEFORE`, then ``make lab`` itself (the converge, the
    ``changed=0`` rerun and the summary: the README's first command, exactly as an owner types
    it), then :data:`MOLECULE_AFTER`; the lab that molecule created is the one ``make lab``
    converges (``up`` keeps running nodes)."""
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0", "NO_COLOR": "1"}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env.pop("ANSIBLE_CONFIG", None)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    first = bool(steps) and steps[0] == MOLECULE_BEFORE[0]
    if not first and MOLECULE_TIMINGS.is_file():
        timings = json.loads(MOLECULE_TIMINGS.read_text())
    if first:
        MOLECULE_LOAD.write_text(json.dumps(list(measurements.load_now().average)) + "\n")
    with (STATE_DIR / "molecule.log").open("w" if first else "a") as out:
        for step in steps:
            log(f"molecule {step}")
            mark = time.monotonic()
            proc = subprocess.Popen(
                [_venv_tool("molecule"), step, "--scenario-name", "default"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=ROOT,
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                out.write(line)
            proc.wait()
            timings[step if step not in timings else f"{step} (end)"] = round(
                time.monotonic() - mark, 1
            )
            MOLECULE_TIMINGS.write_text(json.dumps(timings, indent=2) + "\n")
            if proc.returncode != 0:
                raise LabError(
                    f"molecule {step} failed (exit {proc.returncode}); log: {STATE_DIR}/molecule.log"
                )
    print("\n== molecule step wall times ==")
    for step, seconds in timings.items():
        print(f"{step:<14} {seconds:6.1f} s")
    lab_timings = STATE_DIR / "timings.json"
    if steps == list(MOLECULE_AFTER) and lab_timings.is_file():
        conv: dict[str, float] = json.loads(lab_timings.read_text())
        print(f"make lab       converge {conv['converge_seconds']} s, "
              f"rerun {conv['rerun_seconds']} s (changed=0)")  # fmt: skip
    if RECORD and steps == list(MOLECULE_AFTER):
        log(f"record: {record_molecule(timings)}")


def record_molecule(timings: dict[str, float], root: Path = measurements.ROOT) -> Path:
    """``make molecule``'s step wall times, with the load when its first step began and after
    its last, as the record named ``molecule`` in docs/dev/measurements/ (and the page rewritten)."""
    now = measurements.load_now()
    average = json.loads(MOLECULE_LOAD.read_text()) if MOLECULE_LOAD.is_file() else now.average
    before = measurements.Load((average[0], average[1], average[2]), now.cores)
    rows = [[step, f"{seconds:.1f} s"] for step, seconds in timings.items()]
    rows.append(["total", f"{sum(timings.values()):.1f} s"])
    record = measurements.measured(
        "lab/lab.py",
        "The lab",
        "SPARKRACK_RECORD=1 make molecule",
        before,
        ["molecule step", "wall time"],
        rows,
        [
            "The total is molecule's own steps; `make lab`, which `make molecule` runs between "
            "`check` and `verify`, writes its own record."
        ],
    )
    return measurements.write(record, "molecule", root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lab/lab.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("engine", help="ensure a running Docker engine")
    sub.add_parser("image", help="build the node image unless cached")
    up_p = sub.add_parser("up", help="start the lab nodes (idempotent)")
    up_p.add_argument("--fresh", action="store_true", help="remove existing lab nodes first")
    conv_p = sub.add_parser(
        "converge", help="site.yml twice; fail unless the rerun changes nothing"
    )
    conv_p.add_argument(
        "playbooks", nargs="*", default=["site.yml"], help="playbooks to run (default site.yml)"
    )
    sub.add_parser("summary", help="print the last converge summary")
    sub.add_parser("lab", help="engine + image + up + converge + summary + timings")
    mol_p = sub.add_parser(
        "molecule", help="molecule steps of the default scenario, each one's wall time printed"
    )
    mol_p.add_argument(
        "part",
        choices=("before", "after"),
        help=f"before: {' '.join(MOLECULE_BEFORE)}; after: {' '.join(MOLECULE_AFTER)}",
    )
    reh_p = sub.add_parser("rehearse", help="the rank-connectivity rehearsal in the running lab")
    reh_p.add_argument("--host-ip", choices=["render", "fabric", "unset"], default="render")
    reh_p.add_argument("--no-filter", action="store_true", help="without the kube-router stand-in")
    down_p = sub.add_parser("down", help="remove the lab containers and networks, by name")
    down_p.add_argument("--image", action="store_true", help="also remove the node image")
    args = parser.parse_args(argv)
    try:
        if args.command == "engine":
            ensure_engine()
        elif args.command == "image":
            ensure_engine()
            ensure_image()
        elif args.command == "up":
            up(fresh=args.fresh)
        elif args.command == "converge":
            result = converge(args.playbooks)
            print_summary()
            print_timings(result, None)
        elif args.command == "summary":
            print_summary()
        elif args.command == "lab":
            lab()
        elif args.command == "molecule":
            ensure_engine()
            molecule_steps(list(MOLECULE_BEFORE if args.part == "before" else MOLECULE_AFTER))
        elif args.command == "rehearse":
            if not rehearse_ranks(args.host_ip, filtered=not args.no_filter)["ok"]:
                return 1
        elif args.command == "down":
            if not _engine_answers():
                log("no docker engine answers: nothing to remove")
                return 0
            down()
            if args.image:
                for line in docker(
                    "image", "ls", IMAGE_REPO, "--format", "{{.Repository}}:{{.Tag}}"
                ).stdout.split():
                    docker("image", "rm", line, check=False)
            else:
                log(
                    f"kept the node image {image_tag()} (build cache; `lab/lab.py down --image` removes it)"
                )
    except LabError as exc:
        print(f"[lab] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
