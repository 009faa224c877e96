"""sparkrack_files, the module that writes a role's files in one run, on a real file system: run
as Ansible runs a module (arguments in a JSON file), and once through Ansible itself."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "sparkrack" / "adapters" / "modules" / "sparkrack_files.py"

pytestmark = [
    pytest.mark.tools,  # an Ansible module as Ansible runs it
    pytest.mark.skipif(os.geteuid() != 0, reason="the module sets root ownership"),
]


def run(tmp_path: Path, check: bool = False, **args: Any) -> dict[str, Any]:
    argfile = tmp_path / "args.json"
    argfile.write_text(
        json.dumps(
            {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check, "_ansible_diff": True}}
        )
    )
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    assert (proc.returncode != 0) == bool(result.get("failed")), proc.stderr
    return result


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "etc"
    return {
        "directories": [str(root / "a.d"), str(root / "b.d")],
        "files": [
            {"dest": str(root / "a.d" / "one.conf"), "content": "one\n", "mode": "0644"},
            {"dest": str(root / "b.d" / "secret"), "content": "token\n", "mode": "0600"},
        ],
    }


def test_first_run_creates_everything_and_a_rerun_changes_nothing(
    tmp_path: Path, layout: dict[str, Any]
) -> None:
    first = run(tmp_path, **layout)
    assert first["changed"] is True
    assert first["changed_paths"] == layout["directories"] + [f["dest"] for f in layout["files"]]
    one, secret = (Path(f["dest"]) for f in layout["files"])
    assert one.read_text() == "one\n" and mode(one) == "0o644"
    assert secret.read_text() == "token\n" and mode(secret) == "0o600"
    assert mode(one.parent) == "0o755"

    again = run(tmp_path, **layout)
    assert again["changed"] is False and again["changed_paths"] == [] and again["diff"] == []


def test_only_the_file_that_differs_is_rewritten(tmp_path: Path, layout: dict[str, Any]) -> None:
    run(tmp_path, **layout)
    one, secret = (Path(f["dest"]) for f in layout["files"])
    before = secret.stat().st_ino
    layout["files"][0]["content"] = "one, edited\n"
    result = run(tmp_path, **layout)
    assert result["changed_paths"] == [str(one)]
    assert one.read_text() == "one, edited\n"
    assert secret.stat().st_ino == before
    assert result["diff"] == [
        {
            "before_header": str(one),
            "after_header": str(one),
            "before": "one\n",
            "after": "one, edited\n",
        }
    ]


def test_a_mode_or_folder_mode_that_drifted_is_put_back(
    tmp_path: Path, layout: dict[str, Any]
) -> None:
    run(tmp_path, **layout)
    secret = Path(layout["files"][1]["dest"])
    secret.chmod(0o644)
    secret.parent.chmod(0o700)
    result = run(tmp_path, **layout)
    assert result["changed_paths"] == [str(secret.parent), str(secret)]
    assert mode(secret) == "0o600" and mode(secret.parent) == "0o755"
    assert secret.read_text() == "token\n"


def test_a_symlink_at_the_destination_is_replaced_and_its_target_left_alone(
    tmp_path: Path, layout: dict[str, Any]
) -> None:
    run(tmp_path, **layout)
    secret = Path(layout["files"][1]["dest"])
    target = tmp_path / "elsewhere"
    target.write_text("token\n")
    target.chmod(0o644)
    secret.unlink()
    secret.symlink_to(target)
    result = run(tmp_path, **layout)
    assert result["changed_paths"] == [str(secret)]
    assert not secret.is_symlink() and mode(secret) == "0o600"
    assert target.read_text() == "token\n" and mode(target) == "0o644"


def test_check_mode_reports_and_writes_nothing(tmp_path: Path, layout: dict[str, Any]) -> None:
    result = run(tmp_path, check=True, **layout)
    assert result["changed"] is True
    assert result["changed_paths"] == layout["directories"] + [f["dest"] for f in layout["files"]]
    assert not (tmp_path / "etc").exists()

    run(tmp_path, **layout)
    layout["files"][0]["content"] = "changed\n"
    result = run(tmp_path, check=True, **layout)
    assert result["changed_paths"] == [layout["files"][0]["dest"]]
    assert Path(layout["files"][0]["dest"]).read_text() == "one\n"


def test_validate_sees_the_new_content_and_a_refusal_keeps_the_old_file(tmp_path: Path) -> None:
    folder = tmp_path / "netplan"
    dest = folder / "fabric.yaml"
    checker = f"{sys.executable} -c \"import sys; sys.exit('bad' in open(sys.argv[1]).read())\" %s"
    spec = {
        "directories": [str(folder)],
        "files": [{"dest": str(dest), "content": "good\n", "mode": "0600", "validate": checker}],
    }
    assert run(tmp_path, **spec)["changed_paths"] == [str(folder), str(dest)]

    spec["files"][0]["content"] = "bad\n"
    refused = run(tmp_path, **spec)
    assert refused["failed"] is True
    assert refused["msg"] == f"{dest}: validate refused the new content (exit 1)"
    assert dest.read_text() == "good\n"
    assert sorted(p.name for p in folder.iterdir()) == ["fabric.yaml"]


@pytest.mark.parametrize(
    ("make", "files", "message"),
    [
        (
            None,
            [{"dest": "{tmp}/nowhere/x", "content": "x", "mode": "0644"}],
            "{tmp}/nowhere/x: its folder {tmp}/nowhere does not exist; list it under directories",
        ),
        (
            "dir",
            [{"dest": "{tmp}/taken", "content": "x", "mode": "0644"}],
            "{tmp}/taken is a folder; a file was wanted",
        ),
        (
            None,
            [{"dest": "{tmp}/v", "content": "x", "mode": "0644", "validate": "true"}],
            "validate of {tmp}/v must contain %s (the new file's path): 'true'",
        ),
        (
            None,
            [{"dest": "etc/x.conf", "content": "x", "mode": "0644"}],
            "paths must be absolute: etc/x.conf",
        ),
    ],
)
def test_bad_input_fails_with_the_path_and_the_fix(
    tmp_path: Path, make: str | None, files: list[dict[str, str]], message: str
) -> None:
    if make:
        (tmp_path / "taken").mkdir()
    concrete = [{k: v.replace("{tmp}", str(tmp_path)) for k, v in f.items()} for f in files]
    result = run(tmp_path, files=concrete)
    assert result["failed"] is True and result["msg"] == message.replace("{tmp}", str(tmp_path))


def test_ansible_finds_the_module_through_ansible_cfg_in_check_and_diff_mode(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "x.conf"
    args = json.dumps({"files": [{"dest": str(dest), "content": "x = 1\n", "mode": "0644"}]})
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    ansible = Path(sys.executable).parent / "ansible"
    proc = subprocess.run(
        [
            str(ansible),
            "localhost",
            "-c",
            "local",
            "-m",
            "sparkrack_files",
            "-a",
            args,
            "--check",
            "--diff",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"+++ after: {dest}" in proc.stdout and "+x = 1" in proc.stdout
    assert "CHANGED" in proc.stdout and not dest.exists()
