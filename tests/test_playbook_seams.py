"""The hardware seam of the Spark roles, the rolling agent play and the summary's `*_simulated`
collection, checked in the role files and through real ansible-playbook runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from conftest import Playbook

ROOT = Path(__file__).resolve().parent.parent
SEAM_ROLES = [
    "spark_base",
    "nvidia_driver",
    "qsfp_network",
    "roce",
    "sriov",
    "cni_plugins",
    "sparkrack_image",
]
SEAM = "hardware/{{ spark_hardware }}.yml"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _yaml_files(role: Path) -> list[Path]:
    return sorted(p for d in ("tasks", "handlers") for p in (role / d).rglob("*.yml"))


@pytest.mark.parametrize("name", SEAM_ROLES)
def test_role_switches_hardware_with_one_include(name: str) -> None:
    role = ROOT / "roles" / name
    main = _load(role / "tasks" / "main.yml")
    seams = [t for t in main if t.get("ansible.builtin.include_tasks") == SEAM]
    assert len(seams) == 1, f"{name}: tasks/main.yml must include {SEAM} once"
    for variant in ("real", "simulated"):
        assert (role / "tasks" / "hardware" / f"{variant}.yml").is_file()
    branches = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _yaml_files(role)
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"spark_hardware\s*[!=]=", line)
    ]
    assert branches == [], f"branch on spark_hardware outside the seam: {branches}"


@pytest.mark.parametrize("name", SEAM_ROLES)
def test_simulated_notes_are_role_data_published_once(name: str) -> None:
    role = ROOT / "roles" / name
    notes = _load(role / "vars" / "main.yml")
    assert list(notes) == [f"{name}_simulated_notes"]
    assert all(
        isinstance(n, str) and n.startswith(f"{name}: ") for n in notes[f"{name}_simulated_notes"]
    )
    simulated = _load(role / "tasks" / "hardware" / "simulated.yml")
    published = [
        t["ansible.builtin.set_fact"][f"{name}_simulated"]
        for t in simulated
        if f"{name}_simulated" in t.get("ansible.builtin.set_fact", {})
    ]
    assert published == [f"{{{{ {name}_simulated_notes }}}}"]
    for path in _yaml_files(role):
        assert "sparkrack_simulated" not in path.read_text(), path


def _k3s_plays() -> list[dict[str, Any]]:
    plays: list[dict[str, Any]] = _load(ROOT / "playbooks" / "k3s.yml")
    return plays


def test_agent_play_rolls_on_the_condition_the_agent_starts_on() -> None:
    agents = next(p for p in _k3s_plays() if p.get("roles") == [{"role": "k3s_agent"}])
    agent_tasks = _load(ROOT / "roles" / "k3s_agent" / "tasks" / "main.yml")
    agent_vars = _load(ROOT / "roles" / "k3s_agent" / "vars" / "main.yml")
    include = next(t for t in agent_tasks if "k3s_install_start" in t.get("vars", {}))
    starts = include["vars"]["k3s_install_start"].strip("{} ")
    # k3s_agent_server is the control plane's hostvars: spell it out as the play does
    server = agent_vars["k3s_agent_server"].strip("{} ")
    assert starts.replace("k3s_agent_server", server) in agents["serial"], (
        agents["serial"],
        starts,
    )


def _run(
    runner: Playbook, playbook: list[dict[str, Any]], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "probe.yml"
    path.write_text(yaml.safe_dump(playbook))
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "control_plane": {"hosts": {"cp1": local}},
                        "sparks": {"hosts": {f"s{i}": local for i in range(1, 5)}},
                    }
                }
            }
        )
    )
    return runner("-i", str(inventory), str(path), timeout=180)


@pytest.mark.parametrize(("token", "batch"), [(True, 1), (False, 4)])
def test_agent_play_batches(
    ansible_playbook: Playbook, tmp_path: Path, token: bool, batch: int
) -> None:
    agents = next(p for p in _k3s_plays() if p.get("roles") == [{"role": "k3s_agent"}])
    out = tmp_path / "batches"
    play = [
        {
            "name": "server",
            "hosts": "control_plane",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "token",
                    "ansible.builtin.set_fact": {"k3s_server_join_token": "t"},
                    "when": token,
                }
            ],
        },
        {
            "name": "agents",
            "hosts": "sparks",
            "gather_facts": False,
            "serial": agents["serial"],
            "tasks": [
                {
                    "name": "record the batch",
                    "ansible.builtin.shell": f"echo {{{{ ansible_play_batch | length }}}} >> {out}",
                    "run_once": True,
                    "changed_when": False,
                }
            ],
        },
    ]
    proc = _run(ansible_playbook, play, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_text().split() == [str(batch)] * (4 // batch)


def test_summary_collects_every_simulated_list(ansible_playbook: Playbook, tmp_path: Path) -> None:
    summary = _load(ROOT / "playbooks" / "summary.yml")[0]
    collect = next(
        t for t in summary["tasks"] if "summary_node" in t.get("ansible.builtin.set_fact", {})
    )
    expression = collect["ansible.builtin.set_fact"]["summary_node"]["simulated"]
    out = tmp_path / "simulated.json"
    play = [
        {
            "name": "probe",
            "hosts": "s1",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "two roles record, one unrelated var looks alike",
                    "ansible.builtin.set_fact": {
                        "sriov_simulated": ["sriov: b"],
                        "roce_simulated": ["roce: a1", "roce: a2"],
                        "roce_simulated_gid_index": 3,
                        "roce_simulated_notes": ["not published"],
                    },
                },
                {"name": "collect", "ansible.builtin.set_fact": {"collected": expression}},
                {
                    "name": "write",
                    "ansible.builtin.copy": {
                        "content": "{{ collected | to_json }}",
                        "dest": str(out),
                        "mode": "0600",
                    },
                },
            ],
        }
    ]
    proc = _run(ansible_playbook, play, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(out.read_text()) == ["roce: a1", "roce: a2", "sriov: b"]


def simulated_lists(root: Path) -> dict[str, Any]:
    """Every ``*_simulated`` set_fact and ``*_simulated_notes`` var list in the roles."""
    found: dict[str, Any] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and key.endswith(("_simulated", "_simulated_notes")):
                    found[f"{where}:{key}"] = value
                walk(value, where)
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    for path in sorted(root.rglob("*.yml")):
        walk(yaml.safe_load(path.read_text()), str(path.relative_to(root)))
    return found


def non_text_notes(found: dict[str, Any]) -> list[str]:
    return [
        f"{where}: {item!r}"
        for where, value in found.items()
        if isinstance(value, list)
        for item in value
        if not isinstance(item, str)
    ]


def test_every_simulated_note_is_one_line_of_text() -> None:
    found = simulated_lists(ROOT / "roles")
    assert len(found) >= 6 and non_text_notes(found) == []


def test_note_checker_finds_a_note_yaml_read_as_a_mapping() -> None:
    planted = yaml.safe_load("x_simulated:\n  - x: not joined\n")
    assert non_text_notes({"t:x_simulated": planted["x_simulated"]}) == [
        "t:x_simulated: {'x': 'not joined'}"
    ]


# --- the cluster roles: one seam each, one owner of k3s_api_ready ------------------------------

# The file of each cluster role that includes its seam (once per role, where the paths part).
CLUSTER_SEAMS = {
    "k3s_api": "main.yml",
    "k3s_server": "main.yml",
    "k3s_agent": "main.yml",
    "cluster_addons": "main.yml",
    "serving": "deployment.yml",
    "fabric_gate": "sweep.yml",
    "monitoring": "apply.yml",
}


def seam_includes(tasks: Any) -> int:
    """How many tasks (blocks included) include the hardware seam."""
    count = 0
    for task in tasks or []:
        if isinstance(task, dict):
            count += task.get("ansible.builtin.include_tasks") == SEAM
            count += sum(seam_includes(task.get(k)) for k in ("block", "rescue", "always"))
    return count


@pytest.mark.parametrize(("name", "where"), sorted(CLUSTER_SEAMS.items()))
def test_cluster_role_switches_hardware_in_one_place(name: str, where: str) -> None:
    role = ROOT / "roles" / name
    counts = {p.name: seam_includes(_load(p)) for p in (role / "tasks").glob("*.yml")}
    assert counts.pop(where) == 1 and sum(counts.values()) == 0, counts
    for variant in ("real", "simulated"):
        assert (role / "tasks" / "hardware" / f"{variant}.yml").is_file()
    branches = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _yaml_files(role)
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"spark_hardware\s*[!=]=", line)
    ]
    assert branches == []
    notes = _load(role / "vars" / "main.yml")[f"{name}_simulated_notes"]
    assert notes and all(isinstance(n, str) and n.startswith(f"{name}: ") for n in notes)
    simulated = _load(role / "tasks" / "hardware" / "simulated.yml")
    published = [
        t["ansible.builtin.set_fact"][f"{name}_simulated"]
        for t in simulated
        if f"{name}_simulated" in t.get("ansible.builtin.set_fact", {})
    ]
    assert published == [f"{{{{ {name}_simulated_notes }}}}"]


def api_ready_owners(files: dict[str, str]) -> list[str]:
    """Where k3s_api_ready is computed or set, and where a reader recomputes it (through the
    control plane's hostvars or a default): only the k3s_api role may compute and set it."""
    found = []
    for name, text in files.items():
        for n, line in enumerate(text.splitlines(), 1):
            sets = re.match(r"\s*k3s_api_ready:", line) and not name.startswith("roles/k3s_api/")
            recomputes = re.search(r"\]\.k3s_api_ready|k3s_api_ready \| default", line)
            if sets or recomputes:
                found.append(f"{name}:{n}: {line.strip()}")
    return found


def test_k3s_api_ready_has_one_owner() -> None:
    files = {
        str(p.relative_to(ROOT)): p.read_text()
        for p in [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/*.yml")]
    }
    assert api_ready_owners(files) == []
    probes = [f for f, text in files.items() if "name: k3s_api\n" in text and "/meta/" not in f]
    assert sorted(probes) == ["playbooks/api.yml", "roles/k3s_server/tasks/main.yml"]


def test_owner_checker_finds_a_planted_second_owner() -> None:
    planted = {
        "roles/x/tasks/main.yml": "- set_fact:\n    ready: \"{{ hostvars[groups['cp'][0]].k3s_api_ready | default(false) }}\"\n",
        "playbooks/y.yml": "    k3s_api_ready: true\n",
    }
    assert len(api_ready_owners(planted)) == 2
