"""huggingface_hub releases the fetch step is tested with, each in its own pip ``--target``
under the user's cache (installed once from PyPI, pinned), put first on ``PYTHONPATH`` of the
fetch step's subprocess. 0.36 is the dev venv's own (pyproject.toml); 1.x is the newest 1.x
release at the time of writing: it keeps Xet-backed files in the cache-wide shared blob store.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

HUB_0 = "0.36.2"
"""The dev venv's pin (pyproject.toml); no separate target."""
HUB_1 = "1.33.0"
VERSIONS = (HUB_0, HUB_1)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sparkrack" / "huggingface_hub"


def target(version: str) -> Path | None:
    """The directory to put first on PYTHONPATH for ``version`` (None: the venv's own)."""
    if version == HUB_0:
        return None
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    where = root / version
    with (root / ".install.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (where / ".complete").exists():
            subprocess.run(
                [
                    sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-input", "--target", str(where), "--upgrade",
                    f"huggingface_hub=={version}",
                ],
                check=True,
                timeout=600,
            )  # fmt: skip
            (where / ".complete").write_text(version + "\n")
    return where


def env(version: str) -> dict[str, str]:
    """Environment overrides that make a subprocess import huggingface_hub ``version``."""
    where = target(version)
    return {"PYTHONPATH": str(where)} if where else {}
