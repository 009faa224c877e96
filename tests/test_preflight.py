"""playbooks/preflight.yml through real ansible-playbook: the plan is computed by the filter plugin,
and a broken inventory is refused before any host is contacted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from sparkrack.inventory import load_inventory

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run_preflight(inventory: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
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
                                "content": "{{ sparkrack_plan | to_json }}",
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
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_FILTER_PLUGINS": str(ROOT / "filter_plugins"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
    }
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(probe)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_preflight_plan_equals_cli_plan(tmp_path: Path) -> None:
    inventory = ROOT / "inventories" / "example"
    result = run_preflight(inventory, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    from_ansible = json.loads((tmp_path / "plan.json").read_text())
    assert from_ansible == load_inventory(inventory).plan().to_dict()
    assert from_ansible["nodes"]["spark3"]["vfs"][0]["address"] == "10.77.0.19"


def test_preflight_refuses_a_broken_fabric(tmp_path: Path) -> None:
    inventory = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "example", inventory)
    group_vars = inventory / "group_vars" / "all.yml"
    data = yaml.safe_load(group_vars.read_text())
    data["fabric"]["vfs_in_use"] = [0, 6]
    group_vars.write_text(yaml.safe_dump(data))
    result = run_preflight(inventory, tmp_path)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "fabric.vfs_in_use: VF index 6 is beyond the VF count (4 VFs: 0..3)" in output
    assert "fix: use a lower index or raise fabric.vf_count" in output
    assert not (tmp_path / "plan.json").exists()
