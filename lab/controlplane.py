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
the API listens on the container's own address, as K3s would on cp1. Its parts: the Go build
and the CRDs (lab/controlplane_build.py), the certificates and kubeconfigs
(lab/controlplane_pki.py), the placement and the started processes
(lab/controlplane_processes.py). Stdlib, ``cryptography`` (a dependency of ansible-core) and
PyYAML, typed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

# K3s' networks and API port as sparkrack configures them (KWOK hands out pod IPs from the pod
# network): the one owner, so the lab's API serves what the inventory check keeps the fabric from.
from sparkrack.contract import CLUSTER_CIDR, NODE_PORT_RANGE, SERVICE_CIDR

sys.path.insert(0, str(Path(__file__).resolve().parent))
# lab/ is a folder of scripts, not a package: the launcher's parts are imported from beside it.
# The names its users call (make lab, the benchmarks, the tests) are exported from here.
from controlplane_build import BINARIES, LAB_DIR, built, log, stamp_path  # noqa: E402
from controlplane_build import KUBERNETES_VERSION as KUBERNETES_VERSION  # noqa: E402
from controlplane_build import BuildUnavailable as BuildUnavailable  # noqa: E402
from controlplane_build import ControlPlaneError as ControlPlaneError  # noqa: E402
from controlplane_build import GoBinary as GoBinary  # noqa: E402
from controlplane_build import build as build  # noqa: E402
from controlplane_pki import (  # noqa: E402
    Authority,
    Issued,
    kubeconfig,
    new_key,
    pem_key,
    write_file,
)
from controlplane_processes import Placement as Placement  # noqa: E402
from controlplane_processes import Started as Started  # noqa: E402
from controlplane_processes import alive, rss_kib  # noqa: E402
from controlplane_processes import start_ticks as start_ticks  # noqa: E402

STAGES = LAB_DIR / "kwok" / "stages.yaml"

CLUSTER_DOMAIN = "cluster.local"
SA_ISSUER = f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"
MANAGED_NODES = "sparkrack.io/role"
"""KWOK manages every node carrying this label: the nodes the K3s roles register in the lab."""
KWOK_USER = "sparkrack-lab:kwok"
FRONT_PROXY_USER = "system:auth-proxy"
ADMIN_USER = "system:admin"
"""K3s' admin identity (its client-admin certificate), in the ``system:masters`` group."""


def inputs_digest() -> str:
    """What a running control plane was started from: the binaries' stamps, the KWOK stages and
    this launcher's modules. A plane started from other inputs is restarted, not reused."""
    digest = hashlib.sha256()
    launcher = sorted(Path(__file__).resolve().parent.glob("controlplane*.py"))
    for path in [*(stamp_path(b) for b in BINARIES), STAGES, *launcher]:
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
        write_file(self._record, json.dumps(data, indent=2) + "\n", 0o600)

    # --- lifecycle
    def running(self) -> bool:
        return bool(self.started) and all(alive(p) for p in self.started)

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
            if not alive(proc):
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while alive(proc) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(proc):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
            stopped.append(proc.name)
        self.started = []
        if self._record.is_file():
            self._record.unlink()
        return stopped

    def rss_mib(self) -> dict[str, float]:
        return {p.name: rss_kib(p.pid) / 1024 for p in self.started if alive(p)}

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
        ticks = start_ticks(proc.pid)
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
            dead = [p.name for p in self.started if not alive(p)]
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
            write_file(
                self.state_dir / f"{stem}.kubeconfig",
                kubeconfig(server, ca.cert_path, issued),
                0o600,
            )
        admin = Issued(self.pki / "admin.crt", self.pki / "admin.key")
        write_file(
            self.node_kubeconfig, kubeconfig(p.local_server, ca.cert_path, admin, "default"), 0o600
        )
        sa = new_key()
        write_file(self.pki / "sa.key", pem_key(sa), 0o600)
        write_file(
            self.pki / "sa.pub",
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        write_file(
            self.state_dir / "admission.yaml", json.dumps(admission_config(), indent=2) + "\n"
        )

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
                state = "running" if alive(proc) else "gone"
                log(
                    f"{proc.name:<24} pid {proc.pid:<8} {state:<8} "
                    f"{rss_kib(proc.pid) / 1024:.0f} MiB"
                )
            return 0 if plane.running() else 1
    except ControlPlaneError as exc:
        print(f"[controlplane] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
