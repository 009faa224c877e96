"""The engine check knows the variables an engine reads outside its registry.

SGLang reads ``SGLANG_HOST_IP`` and ``SGLANG_LOCAL_IP_NIC`` with ``os.getenv`` in
``srt/utils/network.py``, not through ``sglang.srt.environ.Envs``: a check that knew only the
registry refused the rank env the broadcaster needs as "silently ignored".
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "harness", ROOT / "sparkrack" / "data" / "enginecheck" / "harness.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_names_read_with_getenv_or_environ_are_known(tmp_path: Path) -> None:
    package = tmp_path / "engine" / "srt" / "utils"
    package.mkdir(parents=True)
    (package / "network.py").write_text(
        "import os\n"
        'host_ip = os.getenv("SGLANG_HOST_IP", "") or os.getenv("HOST_IP", "")\n'
        "nic = os.environ.get('SGLANG_LOCAL_IP_NIC', None)\n"
        'port = os.environ[ "SGLANG_PORT_X" ]\n'
        'os.environ.setdefault("SGLANG_DEFAULTED", "1")\n'
    )
    (package / "notes.txt").write_text('os.getenv("SGLANG_IN_A_TEXT_FILE")\n')
    (package / "other.py").write_text(
        '# a comment naming SGLANG_ONLY_MENTIONED is not a read\nNAME = "SGLANG_A_STRING"\n'
    )
    found = _harness().read_directly(str(tmp_path / "engine"), "SGLANG_")
    assert found == {
        "SGLANG_HOST_IP",
        "SGLANG_LOCAL_IP_NIC",
        "SGLANG_PORT_X",
        "SGLANG_DEFAULTED",
    }
