"""Real wheels from PyPI for the patch-engine tests.

Each wheel is downloaded once (``pip download --no-deps --only-binary=:all:``) into the
repository's ``.cache/wheels`` (gitignored) and reused across runs; tests get a throw-away
site-packages directory holding only the files they need plus the ``*.dist-info/METADATA`` that
carries the distribution's real name and version.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# SPARKRACK_WHEEL_CACHE: another cache directory (e.g. to prove a cold download works).
WHEEL_CACHE = Path(os.environ.get("SPARKRACK_WHEEL_CACHE") or REPO / ".cache" / "wheels")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_path(dist: str, version: str) -> Path:
    """The cached wheel of ``dist==version``; downloaded from PyPI on first use."""
    pattern = f"{_norm(dist)}-{version}-*.whl"
    found = sorted(WHEEL_CACHE.glob(pattern))
    if found:
        return found[0]
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    # Parallel test workers: one downloads, the others find its wheel once the lock is theirs.
    with (WHEEL_CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(WHEEL_CACHE.glob(pattern))
        if found:
            return found[0]
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(WHEEL_CACHE),
            f"{dist}=={version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        found = sorted(WHEEL_CACHE.glob(pattern))
        if proc.returncode != 0 or not found:
            pytest.fail(
                f"cannot download {dist}=={version} from PyPI (needed once, then cached in "
                f"{WHEEL_CACHE}): {proc.stderr.strip()[-400:]}"
            )
    return found[0]


class WheelFiles:
    """Pristine members of real wheels, extracted once per session."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def extract(self, dist: str, version: str, members: Iterable[str]) -> Path:
        """Directory holding ``members`` (those present in the wheel) + the METADATA file."""
        dest = self.root / f"{_norm(dist)}-{version}"
        with zipfile.ZipFile(wheel_path(dist, version)) as zf:
            names = set(zf.namelist())
            meta = [n for n in names if n.endswith(".dist-info/METADATA")]
            for member in [*meta, *members]:
                if member in names and not (dest / member).exists():
                    zf.extract(member, dest)
        return dest


@pytest.fixture(scope="session")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> WheelFiles:
    return WheelFiles(tmp_path_factory.mktemp("wheel-files"))


SitePackages = Callable[..., Path]


@pytest.fixture
def site_packages(wheel_files: WheelFiles, tmp_path: Path) -> SitePackages:
    """Build a fresh site-packages from (dist, version, members) triples; returns its path."""

    def build(*wheels: tuple[str, str, Iterable[str]]) -> Path:
        site = tmp_path / "site-packages"
        site.mkdir(exist_ok=True)
        for dist, version, members in wheels:
            src = wheel_files.extract(dist, version, list(members))
            shutil.copytree(src, site, dirs_exist_ok=True)
        return site

    return build
