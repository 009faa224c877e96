"""requirements.yml (for Galaxy users) pins exactly the collections the pinned `ansible` package ships."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_requirements_match_the_installed_collections() -> None:
    wanted = {
        c["name"]: c["version"]
        for c in yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]
    }
    listing = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-galaxy"),
            "collection",
            "list",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    installed: dict[str, str] = {}
    for collections in json.loads(listing.stdout).values():
        for name, info in collections.items():
            installed.setdefault(name, info["version"])
    assert wanted == {name: installed.get(name) for name in wanted}
