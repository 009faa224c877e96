"""One of sparkrack's Ansible modules run as Ansible runs it: its arguments in a JSON file, its
result the JSON it prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_module(
    module: Path, tmp_path: Path, check: bool, **args: Any
) -> tuple[dict[str, Any], str]:
    """The module's result, and everything it wrote to stdout and stderr. A failed result and a
    non-zero exit go together."""
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}))
    proc = subprocess.run(
        [sys.executable, str(module), str(argfile)], capture_output=True, text=True, timeout=120
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    assert (proc.returncode != 0) == bool(result.get("failed")), proc.stderr
    return result, proc.stdout + proc.stderr
