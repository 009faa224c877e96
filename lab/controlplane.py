#!/usr/bin/env python3
"""The lab's Kubernetes control plane: one launcher for ``make lab``, molecule and the tests.

It builds (when its inputs changed) and runs a real control plane at the Kubernetes release of
the pinned K3s, from the upstream Go modules with the ``go`` client:

* ``controlplane`` (lab/controlplane/): kube-apiserver, kube-controller-manager, kube-scheduler
  from ``k8s.io/kubernetes`` and etcd from ``go.etcd.io/etcd/server/v3/embed``, one binary;
* ``kwok`` (lab/kwok/): KWOK's controller, which plays the kubelet of every node that carries the
  ``sparkrack.io/role`` label (node heartbeats, pod lifecycle) by the stages in
  lab/kwok/stages.yaml.

What it writes under its state folder: a CA and every certificate (etcd serving and client,
API serving with the SANs the roles use, client certificates of admin in ``system:masters``,
controller-manager, scheduler and KWOK), the service-account key pair, a kubeconfig per
component, the Pod Security admission configuration, logs and the ids of the processes it
started. It starts etcd, kube-apiserver (TLS only, ``--authorization-mode=Node,RBAC``,
``--anonymous-auth=false``, NodeRestriction on top of the default admission plugins, Pod
Security admission with the restricted level as the default, as K3s' hardening guide sets it),
the controller-manager, the scheduler, grants KWOK its RBAC and starts it; waits for ``/readyz``;
and stops exactly the processes whose ids it recorded.

Two placements, one code path: on loopback in a temporary folder (the pytest fixture), or inside
the network namespace of the lab's control-plane container (``--netns-of sparkrack-cp1``), where
the API listens on the container's own address, as K3s would on cp1. Stdlib, ``cryptography``
(a dependency of ansible-core) and PyYAML, typed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# K3s' networks and API port as sparkrack configures them (KWOK hands out pod IPs from the pod
# network): the one owner, so the lab's API serves what the inventory check keeps the fabric from.
from sparkrack.contract import CLUSTER_CIDR, K3S_API_PORT, NODE_PORT_RANGE, SERVICE_CIDR

ROOT = Path(__file__).resolve().parent.parent
LAB_DIR = ROOT / "lab"
BIN_DIR = ROOT / ".cache" / "controlplane" / "bin"
CRD_DIR = ROOT / ".cache" / "controlplane" / "crds"
"""The Prometheus Operator CRDs the lab's monitoring role applies instead of the chart's."""
OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_VERSION = "v0.77.1"
"""The operator kube-prometheus-stack 65.1.1 (sparkrack/observe/stack.py) runs."""
OPERATOR_SUM = "h1:4SoJcwxgXwLTvS4S+VDmwoHnwoHeZWvMx8G0p2ymt/w="
"""go.sum hash of that module version; ``go mod download`` checks it against the checksum
database too."""
STAGES = LAB_DIR / "kwok" / "stages.yaml"

KUBERNETES_VERSION = "v1.35.3"
"""k8s.io/kubernetes in lab/controlplane/go.mod: the release of the pinned K3s (a test compares
it with ``k3s_install_version``)."""
KUBERNETES_COMMIT = "6c1cd99aef09161ddb07b8ade6c9564e9b9bfe27"
"""The commit of that tag (the module's Origin.Hash on the Go module proxy), for ``/version``."""

CLUSTER_DOMAIN = "cluster.local"
SA_ISSUER = f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"
MANAGED_NODES = "sparkrack.io/role"
"""KWOK manages every node carrying this label: the nodes the K3s roles register in the lab."""
KWOK_USER = "sparkrack-lab:kwok"
FRONT_PROXY_USER = "system:auth-proxy"
ADMIN_USER = "system:admin"
"""K3s' admin identity (its client-admin certificate), in the ``system:masters`` group."""


class ControlPlaneError(Exception):
    """The control plane could not be built, started or stopped; the message says why."""


class BuildUnavailable(ControlPlaneError):
    """No Go toolchain here: the binaries cannot be built (tests needing the API skip)."""


def log(message: str) -> None:
    print(f"[controlplane] {message}", flush=True)


# --- build --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoBinary:
    """One binary built from one of the lab's Go modules."""

    name: str
    module: Path
    package: str
    ldflags: str

    @property
    def path(self) -> Path:
        return BIN_DIR / self.name

    def inputs(self) -> list[Path]:
        return sorted([self.module / "go.mod", self.module / "go.sum", *self.module.glob("*.go")])

    def key(self, go_version: str) -> str:
        """Hash of what the binary is built from: sources, pins, flags and the toolchain."""
        digest = hashlib.sha256(f"{go_version}\n{self.package}\n{self.ldflags}\n".encode())
        for path in self.inputs():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()


def _version_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={KUBERNETES_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitCommit={KUBERNETES_COMMIT}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


BINARIES = (
    GoBinary("controlplane", LAB_DIR / "controlplane", ".", _version_ldflags()),
    GoBinary("kwok", LAB_DIR / "kwok", "sigs.k8s.io/kwok/cmd/kwok", "-s -w"),
)


def go_tool() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildUnavailable(
            "no `go` on PATH: the lab's control plane is built from Go modules — install Go "
            "1.26 (the CI machines carry it)"
        )
    return go


def _go_version(go: str) -> str:
    return subprocess.run(
        [go, "env", "GOVERSION"], check=True, capture_output=True, text=True
    ).stdout.strip()


def built() -> bool:
    """Every binary exists and was built from the current inputs (no Go needed to tell)."""
    return all(b.path.is_file() and _stamp(b).is_file() for b in BINARIES) and all(
        _stamp(b).read_text().split("\n", 1)[0] == _inputs_digest(b) for b in BINARIES
    )


def _stamp(binary: GoBinary) -> Path:
    return binary.path.with_suffix(".stamp")


def _inputs_digest(binary: GoBinary) -> str:
    return binary.key("")


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's ``=`` (value) tag."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [r for r in resolvers if r[0] != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def operator_crds(go: str) -> Path:
    """The operator's CRD manifests from its Go module (downloaded and verified by ``go``,
    compared with the pinned hash), copied to :data:`CRD_DIR`."""
    marker = CRD_DIR / ".version"
    if marker.is_file() and marker.read_text() == f"{OPERATOR_VERSION} {OPERATOR_SUM}\n":
        return CRD_DIR
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{OPERATOR_MODULE}@{OPERATOR_VERSION}"],
        capture_output=True,
        text=True,
        cwd=LAB_DIR / "controlplane",
    )
    info = json.loads(result.stdout or "{}") if result.stdout.strip() else {}
    if result.returncode != 0 or info.get("Error"):
        raise ControlPlaneError(
            f"go mod download {OPERATOR_MODULE}@{OPERATOR_VERSION} failed: "
            f"{info.get('Error') or result.stderr.strip()}"
        )
    if info.get("Sum") != OPERATOR_SUM:
        raise ControlPlaneError(
            f"{OPERATOR_MODULE}@{OPERATOR_VERSION} has hash {info.get('Sum')}, pinned "
            f"{OPERATOR_SUM}: refusing it"
        )
    source = Path(info["Dir"]) / "example" / "prometheus-operator-crd"
    shutil.rmtree(CRD_DIR, ignore_errors=True)
    CRD_DIR.mkdir(parents=True)
    for crd in sorted(source.glob("*.yaml")):
        # As JSON: YAML 1.1 loaders read a bare `=` (a label-matcher enum value) as a tag.
        data = yaml.load(crd.read_text(), Loader=_Yaml12Loader)
        _write(CRD_DIR / f"{crd.stem}.json", json.dumps(data))
    marker.write_text(f"{OPERATOR_VERSION} {OPERATOR_SUM}\n")
    return CRD_DIR


def build(force: bool = False) -> dict[str, float | None]:
    """Build each binary whose inputs or toolchain changed; seconds per binary (None: cached).

    ``-mod=readonly`` makes the build use exactly the versions go.sum pins; modules come from
    the Go module proxy through ``go`` itself and are cached in GOMODCACHE, compiled packages
    in GOCACHE.
    """
    go = go_tool()
    go_version = _go_version(go)
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    operator_crds(go)
    timings: dict[str, float | None] = {}
    for binary in BINARIES:
        key = binary.key(go_version)
        stamp = _stamp(binary)
        current = f"{_inputs_digest(binary)}\n{key}\n"
        if not force and binary.path.is_file() and stamp.is_file() and stamp.read_text() == current:
            timings[binary.name] = None
            continue
        log(f"go build {binary.name} ({binary.module.relative_to(ROOT)}, {go_version})")
        start = time.monotonic()
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
        tmp = binary.path.with_suffix(".tmp")
        result = subprocess.run(
            [go, "build", "-trimpath", "-ldflags", binary.ldflags, "-o", str(tmp), binary.package],
            cwd=binary.module,
            env=env,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ControlPlaneError(
                f"go build {binary.name} failed (exit {result.returncode}):\n"
                f"{result.stderr.strip()[-4000:]}"
            )
        tmp.replace(binary.path)
        stamp.write_text(current)
        timings[binary.name] = time.monotonic() - start
        log(f"{binary.name} built in {timings[binary.name]:.0f} s")
    return timings


# --- certificates -------------------------------------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class Authority:
    """The lab's CA: signs every serving and client certificate of one control plane."""

    def __init__(self, folder: Path, stem: str = "ca") -> None:
        self.folder = folder
        self.key = _key()
        now = dt.datetime.now(dt.UTC)
        self.name = _name(f"sparkrack-lab-{stem}")
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )  # fmt: skip
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = folder / f"{stem}.crt"
        self.key_path = folder / f"{stem}.key"
        _write(self.cert_path, self.cert.public_bytes(serialization.Encoding.PEM))
        _write(self.key_path, _pem_key(self.key), 0o600)

    def issue(
        self,
        stem: str,
        cn: str,
        *,
        org: str | None = None,
        server: bool = False,
        client: bool = False,
        dns: Iterable[str] = (),
        ips: Iterable[str] = (),
    ) -> Issued:
        key = _key()
        now = dt.datetime.now(dt.UTC)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        issued = Issued(self.folder / f"{stem}.crt", self.folder / f"{stem}.key")
        _write(issued.cert, cert.public_bytes(serialization.Encoding.PEM))
        _write(issued.key, _pem_key(key), 0o600)
        return issued


def _write(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(raw)
    os.chmod(path, mode)


def kubeconfig(server: str, ca: Path, client: Issued, name: str = "sparkrack-lab") -> str:
    """A kubeconfig with the CA and the client certificate embedded (one self-contained file)."""

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    data = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority-data": b64(ca)}}
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "client-certificate-data": b64(client.cert),
                    "client-key-data": b64(client.key),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    return json.dumps(data, indent=2) + "\n"


# --- placement and processes --------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Placement:
    """Where the processes run and which address the API answers on.

    ``advertise`` is the address clients use (and the serving certificate names); ``netns``
    the PID whose network namespace the processes join (None: this machine's namespace).
    Inside that namespace the components reach each other and etcd on 127.0.0.1.
    """

    advertise: str
    api_port: int
    etcd_port: int
    peer_port: int
    controller_manager_port: int
    scheduler_port: int
    netns_pid: int | None = None
    names: tuple[str, ...] = ()
    extra_ips: tuple[str, ...] = ()

    @classmethod
    def loopback(cls) -> Placement:
        return cls(
            advertise="127.0.0.1",
            api_port=free_port(),
            etcd_port=free_port(),
            peer_port=free_port(),
            controller_manager_port=free_port(),
            scheduler_port=free_port(),
        )

    @classmethod
    def in_container(cls, container: str) -> Placement:
        """Inside the network namespace of a running Docker container, on the K3s ports."""
        fmt = "{{.State.Pid}} {{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
        result = subprocess.run(
            ["docker", "inspect", "--format", fmt, container],
            capture_output=True,
            text=True,
        )
        words = result.stdout.split()
        if result.returncode != 0 or len(words) < 2 or words[0] == "0":
            raise ControlPlaneError(
                f"container {container} is not running (docker inspect: "
                f"{(result.stderr or result.stdout).strip()}): start the lab nodes first"
            )
        hostname = container.removeprefix("sparkrack-")
        return cls(
            advertise=words[1],
            api_port=K3S_API_PORT,
            etcd_port=2379,
            peer_port=2380,
            controller_manager_port=10257,
            scheduler_port=10259,
            netns_pid=int(words[0]),
            names=(hostname, container),
            extra_ips=tuple(words[2:]),
        )

    @property
    def server(self) -> str:
        return f"https://{self.advertise}:{self.api_port}"

    @property
    def local_server(self) -> str:
        """The API as the components (and K3s' own kubeconfig on the node) reach it."""
        return f"https://127.0.0.1:{self.api_port}"

    def prefix(self) -> list[str]:
        if self.netns_pid is None:
            return []
        return ["nsenter", f"--net=/proc/{self.netns_pid}/ns/net", "--"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "advertise": self.advertise,
            "api_port": self.api_port,
            "etcd_port": self.etcd_port,
            "peer_port": self.peer_port,
            "controller_manager_port": self.controller_manager_port,
            "scheduler_port": self.scheduler_port,
            "netns_pid": self.netns_pid,
            "names": list(self.names),
            "extra_ips": list(self.extra_ips),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Placement:
        return cls(
            **{
                **data,
                "names": tuple(data.get("names", ())),
                "extra_ips": tuple(data.get("extra_ips", ())),
            }
        )


@dataclass(frozen=True)
class Started:
    """A process this launcher started: its id and its start time (so a reused id is not ours)."""

    name: str
    pid: int
    start_ticks: int


def _start_ticks(pid: int) -> int | None:
    """The start time of a live process (None: gone, or a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)  # reap it when it is our child
        return None
    return int(fields[19])


def _alive(proc: Started) -> bool:
    return _start_ticks(proc.pid) == proc.start_ticks


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def inputs_digest() -> str:
    """What a running control plane was started from: the binaries' stamps, the KWOK stages and
    this launcher. A plane started from other inputs is restarted, not reused."""
    digest = hashlib.sha256()
    for path in [*(_stamp(b) for b in BINARIES), STAGES, Path(__file__)]:
        digest.update(path.read_bytes() if path.is_file() else b"-")
    return digest.hexdigest()[:16]


@dataclass
class ControlPlane:
    """One control plane whose files live in ``state_dir``."""

    state_dir: Path
    placement: Placement | None = None
    started: list[Started] = field(default_factory=list)
    inputs: str = ""

    # --- files
    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def admin_kubeconfig(self) -> Path:
        """The admin kubeconfig for clients on this machine (server: the advertised address)."""
        return self.state_dir / "admin.kubeconfig"

    @property
    def node_kubeconfig(self) -> Path:
        """The admin kubeconfig as K3s writes it on its node (server: https://127.0.0.1:6443)."""
        return self.state_dir / "k3s.yaml"

    @property
    def _record(self) -> Path:
        return self.state_dir / "processes.json"

    def _log(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    @classmethod
    def load(cls, state_dir: Path) -> ControlPlane:
        """The control plane recorded in ``state_dir`` (an empty one when nothing is recorded)."""
        plane = cls(state_dir)
        if plane._record.is_file():
            data = json.loads(plane._record.read_text())
            plane.placement = Placement.from_dict(data["placement"])
            plane.started = [Started(**p) for p in data["processes"]]
            plane.inputs = str(data.get("inputs", ""))
        return plane

    def _save(self) -> None:
        assert self.placement is not None
        data = {
            "placement": self.placement.to_dict(),
            "processes": [p.__dict__ for p in self.started],
            "inputs": self.inputs,
        }
        _write(self._record, json.dumps(data, indent=2) + "\n", 0o600)

    # --- lifecycle
    def running(self) -> bool:
        return bool(self.started) and all(_alive(p) for p in self.started)

    def start(self, placement: Placement, timeout: float = 60.0) -> float:
        """Write certificates and configs, start every component, wait for /readyz.

        Returns the seconds from the first process started to /readyz answering ``ok``.
        """
        if not built():
            raise ControlPlaneError(
                "the control-plane binaries are missing or stale: run `lab/controlplane.py build`"
            )
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.state_dir.mkdir(parents=True, mode=0o700)
        self.placement = placement
        self.inputs = inputs_digest()
        self._write_files()
        begin = time.monotonic()
        try:
            self._spawn("etcd", self._etcd_argv())
            self._spawn("kube-apiserver", self._apiserver_argv())
            self.wait_ready(timeout)
            self._spawn("kube-controller-manager", self._controller_manager_argv())
            self._spawn("kube-scheduler", self._scheduler_argv())
            self._grant_kwok()
            self._spawn("kwok", self._kwok_argv())
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - begin

    def stop(self, timeout: float = 10.0) -> list[str]:
        """Stop the processes this launcher recorded, newest first (KWOK, the scheduler and the
        controller-manager before the API server, etcd last), each with SIGTERM and, after
        ``timeout``, SIGKILL; return their names."""
        stopped = []
        for proc in reversed(self.started):
            if not _alive(proc):
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _alive(proc) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(proc):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
            stopped.append(proc.name)
        self.started = []
        if self._record.is_file():
            self._record.unlink()
        return stopped

    def rss_mib(self) -> dict[str, float]:
        return {p.name: _rss_kib(p.pid) / 1024 for p in self.started if _alive(p)}

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.placement is not None
        logfile = self._log(name)
        logfile.parent.mkdir(parents=True, exist_ok=True)
        with logfile.open("ab") as out:
            proc = subprocess.Popen(
                [*self.placement.prefix(), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.state_dir,
            )
        ticks = _start_ticks(proc.pid)
        if ticks is None:
            raise ControlPlaneError(f"{name} exited at once; see {logfile}")
        self.started.append(Started(name, proc.pid, ticks))
        self._save()

    # --- readiness and the API
    def _ssl(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One authenticated API request as the admin; the decoded JSON (or text) answer."""
        assert self.placement is not None
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.placement.server + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(req, context=self._ssl(), timeout=10) as resp:
            raw = resp.read().decode()
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            dead = [p.name for p in self.started if not _alive(p)]
            if dead:
                raise ControlPlaneError(
                    f"{', '.join(dead)} exited; see {self.state_dir / 'logs'}: "
                    + self._tail(dead[0])
                )
            try:
                if self.request("GET", "/readyz") == "ok":
                    return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise ControlPlaneError(
            f"/readyz did not answer ok within {timeout:.0f} s ({last}); see "
            f"{self.state_dir / 'logs'}"
        )

    def _tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self._log(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _grant_kwok(self) -> None:
        """The RBAC KWOK needs to play the kubelet: node and pod status, deletion, leases."""
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": KWOK_USER},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "pods"],
                    "verbs": ["get", "list", "watch", "update", "patch", "delete"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["nodes/status", "pods/status"],
                    "verbs": ["update", "patch"],
                },
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch"],
                },
            ],
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": KWOK_USER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": KWOK_USER,
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KWOK_USER}
            ],
        }
        base = "/apis/rbac.authorization.k8s.io/v1"
        self.request("POST", f"{base}/clusterroles", role)
        self.request("POST", f"{base}/clusterrolebindings", binding)

    # --- configuration
    def _write_files(self) -> None:
        assert self.placement is not None
        p = self.placement
        ca = Authority(self.pki)
        service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
        ca.issue("etcd-server", "etcd", server=True, dns=["localhost"], ips=["127.0.0.1"])
        ca.issue("etcd-client", "kube-apiserver-etcd-client", client=True)
        dns = [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
            "localhost",
            *p.names,
        ]
        ips = sorted({"127.0.0.1", p.advertise, service_ip, *p.extra_ips})
        ca.issue("apiserver", "kube-apiserver", server=True, dns=dns, ips=ips)
        # The aggregation layer's request-header authentication, as K3s sets it up: its own CA
        # and the client certificate the API server presents to extension API servers.
        front = Authority(self.pki, "front-proxy-ca")
        front.issue("front-proxy-client", FRONT_PROXY_USER, client=True)
        users = {
            "admin": (ADMIN_USER, "system:masters"),
            "controller-manager": ("system:kube-controller-manager", None),
            "scheduler": ("system:kube-scheduler", None),
            "kwok": (KWOK_USER, None),
        }
        for stem, (cn, org) in users.items():
            issued = ca.issue(stem, cn, org=org, client=True)
            server = p.server if stem == "admin" else p.local_server
            _write(
                self.state_dir / f"{stem}.kubeconfig",
                kubeconfig(server, ca.cert_path, issued),
                0o600,
            )
        admin = Issued(self.pki / "admin.crt", self.pki / "admin.key")
        _write(
            self.node_kubeconfig, kubeconfig(p.local_server, ca.cert_path, admin, "default"), 0o600
        )
        sa = _key()
        _write(self.pki / "sa.key", _pem_key(sa), 0o600)
        _write(
            self.pki / "sa.pub",
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        _write(self.state_dir / "admission.yaml", json.dumps(admission_config(), indent=2) + "\n")

    def _bin(self) -> str:
        return str(BINARIES[0].path)

    def _etcd_argv(self) -> list[str]:
        assert self.placement is not None
        p, pki = self.placement, self.pki
        return [
            self._bin(), "etcd",
            "--data-dir", str(self.state_dir / "etcd"),
            "--listen-client", f"https://127.0.0.1:{p.etcd_port}",
            "--listen-peer", f"http://127.0.0.1:{p.peer_port}",
            "--cert", str(pki / "etcd-server.crt"),
            "--key", str(pki / "etcd-server.key"),
            "--ca", str(pki / "ca.crt"),
        ]  # fmt: skip

    def _apiserver_argv(self) -> list[str]:
        assert self.placement is not None
        p, pki = self.placement, self.pki
        return [
            self._bin(), "kube-apiserver",
            f"--advertise-address={p.advertise}",
            "--bind-address=0.0.0.0" if p.netns_pid else f"--bind-address={p.advertise}",
            f"--secure-port={p.api_port}",
            f"--etcd-servers=https://127.0.0.1:{p.etcd_port}",
            f"--etcd-cafile={pki / 'ca.crt'}",
            f"--etcd-certfile={pki / 'etcd-client.crt'}",
            f"--etcd-keyfile={pki / 'etcd-client.key'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--anonymous-auth=false",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--admission-control-config-file={self.state_dir / 'admission.yaml'}",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-node-port-range={NODE_PORT_RANGE[0]}-{NODE_PORT_RANGE[1]}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--api-audiences={SA_ISSUER},k3s",
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_USER}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--profiling=false",
            f"--cert-dir={self.state_dir / 'apiserver-certs'}",
            # The kubernetes Service cannot point at a loopback address: on loopback (tests)
            # the endpoint reconciler is off; in the lab it publishes the node's address.
            *([] if p.netns_pid else ["--endpoint-reconciler-type=none"]),
        ]  # fmt: skip

    def _controller_manager_argv(self) -> list[str]:
        assert self.placement is not None
        p, pki, kc = self.placement, self.pki, str(self.state_dir / "controller-manager.kubeconfig")
        return [
            self._bin(), "kube-controller-manager",
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={p.controller_manager_port}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--use-service-account-credentials=true",
            "--allocate-node-cidrs=true",
            f"--cluster-cidr={CLUSTER_CIDR}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--leader-elect=false",
            "--profiling=false",
            f"--cert-dir={self.state_dir / 'controller-manager-certs'}",
        ]  # fmt: skip

    def _scheduler_argv(self) -> list[str]:
        assert self.placement is not None
        p, kc = self.placement, str(self.state_dir / "scheduler.kubeconfig")
        return [
            self._bin(), "kube-scheduler",
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={p.scheduler_port}",
            "--leader-elect=false",
            "--profiling=false",
            f"--cert-dir={self.state_dir / 'scheduler-certs'}",
        ]  # fmt: skip

    def _kwok_argv(self) -> list[str]:
        assert self.placement is not None
        return [
            str(BINARIES[1].path),
            f"--kubeconfig={self.state_dir / 'kwok.kubeconfig'}",
            f"--config={STAGES}",
            f"--manage-nodes-with-label-selector={MANAGED_NODES}",
            f"--cidr={CLUSTER_CIDR}",
            "--node-lease-duration-seconds=40",
        ]


def admission_config() -> dict[str, Any]:
    """Pod Security admission as the K3s server of a real cluster gets it (sparkrack.k3s.config,
    K3s' hardening guide): restricted unless a namespace says otherwise, kube-system exempt."""
    from sparkrack.k3s.config import pod_security_config

    return pod_security_config()


# --- command line -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lab/controlplane.py", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build_p = sub.add_parser("build", help="build the binaries unless they are up to date")
    build_p.add_argument("--force", action="store_true")
    start_p = sub.add_parser("start", help="build if needed, start, wait for /readyz")
    start_p.add_argument("--state", type=Path, required=True, help="state folder (recreated)")
    start_p.add_argument("--netns-of", metavar="CONTAINER", help="run in this container's netns")
    stop_p = sub.add_parser("stop", help="stop the processes recorded in the state folder")
    stop_p.add_argument("--state", type=Path, required=True)
    status_p = sub.add_parser("status", help="processes, their memory and /readyz")
    status_p.add_argument("--state", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            timings = build(force=args.force)
            for name, seconds in timings.items():
                log(f"{name}: {'up to date' if seconds is None else f'built in {seconds:.0f} s'}")
        elif args.command == "start":
            build()
            placement = (
                Placement.in_container(args.netns_of) if args.netns_of else Placement.loopback()
            )
            plane = ControlPlane(args.state.resolve())
            seconds = plane.start(placement)
            rss = plane.rss_mib()
            log(
                f"API {placement.server} ready in {seconds:.1f} s; kubeconfig {plane.admin_kubeconfig}"
            )
            log("RSS MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in rss.items()))
        elif args.command == "stop":
            stopped = ControlPlane.load(args.state.resolve()).stop()
            log(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
        elif args.command == "status":
            plane = ControlPlane.load(args.state.resolve())
            if not plane.started:
                log("nothing recorded")
                return 1
            for proc in plane.started:
                state = "running" if _alive(proc) else "gone"
                log(
                    f"{proc.name:<24} pid {proc.pid:<8} {state:<8} {_rss_kib(proc.pid) / 1024:.0f} MiB"
                )
            return 0 if plane.running() else 1
    except ControlPlaneError as exc:
        print(f"[controlplane] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
