"""The patch engine writes below the site-packages roots it is given, and nowhere else.

Real wheel layouts (tests/patch_fixtures.py) with hostile surroundings: a PYTHONPATH entry and a
.pth file naming directories that hold real, patchable copies of the targets; targets whose
path climbs out of the root; target files and package directories that are symlinks to the
outside. Every outside file must keep its bytes, and get no backup or temporary sibling.
Each case has a negative control: the same outside directory given as a root IS written.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkrack.cli import main
from sparkrack.patches import PATCHES, configmap_files, container_entrypoint
from sparkrack.patches.catalog import CUTLASS_DSL_SM121, SGLANG_JIT_ARCH
from sparkrack.patches.engine import (
    APPLIED,
    DRIFT,
    NOT_APPLICABLE,
    Patch,
    run_catalog,
    run_patch,
    validate_catalog,
)

pytestmark = pytest.mark.tools  # real engine wheels

pytest_plugins = ("patch_fixtures",)
SitePackages = Callable[..., Path]

SGLANG = ("sglang", "0.5.12")
FLASHINFER = ("flashinfer-python", "0.6.11.post1")
FI_MMA = "flashinfer/data/cutlass/python/CuTeDSL/cutlass/cute/nvgpu/tcgen05/mma.py"
FI_ARCH = "flashinfer/data/cutlass/python/CuTeDSL/cutlass/base_dsl/arch.py"
JIT = SGLANG_JIT_ARCH.targets[0].path
ARCH = "Qwen3_5MoeForConditionalGeneration"


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def copy_layout(
    wheel_files: object, dest: Path, dist: str, version: str, members: list[str]
) -> Path:

    src = wheel_files.extract(dist, version, members)  # type: ignore[attr-defined]
    shutil.copytree(src, dest, dirs_exist_ok=True)
    return dest


@pytest.fixture
def site(site_packages: SitePackages) -> Path:
    return site_packages((*SGLANG, [JIT]))


@pytest.fixture
def outside(tmp_path: Path, wheel_files: object) -> dict[str, Path]:
    """Directories outside site-packages, each a real installable layout of a patched wheel."""
    dirs = {
        "pythonpath": tmp_path / "hostile-pythonpath",
        "pth": tmp_path / "hostile-pth-target",
    }
    copy_layout(wheel_files, dirs["pythonpath"], *FLASHINFER, [FI_MMA, FI_ARCH])
    copy_layout(wheel_files, dirs["pth"], *FLASHINFER, [FI_MMA, FI_ARCH])
    return dirs


def test_cli_ignores_pythonpath_and_pth_directories(
    site: Path,
    outside: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = {name: snapshot(d) for name, d in outside.items()}
    monkeypatch.setenv("PYTHONPATH", str(outside["pythonpath"]))
    (site / "hostile.pth").write_text(f"{outside['pth']}\n")
    code = main(["patch", "--site-packages", str(site), "--apply", "--arch", ARCH])
    lines = capsys.readouterr().out
    assert code == 0, lines
    assert SGLANG_JIT_ARCH.marker in (site / JIT).read_text()
    assert f"{CUTLASS_DSL_SM121.id} — " in lines and "not installed" in lines
    assert {name: snapshot(d) for name, d in outside.items()} == before


def test_negative_control_a_given_root_is_written(site: Path, outside: dict[str, Path]) -> None:
    before = snapshot(outside["pythonpath"])
    reports = run_catalog(
        PATCHES, [site, outside["pythonpath"]], model_arch=ARCH, server_argv=[], write=True
    )
    assert {r.patch_id: r.status for r in reports}[CUTLASS_DSL_SM121.id] == APPLIED
    assert snapshot(outside["pythonpath"]) != before


def test_pythonpath_copy_shadowing_a_target_is_drift_not_written(
    site: Path, tmp_path: Path
) -> None:
    shadow = tmp_path / "checkout"
    (shadow / JIT).parent.mkdir(parents=True)
    shutil.copy(site / JIT, shadow / JIT)
    before = snapshot(shadow)
    report = run_patch(
        SGLANG_JIT_ARCH, [site], model_arch=ARCH, server_argv=[], write=True, shadows=[shadow]
    )
    assert report.status == DRIFT
    assert "shadows the installed file" in report.line()
    assert snapshot(shadow) == before
    assert SGLANG_JIT_ARCH.marker not in (site / JIT).read_text()
    # A PYTHONPATH entry that is itself a given root is no shadow.
    again = run_patch(
        SGLANG_JIT_ARCH, [site], model_arch=ARCH, server_argv=[], write=True, shadows=[site]
    )
    assert again.status == APPLIED


def test_launcher_never_writes_to_pythonpath(site: Path, tmp_path: Path) -> None:
    """The real launcher, as the pod runs it, with a hostile PYTHONPATH."""
    mount = tmp_path / "opt-sparkrack"
    mount.mkdir()
    for name, text in configmap_files().items():
        (mount / name).write_text(text)
    shadow = tmp_path / "hostile-pythonpath"
    (shadow / JIT).parent.mkdir(parents=True)
    shutil.copy(site / JIT, shadow / JIT)
    before = snapshot(shadow)
    command = container_entrypoint([SGLANG_JIT_ARCH.id], ARCH, mount=str(mount))
    server = [sys.executable, "-c", "print('SERVER')"]
    env = {
        "PATH": os.environ["PATH"],
        "SPARKRACK_SITE_PACKAGES": str(site),
        "PYTHONPATH": str(shadow),
    }
    proc = subprocess.run(
        [sys.executable, *command[1:], *server],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr  # required patch in DRIFT
    assert "shadows the installed file" in proc.stdout
    assert "SERVER" not in proc.stdout
    assert snapshot(shadow) == before


def _retarget(patch: Patch, path: str) -> Patch:
    target = dataclasses.replace(patch.targets[0], path=path)
    return dataclasses.replace(patch, targets=(target,))


@pytest.mark.parametrize("kind", ["dotdot", "absolute"])
def test_targets_climbing_out_of_the_root_are_refused(
    site: Path, tmp_path: Path, kind: str
) -> None:
    victim = tmp_path / "victim" / JIT
    victim.parent.mkdir(parents=True)
    shutil.copy(site / JIT, victim)
    before = victim.read_bytes()
    rel = os.path.relpath(victim, site) if kind == "dotdot" else str(victim)
    hostile = _retarget(SGLANG_JIT_ARCH, rel)
    assert validate_catalog([hostile]), "the declaration check must refuse it as well"
    [report] = run_catalog([hostile], [site], model_arch=ARCH, server_argv=[], write=True)
    assert report.status == DRIFT and "refused" in report.line()
    assert victim.read_bytes() == before
    assert sorted(p.name for p in victim.parent.iterdir()) == [victim.name]


@pytest.mark.parametrize("link", ["file", "package-directory"])
def test_symlinks_out_of_the_root_are_refused(site: Path, tmp_path: Path, link: str) -> None:
    victim_root = tmp_path / "victim"
    shutil.copytree(site / "sglang", victim_root / "sglang")
    before = snapshot(victim_root)
    if link == "file":
        (site / JIT).unlink()
        (site / JIT).symlink_to(victim_root / JIT)
    else:
        shutil.rmtree(site / "sglang")
        (site / "sglang").symlink_to(victim_root / "sglang", target_is_directory=True)
    report = run_patch(SGLANG_JIT_ARCH, [site], model_arch=ARCH, server_argv=[], write=True)
    assert report.status == DRIFT and "outside" in report.line()
    assert snapshot(victim_root) == before
    # Negative control: the same tree given as the root is patched.
    control = run_patch(
        SGLANG_JIT_ARCH,
        [site, victim_root],
        model_arch=ARCH,
        server_argv=[],
        write=True,
        versions={"sglang": ("0.5.12", victim_root)},
    )
    assert control.status == APPLIED


def test_a_missing_package_is_still_not_applicable(site_packages: SitePackages) -> None:
    empty = site_packages()
    report = run_patch(SGLANG_JIT_ARCH, [empty], model_arch=ARCH, server_argv=[], write=True)
    assert report.status == NOT_APPLICABLE
