"""``sparkrack check`` reads each variable from the place Ansible takes it, for every host and
for the control machine (``localhost``, where the serve play runs): a value written only in
``host_vars/localhost.yml``, in a ``group_vars/<group>/`` folder or in ``host_vars/<spark>.yml``
is checked as the play would read it. Ansible's answer comes from the real ``ansible-inventory``
of the venv, never from a copy of its precedence rules."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkrack.inputs.inventory import load_inventory
from sparkrack.inputs.variables import check_variables, closed

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"


def lab_copy(tmp_path: Path, files: dict[str, str]) -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "lab", inv)
    for name, text in files.items():
        (inv / name).parent.mkdir(parents=True, exist_ok=True)
        (inv / name).write_text("---\n" + text)
    return inv


def ansible_sees(inv: Path, host: str) -> dict[str, Any]:
    """The variables the real ansible-core gives ``host`` (the implicit localhost included)."""
    out = subprocess.run(
        [str(ANSIBLE_INVENTORY), "-i", str(inv), "--host", host],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def problems(inv: Path) -> list[tuple[str, str, str]]:
    found = check_variables(load_inventory(inv))
    return [(Path(p.file).relative_to(inv).as_posix(), p.key, p.message) for p in found.problems]


LAYERS = {
    "group_vars/sparks/main.yml": "roce_gid_index: 3\nspark_base_earlyoom: false\n",
    "host_vars/spark2.yml": "roce_gid_index: 5\n",
    "host_vars/localhost.yml": "serving_namespace: team-a\n",
}


@pytest.mark.tools  # runs the real ansible-inventory
def test_every_host_and_localhost_see_what_ansible_core_gives_them(tmp_path: Path) -> None:
    inv_dir = lab_copy(tmp_path, LAYERS)
    inv = load_inventory(inv_dir)
    views = {**inv.hostvars, "localhost": inv.control_vars or {}}
    for host, variables in views.items():
        real = ansible_sees(inv_dir, host)
        ours = {k: v for k, v in variables.items() if closed(k)}
        assert ours == {k: v for k, v in real.items() if closed(k)}, host
    # The layers Ansible ranks: host_vars over group_vars/<group> over group_vars/all.
    assert inv.hostvars["spark2"]["roce_gid_index"] == 5
    assert inv.hostvars["spark1"]["roce_gid_index"] == 3
    assert (inv.control_vars or {})["serving_namespace"] == "team-a"
    assert inv.hostvars["spark1"]["serving_namespace"] == "sparkrack"


def test_a_value_only_in_host_vars_localhost_is_checked(tmp_path: Path) -> None:
    inv = lab_copy(
        tmp_path,
        {"host_vars/localhost.yml": "serving_api_prot: 8000\nserving_namespace: kube-system\n"},
    )
    found = problems(inv)
    assert (
        "host_vars/localhost.yml",
        "serving_api_prot",
        "is not a variable sparkrack or its roles read",
    ) in found
    [namespace] = [p for p in found if p[1] == "serving_namespace" and "kube-system" in p[2]]
    assert namespace[0] == "host_vars/localhost.yml"
    # Negative control: the same inventory without the file passes (a fresh copy: ansible-core
    # caches the files it found under a path for the life of the process).
    assert problems(lab_copy(tmp_path / "without", {})) == []


def test_a_cluster_wide_value_set_for_localhost_only_is_refused(tmp_path: Path) -> None:
    inv = lab_copy(tmp_path, {"host_vars/localhost.yml": "serving_prepull_timeout: 900\n"})
    [(file, key, message)] = problems(inv)
    assert (file, key) == ("host_vars/localhost.yml", "serving_prepull_timeout")
    assert "control machine (localhost) only" in message
    # Negative control: the fix the refusal names (the value in group_vars/all) passes.
    moved = lab_copy(tmp_path / "moved", {})
    with (moved / "group_vars" / "all.yml").open("a") as all_vars:
        all_vars.write("serving_prepull_timeout: 900\n")
    assert problems(moved) == []


@pytest.mark.tools  # runs the real ansible-inventory
def test_a_host_vars_value_over_a_group_folder_is_checked_in_its_own_file(tmp_path: Path) -> None:
    """Ansible merges the layers keeping the first file's key: the value that won is checked,
    and the refusal names the file it came from."""
    inv = lab_copy(
        tmp_path,
        {
            "group_vars/sparks/main.yml": "roce_gid_index: 3\n",
            "host_vars/spark2.yml": "roce_gid_index: 300\n",
        },
    )
    assert ansible_sees(inv, "spark2")["roce_gid_index"] == 300
    [(file, key, message)] = problems(inv)
    assert (file, key) == ("host_vars/spark2.yml", "roce_gid_index")
    assert "300" in message
    fine = {
        "group_vars/sparks/main.yml": "roce_gid_index: 3\n",
        "host_vars/spark2.yml": "roce_gid_index: 4\n",
    }
    assert problems(lab_copy(tmp_path / "fine", fine)) == []  # negative control


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("host_vars/localhost.yml", "serving_watchdog_evidence_dir: /home/owner/evidence\n"),
        ("group_vars/k3s_cluster/state.yml", "serving_hf_cache: /root/hf\n"),
        ("host_vars/spark3.yml", "spark_hardware: simulated\nserving_bogus: 1\n"),
    ],
)
def test_each_place_ansible_reads_is_checked(tmp_path: Path, where: str, text: str) -> None:
    inv = lab_copy(tmp_path, {where: text})
    assert any(file == where for file, _, _ in problems(inv)), problems(inv)
