"""playbooks/evidence.yml run by ansible-playbook: a deployment's flight-recorder dumps copied off
the Sparks into one folder, taken into the watchdog's bundle by ``diagnose --add-dumps``, and the
hang named with the right rank; a bad deployment name reads nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sparkrack import contract
from sparkrack.cli import main
from sparkrack.diagnose import bundle
from sparkrack.inputs.variable_table import contract_fact

if TYPE_CHECKING:
    import pytest
    from conftest import Playbook

ROOT = Path(__file__).resolve().parents[2]
HANGS = ROOT / "tests" / "data" / "nccl" / "captured" / "hangs"


def _play(tmp_path: Path) -> Path:
    """The play after the preflight import (the contract fact is given as preflight exports it)."""
    plays = yaml.safe_load((ROOT / "playbooks" / "evidence.yml").read_text())
    assert plays[0] == {"name": "Preflight", "ansible.builtin.import_playbook": "preflight.yml"}
    path = tmp_path / "evidence.yml"
    path.write_text(yaml.safe_dump(plays[1:]))
    return path


def _run(runner: Playbook, tmp_path: Path, root: Path, extra: dict[str, Any]) -> Any:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump({"all": {"children": {"sparks": {"hosts": {"s1": local, "s2": local}}}}})
    )
    fact = {**contract_fact(), "flight_recorder_dir": str(root)}
    variables = {"sparkrack_contract": fact, **extra}
    return runner("-i", str(inventory), str(_play(tmp_path)), "-e", json.dumps(variables))


def _spark_disk(tmp_path: Path) -> Path:
    """The hostPath as the ranks of ``alpha`` left it (both local 'Sparks' see one disk)."""
    root = tmp_path / "flight-recorder"
    where = root / "alpha"
    where.mkdir(parents=True)
    for rank in (0, 1):
        name = f"{contract.FLIGHT_RECORDER_DUMP_PREFIX}{rank}"
        (where / name).write_bytes((HANGS / "rank1_stops" / name).read_bytes())
    (where / "unrelated.txt").write_text("not a dump\n")
    (root / "beta").mkdir()
    (root / "beta" / f"{contract.FLIGHT_RECORDER_DUMP_PREFIX}7").write_bytes(b"other deployment")
    return root


def test_the_play_copies_the_dumps_and_the_bundle_names_the_silent_rank(
    ansible_playbook: Playbook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "dumps"
    done = _run(
        ansible_playbook,
        tmp_path,
        _spark_disk(tmp_path),
        {"evidence_deployment": "alpha", "evidence_dest": str(dest)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["fr_dump_rank_0", "fr_dump_rank_1"]
    logs = {p.stem: p.read_text() for p in sorted((HANGS / "rank1_stops").glob("*.log"))}
    path = bundle.write(tmp_path / "evidence", bundle.Identity("alpha"), {}, logs)
    assert main(["diagnose", "--add-dumps", str(dest), "--json", str(path)]) == 1
    group = next(r for r in json.loads(capsys.readouterr().out) if "hangs" in r)
    assert [(h["id"], h["waiting"], h["silent"]) for h in group["hangs"]] == [
        ("nccl-hang-silent-rank", [0], [1])
    ]
    assert [(d["rank"], d["last_enqueued"]) for d in group["flight_recorder"]] == [(0, 6), (1, 5)]


def test_a_name_that_climbs_out_of_the_dump_directory_reads_nothing(
    ansible_playbook: Playbook, tmp_path: Path
) -> None:
    root = _spark_disk(tmp_path)
    for name in ("../flight-recorder/beta", "Alpha", "", "a" * 40):
        dest = tmp_path / f"dumps-{len(name)}"
        done = _run(
            ansible_playbook,
            tmp_path,
            root,
            {"evidence_deployment": name, "evidence_dest": str(dest)},
        )
        assert done.returncode != 0 and "evidence_deployment" in done.stdout, name
        assert not dest.exists()
