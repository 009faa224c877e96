"""The serving role's defaults and argument specs are what the variable table writes, and a new
``serving_*`` setting is one row of the table plus its use.

The drift test's negative control edits a copy of each generated file by hand. The planted row is
inserted into a copy of the package's variable table; in that copy, with nothing else edited, the
generator writes the role's default and option, the role's spec check passes, the contract fact
names the setting, the inventory check holds a value to the row's form, the render's context
carries the value (default or given), and the inventory page lists it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from sparkrack.adapters.ansible import contract
from sparkrack.inputs import serving_role
from sparkrack.inputs.variable_table import SERVING, SERVING_DEFAULTS, SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def test_the_role_files_are_what_the_table_writes() -> None:
    assert serving_role.drifted(ROOT) == [], "run: python -m sparkrack.inputs.serving_role"


def test_a_hand_edit_of_either_file_is_found(tmp_path: Path) -> None:
    for rel in (serving_role.DEFAULTS, serving_role.SPECS):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert serving_role.drifted(tmp_path) == []
    defaults = tmp_path / serving_role.DEFAULTS
    defaults.write_text(
        defaults.read_text().replace("serving_smoke_max_tokens: 64", "serving_smoke_max_tokens: 65")
    )
    assert serving_role.drifted(tmp_path) == [defaults]
    specs = tmp_path / serving_role.SPECS
    specs.write_text(specs.read_text().replace("type: int", "type: str", 1))
    assert serving_role.drifted(tmp_path) == [defaults, specs]
    assert serving_role.main(["--root", str(tmp_path), "--check"]) == 1
    assert serving_role.main(["--root", str(tmp_path)]) == 0
    assert serving_role.drifted(tmp_path) == []


def test_the_role_defaults_are_the_render_defaults() -> None:
    """A render default reaches the role through the contract fact; every other default is the
    row's value."""
    defaults = yaml.safe_load((ROOT / serving_role.DEFAULTS).read_text())
    specs = yaml.safe_load((ROOT / serving_role.SPECS).read_text())
    options = specs["argument_specs"]["main"]["options"]
    for name in SERVING_DEFAULTS:
        assert defaults[name] == f"{{{{ sparkrack_contract.serving_defaults.{name} }}}}", name
        assert "default" not in options[name], name
    for v in SERVING:
        if v.name not in SERVING_DEFAULTS:
            assert defaults[v.name] == v.default and type(defaults[v.name]) is type(v.default)
    assert contract(str(ROOT))["serving_defaults"] == SERVING_DEFAULTS
    assert set(SETTINGS) <= {v.name for v in SERVING} <= set(defaults) == set(options)


PLANTED = (
    '    Variable("serving_planted_knob", forms.seconds(1, 60), "a planted knob", default=7),\n'
)
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[2])
import yaml
from sparkrack.adapters.ansible import contract
from sparkrack.errors import SparkrackError
from sparkrack.inputs.inventory import load_inventory
from sparkrack.inputs.variables import doc_text
from sparkrack.serving.context import context_from_vars
from test_role_specs import check_role

copy = sys.argv[1]
role = f"{copy}/roles/serving"
plan = load_inventory(sys.argv[3]).plan()
try:
    context_from_vars(plan, {"serving_planted_knob": 0})
    refused = ""
except SparkrackError as exc:
    refused = str(exc)
fact = contract("/home/x")
print(json.dumps({
    "default": yaml.safe_load(open(f"{role}/defaults/main.yml"))["serving_planted_knob"],
    "option": yaml.safe_load(open(f"{role}/meta/argument_specs.yml"))["argument_specs"]["main"][
        "options"]["serving_planted_knob"],
    "spec_problems": [str(p) for p in check_role(__import__("pathlib").Path(role))],
    "fact_settings": "serving_planted_knob" in fact["serving_settings"],
    "fact_default": fact["serving_defaults"].get("serving_planted_knob"),
    "refused": refused,
    "unset": context_from_vars(plan, {}).settings["serving_planted_knob"],
    "given": context_from_vars(plan, {"serving_planted_knob": 30}).settings["serving_planted_knob"],
    "doc": [ln for ln in doc_text().splitlines() if ln.startswith("| `serving_planted_knob`")],
}))
"""


def test_a_new_setting_is_one_row_plus_its_use(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(
        ROOT / "sparkrack", copy / "sparkrack", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / "roles" / "serving", copy / "roles" / "serving")
    table = copy / "sparkrack" / "inputs" / "variable_table.py"
    text = table.read_text()
    anchor = '    Variable(\n        "vault_hf_token",\n'
    assert text.count(anchor) == 1
    table.write_text(text.replace(anchor, PLANTED + anchor))
    env = {**os.environ, "PYTHONPATH": str(copy)}
    written = subprocess.run(
        [sys.executable, "-m", "sparkrack.inputs.serving_role", "--root", str(copy)],
        cwd=copy, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(copy), str(ROOT / "tests"), str(ROOT / "inventories" / "lab")],
        cwd=copy, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert seen["default"] == "{{ sparkrack_contract.serving_defaults.serving_planted_knob }}"
    assert seen["option"] == {"type": "int", "description": "a planted knob"}
    assert seen["spec_problems"] == []
    assert seen["fact_settings"] and seen["fact_default"] == 7
    assert "serving_planted_knob" in seen["refused"] and "0" in seen["refused"]
    assert (seen["unset"], seen["given"]) == (7, 30)
    assert len(seen["doc"]) == 1 and "`7`" in seen["doc"][0] and "a planted knob" in seen["doc"][0]
    # Negative control: the checkout itself knows no such setting.
    assert "serving_planted_knob" not in SETTINGS
    assert "serving_planted_knob" not in (ROOT / serving_role.DEFAULTS).read_text()


def test_the_context_carries_every_setting_the_inventory_leaves_unset_at_its_default() -> None:
    from sparkrack.inputs.inventory import load_inventory
    from sparkrack.serving.context import context_from_vars

    plan = load_inventory(ROOT / "inventories" / "lab").plan()
    settings = context_from_vars(plan, {}).settings
    assert list(settings) == list(SETTINGS)
    assert all(settings[v.name] == v.default for v in SERVING if v.setting)
    given = context_from_vars(plan, {"serving_fetch_port": 9000}).settings
    assert given["serving_fetch_port"] == 9000 != settings["serving_fetch_port"]
