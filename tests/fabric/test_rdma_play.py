"""The RDMA preflight's real-hardware path through ansible-playbook, with the hardware stubbed.

Two Sparks run on this machine (connection local); ``ib_write_bw`` and ``rdma`` are stand-ins
that print perftest / iproute2 output from tests/data/rdma. What runs for real: the pairing,
the bounded server/client runs, the sysfs reads, the filter and the verdict.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from conftest import Playbook

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "rdma"


def stub_tools(tmp_path: Path, client_output: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ib_write_bw").write_text(
        "#!/bin/sh\n"
        "last=''; for a in \"$@\"; do last=$a; done\n"
        'echo "$@" >> "$STUB_LOG"\n'
        'case "$last" in *.*.*.*) cat "$STUB_OUTPUT";; *) sleep 1;; esac\n'
    )
    (bin_dir / "rdma").write_text(f"#!/bin/sh\ncat {DATA / 'rdma_link.txt'}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    (tmp_path / "client.txt").write_text(client_output)
    return bin_dir


def run(playbook: Playbook, tmp_path: Path, client_output: str) -> subprocess.CompletedProcess[str]:
    bin_dir = stub_tools(tmp_path, client_output)
    inventory = tmp_path / "inv"
    (inventory / "group_vars").mkdir(parents=True)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (inventory / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "control_plane": {"hosts": {"cp1": {**local, "mgmt_ip": "192.168.1.10"}}},
                        "sparks": {
                            "hosts": {
                                "s1": {**local, "mgmt_ip": "192.168.1.11"},
                                "s2": {**local, "mgmt_ip": "192.168.1.12"},
                            }
                        },
                    }
                }
            }
        )
    )
    rails = ["enp1s0f0np0", "enP2p1s0f0np0"]
    (inventory / "group_vars" / "all.yml").write_text(
        yaml.safe_dump(
            {
                "spark_hardware": "real",
                "fabric": {"subnet": "10.77.0.0/24", "ports": rails, "rails": rails},
            }
        )
    )
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {"ansible.builtin.import_playbook": str(ROOT / "playbooks" / "preflight.yml")},
                {
                    "name": "rdma",
                    "hosts": "sparks",
                    "gather_facts": False,
                    "vars": {"sparkrack_plan": "{{ hostvars['localhost'].sparkrack_plan }}"},
                    "tasks": [
                        {
                            "name": "preflight",
                            "ansible.builtin.include_role": {
                                "name": "roce",
                                "tasks_from": "rdma_preflight",
                            },
                            "vars": {"roce_rdma_seconds": 1},
                        }
                    ],
                },
            ]
        )
    )
    return playbook(
        "-i",
        str(inventory),
        str(play),
        env={
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "STUB_OUTPUT": str(tmp_path / "client.txt"),
            "STUB_LOG": str(tmp_path / "calls.log"),
        },
        timeout=300,
    )


def test_healthy_rails_pass_and_every_rail_is_measured(
    ansible_playbook: Playbook, tmp_path: Path
) -> None:
    proc = run(ansible_playbook, tmp_path, (DATA / "write_bw_healthy.txt").read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    clients = [c for c in calls if c.split()[-1].count(".") == 3]
    # s2 is the client of s1, once per rail, against s1's PF address of that rail
    assert [(c.split()[c.split().index("-d") + 1], c.split()[-1]) for c in clients] == [
        ("rocep1s0f0", "10.77.0.1"),
        ("roceP2p1s0f0", "10.77.1.17"),
    ]
    assert all("--report_gbits" in c and "-R" in c.split() for c in calls)
    out = " ".join(proc.stdout.split())
    assert "rocep1s0f0 <-> enp1s0f0np0 (ACTIVE)" in out and "ib_write_bw 92.57 Gb/s" in out
    assert "roceP2p1s0f0 <-> enP2p1s0f0np0 (ACTIVE)" in out
    assert "changed=0" in out.split("PLAY RECAP")[1]


def test_a_degraded_rail_fails_the_preflight(ansible_playbook: Playbook, tmp_path: Path) -> None:
    proc = run(ansible_playbook, tmp_path, (DATA / "write_bw_degraded.txt").read_text())
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "RDMA preflight FAILED on s2" in out
    assert "s2 -> s1: enp1s0f0np0 (rocep1s0f0): 13.23 Gb/s is below the floor of 60 Gb/s" in out
