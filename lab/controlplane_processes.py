"""Where the lab control plane runs and the processes it started: the placement (loopback or a
lab container's network namespace, with its ports) and a started process told apart from a reused
process id by its start time. Used by lab/controlplane.py; stdlib, typed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane_build import ControlPlaneError  # noqa: E402  (lab/ holds scripts, no package)

from sparkrack.contract import K3S_API_PORT  # noqa: E402


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


def start_ticks(pid: int) -> int | None:
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


def alive(proc: Started) -> bool:
    return start_ticks(proc.pid) == proc.start_ticks


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
