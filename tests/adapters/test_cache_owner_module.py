"""sparkrack_cache_owner, the module that gives the serving user the HF cache, on a real file
system: links an engine container could plant inside the cache keep their targets' owner and
mode. Negative control: the recursive ``file`` task it replaces, run by Ansible on the same tree,
changes a root-only file outside the cache."""

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
MODULE = ROOT / "sparkrack" / "adapters" / "modules" / "sparkrack_cache_owner.py"
USER = 65532

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the module changes owners")


def run(tmp_path: Path, check: bool = False, **args: Any) -> dict[str, Any]:
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}))
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    assert (proc.returncode != 0) == bool(result.get("failed")), proc.stderr
    return result


def owner(path: Path) -> tuple[int, int, int]:
    st = path.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


@pytest.fixture
def planted(tmp_path: Path) -> dict[str, Path]:
    """A cache with a model file, a script and a folder, and three links an engine container
    planted: to a root-only file outside, to a folder outside, and to a file inside."""
    outside = tmp_path / "host"
    (outside / "etc").mkdir(parents=True)
    shadow = outside / "shadow"
    shadow.write_text("root:x\n")
    os.chmod(shadow, 0o600)
    (outside / "etc" / "sudoers").write_text("x\n")
    os.chmod(outside / "etc" / "sudoers", 0o440)
    cache = tmp_path / "cache"
    model = cache / "hub" / "models--a--b" / "snapshots" / "0"
    model.mkdir(parents=True)
    (model / "weights.safetensors").write_bytes(b"w")
    os.chmod(model / "weights.safetensors", 0o600)
    (cache / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(cache / "run.sh", 0o4700)
    (model / "escape").symlink_to(shadow)
    (cache / "hub" / "etc").symlink_to(outside / "etc")
    (model / "inside").symlink_to(model / "weights.safetensors")
    os.mkfifo(cache / "fifo")
    return {"cache": cache, "model": model, "shadow": shadow, "outside": outside}


def test_the_cache_is_the_users_and_every_planted_link_keeps_its_target(
    tmp_path: Path, planted: dict[str, Path]
) -> None:
    cache, model, shadow = planted["cache"], planted["model"], planted["shadow"]
    sudoers = planted["outside"] / "etc" / "sudoers"
    links = {p: owner(p) for p in (model / "escape", cache / "hub" / "etc", model / "inside")}
    before = {p: owner(p) for p in (shadow, sudoers, planted["outside"] / "etc")}
    result = run(tmp_path, path=str(cache), owner=USER, group=USER)
    assert result["changed"] is True and result["skipped_count"] == 3  # two file links, the fifo
    assert {p: owner(p) for p in before} == before, "a target outside the cache changed"
    assert {p: owner(p) for p in links} == links, "a link itself changed"
    assert owner(cache / "fifo")[0] == 0
    assert owner(model / "weights.safetensors") == (USER, USER, 0o644)
    assert owner(cache / "run.sh") == (USER, USER, 0o755)  # set-uid cleared
    for folder in (cache, cache / "hub", model):
        assert owner(folder) == (USER, USER, 0o755)
    again = run(tmp_path, path=str(cache), owner=USER, group=USER)
    assert again["changed"] is False and again["changed_count"] == 0


def test_check_mode_changes_nothing_and_a_root_link_is_refused(
    tmp_path: Path, planted: dict[str, Path]
) -> None:
    cache = planted["cache"]
    result = run(tmp_path, check=True, path=str(cache), owner=USER, group=USER)
    assert result["changed"] is True and owner(cache)[0] == 0
    link = tmp_path / "link"
    link.symlink_to(planted["outside"])
    refused = run(tmp_path, path=str(link), owner=USER, group=USER)
    assert refused["failed"] and "symlink" in refused["msg"]
    assert owner(planted["outside"])[0] == 0


def test_negative_control_the_recursive_file_task_changes_the_target_outside(
    tmp_path: Path, planted: dict[str, Path]
) -> None:
    """The task the module replaces, with its exact arguments, run by Ansible."""
    cache, shadow = planted["cache"], planted["shadow"]
    args = (
        f"path={cache} state=directory owner={USER} group={USER} mode=u=rwX,g=rX,o=rX recurse=true"
    )
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local"]
        + ["-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}"]
        + ["-m", "ansible.builtin.file", "-a", args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg")},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert owner(shadow)[:2] == (USER, USER), "the recursive file task no longer follows links"
