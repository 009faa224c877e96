"""playbooks/preflight.yml through real ansible-playbook: the plan is computed by the filter plugin,
and a broken inventory is refused before any host is contacted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from hostile_inventory_corpus import owned

from sparkrack.inputs.inventory import load_inventory

if TYPE_CHECKING:
    from conftest import Playbook

ROOT = Path(__file__).resolve().parent.parent


def run_preflight(
    playbook: Playbook, inventory: Path, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "probe.yml"
    probe.write_text(
        yaml.safe_dump(
            [
                {"ansible.builtin.import_playbook": str(ROOT / "playbooks" / "preflight.yml")},
                {
                    "name": "Dump the plan",
                    "hosts": "spark3",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Write plan",
                            "ansible.builtin.copy": {
                                "content": "{{ hostvars['localhost'].sparkrack_plan | to_json }}",
                                "dest": str(tmp_path / "plan.json"),
                                "mode": "0600",
                            },
                            "delegate_to": "localhost",
                        }
                    ],
                },
            ]
        )
    )
    return playbook("-i", str(inventory), str(probe), timeout=120)


def test_preflight_plan_equals_cli_plan(ansible_playbook: Playbook, tmp_path: Path) -> None:
    inventory = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "example", inventory)
    owned(inventory)
    result = run_preflight(ansible_playbook, inventory, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    from_ansible = json.loads((tmp_path / "plan.json").read_text())
    assert from_ansible == load_inventory(inventory).plan().to_dict()
    assert from_ansible["nodes"]["spark3"]["vfs"][0]["address"] == "10.77.0.19"


def test_preflight_refuses_a_broken_fabric(ansible_playbook: Playbook, tmp_path: Path) -> None:
    inventory = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "example", inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    data = yaml.safe_load(group_vars.read_text())
    data["fabric"]["vfs_in_use"] = [0, 6]
    group_vars.write_text(yaml.safe_dump(data))
    result = run_preflight(ansible_playbook, inventory, tmp_path)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "fabric.vfs_in_use: VF index 6 is beyond the VF count (4 VFs: 0..3)" in output
    assert "fix: use a lower index or raise fabric.vf_count" in output
    assert not (tmp_path / "plan.json").exists()


def broken_copy(tmp_path: Path, **changes: object) -> Path:
    """The example inventory, its images and gateway key set (``owned``), with the control plane
    moved and/or fabric keys changed."""
    inventory = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "example", inventory)
    hosts = inventory / "hosts.yml"
    data = yaml.safe_load(hosts.read_text())
    cp = data["all"]["children"]["k3s_cluster"]["children"]["control_plane"]["hosts"]["cp1"]
    cp["ansible_host"] = changes.pop("cp_address", cp["ansible_host"])
    hosts.write_text(yaml.safe_dump(data))
    owned(inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    gv = yaml.safe_load(group_vars.read_text())
    gv["fabric"].update(changes)
    group_vars.write_text(yaml.safe_dump(gv))
    return inventory


def addresses(inventory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkrack", "addresses", "-i", str(inventory)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )


def test_preflight_and_addresses_name_the_same_inventory_gaps(
    ansible_playbook: Playbook, tmp_path: Path
) -> None:
    inventory = broken_copy(tmp_path, cp_address="10.77.0.40", gid_index=-1, mtu=1500)
    expected = [
        "cp1.ansible_host: control-plane address 10.77.0.40 lies inside the fabric subnet "
        "10.77.0.0/24",
        "fabric.gid_index: -1 is not a GID table index",
        "fabric.mtu: 1500 is below 9000",
        "fix: set fabric.mtu: 9000",
    ]
    cli = addresses(inventory)
    assert cli.returncode != 0
    for text in expected:
        assert text in cli.stdout + cli.stderr, cli.stdout + cli.stderr
    assert "Traceback" not in cli.stderr
    play = run_preflight(ansible_playbook, inventory, tmp_path)
    assert play.returncode != 0
    assert expected[0] in play.stdout + play.stderr  # the group check runs first
    fixed = run_preflight(
        ansible_playbook, broken_copy(tmp_path / "ok", cp_address="192.168.1.10"), tmp_path
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_addresses_makes_the_group_checks_preflight_makes(
    ansible_playbook: Playbook, tmp_path: Path
) -> None:
    inventory = broken_copy(tmp_path)
    hosts = inventory / "hosts.yml"
    data = yaml.safe_load(hosts.read_text())
    data["all"]["children"]["k3s_cluster"]["children"]["control_plane"]["hosts"]["cp2"] = {
        "ansible_host": "192.168.1.9"
    }
    hosts.write_text(yaml.safe_dump(data))
    cli = addresses(inventory)
    assert cli.returncode != 0
    assert (
        "control_plane: has 2 host(s) (cp1, cp2); exactly one is needed" in cli.stdout + cli.stderr
    )
    play = run_preflight(ansible_playbook, inventory, tmp_path)
    assert "exactly one is needed" in play.stdout + play.stderr
    assert addresses(ROOT / "inventories" / "example").returncode == 0


def test_preflight_runs_sparkrack_check_and_refuses_what_it_refuses(
    ansible_playbook: Playbook, tmp_path: Path
) -> None:
    """The preflight play and ``sparkrack check`` are one check: the same refusal lines, before
    any task that touches a host (the plan is never computed)."""
    inventory = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "example", inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    group_vars.write_text(
        group_vars.read_text()
        + "serving_api_port: abc\nserving_hf_cache: /etc/sparkrack\nroce_pfc_priorty: 3\n"
    )
    cli = subprocess.run(
        [sys.executable, "-m", "sparkrack", "check", "-i", str(inventory), "--no-engine-check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert cli.returncode == 1, cli.stdout + cli.stderr
    refusals = [line for line in cli.stdout.splitlines() if line.startswith(str(group_vars))]
    assert len(refusals) == 3, cli.stdout
    play = run_preflight(ansible_playbook, inventory, tmp_path)
    assert play.returncode != 0
    output = " ".join((play.stdout + play.stderr).split())
    for line in refusals:
        assert " ".join(line.split()) in output, line
    assert "Traceback" not in output and not (tmp_path / "plan.json").exists()


def test_the_play_refuses_what_only_localhost_is_given(
    ansible_playbook: Playbook, tmp_path: Path
) -> None:
    """The serve play runs on localhost: a value written in host_vars/localhost.yml alone is
    read there, so the preflight play checks it as ``sparkrack check`` does, naming that file."""
    inventory = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "lab", inventory)
    local = inventory / "host_vars" / "localhost.yml"
    local.parent.mkdir()
    local.write_text("---\nserving_namespace: kube-system\n")
    play = run_preflight(ansible_playbook, inventory, tmp_path)
    assert play.returncode != 0
    output = " ".join((play.stdout + play.stderr).split())
    assert f"{local}: serving_namespace: is kube-system, a namespace of the cluster's own" in output
    assert "Traceback" not in output and not (tmp_path / "plan.json").exists()
    # Negative control: a namespace of its own there passes (written in group_vars/all too, as
    # the refusal of a localhost-only value asks).
    fine = tmp_path / "fine"
    shutil.copytree(ROOT / "inventories" / "lab", fine)
    (fine / "host_vars").mkdir()
    (fine / "host_vars" / "localhost.yml").write_text("---\nserving_namespace: sparkrack\n")
    (tmp_path / "ok").mkdir()
    assert run_preflight(ansible_playbook, fine, tmp_path / "ok").returncode == 0
