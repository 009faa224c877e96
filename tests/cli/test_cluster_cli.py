"""``sparkrack manifests cluster`` and ``sparkrack fabric-check`` through the real CLI entry point,
and the cluster_addons role through real ansible-playbook on the control machine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from sparkrack.cli import main
from sparkrack.k8s.validate import validate_manifests

if TYPE_CHECKING:
    from conftest import Playbook

ROOT = Path(__file__).resolve().parents[2]
NCCL = ROOT / "tests" / "data" / "nccl"


def test_manifests_cluster_prints_validated_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifests", "cluster", "-i", "inventories/example", "--fabric-check"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert validate_manifests(docs) == []
    kinds = [d["kind"] for d in docs]
    assert kinds.count("Pod") == 4 and kinds.count("NetworkAttachmentDefinition") == 1


def test_manifests_cluster_refuses_bad_inventory_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text((ROOT / "inventories/example/hosts.yml").read_text())
    group_vars = yaml.safe_load((ROOT / "inventories/example/group_vars/all.yml").read_text())
    group_vars["cluster_addons"] = {
        "multus_image": "ghcr.io/k8snetworkplumbingwg/multus-cni:latest"
    }
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars))
    assert main(["manifests", "cluster", "-i", str(inv)]) == 1
    err = capsys.readouterr().err
    assert "cluster_addons.multus_image" in err and "not a pinned image" in err


@pytest.mark.parametrize(
    ("log", "args", "code", "verdict"),
    [
        # captured from 1 MiB: the gate also asks for the sizes from 8 KiB
        ("roce_4node_allreduce.log", [], 1, "nccl-no-small-messages"),
        ("socket_fallback_unprivileged.log", [], 1, "nccl-socket-fallback"),
        (
            "socket_fallback_unprivileged.log",
            ["--requested", "socket"],
            1,
            "nccl-no-small-messages",
        ),
        ("captured/sweep/fabric-check-socket.log", ["--requested", "socket"], 0, "PASS"),
        ("captured/sweep/all_reduce_perf-socket.log", ["--requested", "socket"], 0, "PASS"),
        ("roce_4node_allreduce.log", ["--min-busbw", "30"], 1, "nccl-busbw-floor"),
    ],
)
def test_fabric_check_gate(
    log: str, args: list[str], code: int, verdict: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fabric-check", "--log", str(NCCL / log), *args]) == code
    assert verdict in capsys.readouterr().out


def test_fabric_check_missing_log(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fabric-check", "--log", "/nonexistent/nccl.log"]) == 2
    assert "--log: does not exist" in capsys.readouterr().err


def run_playbook(
    runner: Playbook, play: list[dict[str, object]], tmp_path: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    # Roles resolve relative to playbooks/. tmp_path's own name repeats across xdist workers (each
    # has its basetemp), so the worker's folder names the file too.
    path = ROOT / "playbooks" / f".test-{tmp_path.parent.name}-{tmp_path.name}.yml"
    # Like every real playbook: preflight first (it sets the sparkrack_plan fact the roles read),
    # then the fact playbooks/api.yml publishes to every host and the control machine, after the
    # preflight as on a real run: false, there is no API here.
    no_api = {
        "name": "No API here",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Publish what the k3s_api role publishes without an API",
                "ansible.builtin.set_fact": {"k3s_api_ready": False},
                "delegate_to": "{{ item }}",
                "delegate_facts": True,
                "run_once": True,
                "loop": "{{ ansible_play_hosts_all + ['localhost'] }}",
            }
        ],
    }
    preflight = {"ansible.builtin.import_playbook": "preflight.yml"}
    path.write_text(yaml.safe_dump([preflight, no_api, *play]))
    try:
        return runner(
            "-i", str(ROOT / "inventories/lab"), str(path), *extra, timeout=180,
        )  # fmt: skip
    finally:
        path.unlink()


ADDONS_PLAY: list[dict[str, object]] = [
    {
        "name": "add-ons without an API",
        "hosts": "localhost",
        "gather_facts": False,
        "roles": [{"role": "cluster_addons"}],
    }
]


FABRIC_GATE_PLAY: list[dict[str, object]] = [
    {
        "name": "fabric gate without an API",
        "hosts": "localhost",
        "gather_facts": False,
        "roles": [{"role": "fabric_gate"}],
    }
]

RDMA_PLAY: list[dict[str, object]] = yaml.safe_load("""
- name: rdma preflight in the lab
  hosts: sparks
  gather_facts: false
  vars: {sparkrack_plan: "{{ hostvars['localhost'].sparkrack_plan }}"}
  tasks:
    - name: preflight
      ansible.builtin.include_role: {name: roce, tasks_from: rdma_preflight}
""")


LAB_PLAYS = pytest.mark.xdist_group("lab-plays")
"""The tests that read :func:`lab_plays`: on one xdist worker, so the playbook runs once."""


@pytest.fixture(scope="module")
def lab_plays(
    ansible_playbook: Playbook, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """The add-ons, fabric gate and RDMA preflight plays after one preflight (one run of
    ansible-playbook, fabric_gate_transport=socket, which only the fabric gate reads): each
    play's name -> its own part of the output, from its PLAY header to the next."""
    proc = run_playbook(
        ansible_playbook,
        [*ADDONS_PLAY, *FABRIC_GATE_PLAY, *RDMA_PLAY],
        tmp_path_factory.mktemp("lab-plays"),
        "-e",
        "fabric_gate_transport=socket",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parts = re.split(r"^(?=PLAY (?:\[|RECAP))", proc.stdout, flags=re.MULTILINE)
    named = {m.group(1): part for part in parts if (m := re.match(r"PLAY \[(.*)\]", part))}
    for play in (*ADDONS_PLAY, *FABRIC_GATE_PLAY, *RDMA_PLAY):
        assert play["name"] in named, proc.stdout
    return named


@LAB_PLAYS
def test_addons_role_renders_validates_and_says_it_did_not_apply(
    lab_plays: dict[str, str],
) -> None:
    out = lab_plays["add-ons without an API"]
    assert "10 manifests rendered and validated offline" in out  # a NAD per rail
    assert "NetworkAttachmentDefinition/sparkrack-vf0" in out
    assert "NetworkAttachmentDefinition/sparkrack-rail1-vf0" in out
    assert "NOT APPLIED: k3s_api_ready is false on cp1" in out


def test_addons_role_refuses_bad_options_before_anything_is_applied(
    ansible_playbook: Playbook, tmp_path: Path
) -> None:
    proc = run_playbook(
        ansible_playbook, ADDONS_PLAY, tmp_path, "-e", '{"cluster_addons": {"gpus_per_spark": 0}}'
    )
    assert proc.returncode != 0
    assert "cluster_addons.gpus_per_spark: must be at least 1" in proc.stdout + proc.stderr
    assert "NOT APPLIED" not in proc.stdout


@LAB_PLAYS
def test_fabric_gate_play_renders_pods_and_says_it_did_not_run(lab_plays: dict[str, str]) -> None:
    out = lab_plays["fabric gate without an API"]
    assert "FABRIC GATE NOT RUN" in out
    # the lab has two rails: every rail at once, then each alone
    assert "The pods of 3 sweep(s) (all-rails, rail0, rail1) rendered" in out


@LAB_PLAYS
def test_rdma_preflight_says_not_run_in_the_lab(lab_plays: dict[str, str]) -> None:
    out = lab_plays["rdma preflight in the lab"]
    assert out.count("RDMA PREFLIGHT NOT RUN") == 1  # once, not per Spark
    assert "(enp1s0f0np0, enP2p1s0f0np0)" in " ".join(out.split())
