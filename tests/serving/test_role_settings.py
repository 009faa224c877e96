"""The serve role passes every setting the render reads.

``roles/serving/tasks/main.yml`` hands the filter ``serving_settings``, built from the names the
contract fact carries (the variable table's settings) as the play resolves them; a setting it left
out would silently fall back to the table's default. The render's settings are
:data:`sparkrack.serving.context.SETTINGS`, and each of them changes what the render returns
(so the list is what the render reads, not a list kept beside it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleTemplatePluginError
from test_image_archive import _docker_save

from sparkrack.adapters.ansible import FILTERS
from sparkrack.inputs.inventory import load_inventory
from sparkrack.inputs.variable_table import SERVING_DEFAULTS, SETTINGS
from sparkrack.serving.image_archive import to_oci
from sparkrack.serving.trust import TRUST_VARS

ROOT = Path(__file__).resolve().parents[2]
ROLE_TASKS = ROOT / "roles" / "serving" / "tasks" / "main.yml"
FILTER = "sparkrack_serving_render"


def settings_expression(tasks: list[dict[str, Any]]) -> str:
    """The ``serving_settings`` of the task that calls the serving render filter."""
    [task] = [t for t in tasks if FILTER in json.dumps(t)]
    return str(task["vars"]["serving_settings"])


def role_settings(expression: str, tmp: Path, **given: Any) -> dict[str, Any]:
    """What ``expression`` gives as the serve role evaluates it: a play on localhost with the
    role's defaults, the contract fact from the filter, ``given`` as extra variables."""
    out = tmp / "settings.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROOT / "roles" / "serving" / "defaults" / "main.yml")],
            "vars": {
                "sparkrack_contract": "{{ lookup('ansible.builtin.env', 'HOME') | sparkrack_contract }}",
                "serving_settings": expression,
            },
            "tasks": [
                {
                    "name": "Write the settings",
                    "ansible.builtin.copy": {
                        "content": "{{ serving_settings | to_json }}",
                        "dest": str(out),
                        "mode": "0600",
                    },
                }
            ],
        }
    ]
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", json.dumps({"ansible_python_interpreter": sys.executable, **given}),
         str(tmp / "play.yml")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    settings: dict[str, Any] = json.loads(out.read_text())
    return settings


def unpassed(passed: set[str], read: tuple[str, ...]) -> list[str]:
    """What the render reads that the role does not pass, and what it passes that nothing reads."""
    return sorted(f"not passed: {k}" for k in set(read) - passed) + sorted(
        f"read by nothing: {k}" for k in passed - set(read)
    )


@pytest.mark.tools  # runs the real ansible-playbook
def test_the_role_passes_every_setting_the_render_reads(tmp_path: Path) -> None:
    tasks = yaml.safe_load(ROLE_TASKS.read_text())
    passed = role_settings(settings_expression(tasks), tmp_path, serving_api_port=31000)
    assert unpassed(set(passed), SETTINGS) == []
    # Each as the play resolves it: the inventory's value, else the role's default.
    assert passed["serving_api_port"] == 31000
    assert passed["serving_dist_port"] == SERVING_DEFAULTS["serving_dist_port"]
    assert passed["serving_memguard_floor"] == SERVING_DEFAULTS["serving_memguard_floor"]


@pytest.mark.tools  # runs the real ansible-playbook
def test_a_dropped_setting_is_found(tmp_path: Path) -> None:
    names = [k for k in SETTINGS if k != "serving_fetch_port"] + ["serving_fetch_prot"]
    hand_list = f"{{{{ dict({names} | zip(query('vars', *{names}, default=''))) }}}}"
    passed = role_settings(hand_list, tmp_path)
    assert unpassed(set(passed), SETTINGS) == [
        "not passed: serving_fetch_port",
        "read by nothing: serving_fetch_prot",
    ]


LAB_TRUST = {k: load_inventory("inventories/lab").var(k) for k in TRUST_VARS}
# device-plugin in the base, so the RDMA resource (read only then) reaches the render.
_SCRATCH = Path(tempfile.mkdtemp(prefix="sparkrack-role-settings-"))
_ARCHIVE = _SCRATCH / "image.tar"
to_oci(_docker_save(_SCRATCH / "docker.tar"), _ARCHIVE, "sparkrack.invalid/sparkrack:1")

BASE: dict[str, Any] = {
    "serving_fetch_image": "registry.example/fetch:1",
    "serving_watchdog_image": "registry.example/watchdog:1",
    "serving_prepull": True,
    "serving_rdma_access": "device-plugin",
    # A LAN port needs its clients: the base admits one so that the port alone can change.
    "serving_gateway_clients": ["198.51.100.0/24"],
    **LAB_TRUST,
}
OTHER: dict[str, Any] = {
    # Nothing trusted: the lab's profiles are refused.
    **TRUST_VARS,
    "serving_namespace": "elsewhere",
    "serving_hf_cache": "/srv/hf",
    "serving_shm_size": "16Gi",
    "serving_hf_token_secret": "other-hf-token",
    "serving_gateway_key_secret": "other-gateway-key",
    "serving_jit_cache": "/srv/jit",
    "serving_fetch_secret": "other-fetch",
    "serving_fetch_image": "registry.example/fetch:2",
    "serving_watchdog_image": "registry.example/watchdog:2",
    "serving_watchdog_evidence_dir": "/srv/evidence",
    "serving_watchdog_max_restarts": 0,
    "serving_memguard_floor": "16G",
    # A string, as Ansible passes it (an int here would be raised past 100 by the test).
    "serving_memguard_psi_full": "30",
    "serving_prepull": False,
    "serving_gateway_clients": ["192.0.2.0/24"],
    "serving_gateway_node_port": 30400,
    "serving_image_archive": str(_ARCHIVE),
    "serving_rdma_access": "privileged",
    "serving_rdma_resource": "rdma/other",
}


def render(settings: dict[str, Any]) -> str:
    inv = load_inventory("inventories/lab")
    rendered = FILTERS[FILTER](
        {"serving_deployments": inv.var("serving_deployments")},
        inv.plan().to_dict(),
        inv.hostvars,
        settings,
    )
    return json.dumps(rendered)


@pytest.fixture(scope="module")
def base() -> str:
    return render(BASE)


@pytest.mark.parametrize("key", SETTINGS)
def test_every_setting_changes_the_render(key: str, base: str) -> None:
    value = OTHER.get(key, SERVING_DEFAULTS.get(key, 0))
    changed = value + 100 if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        assert render({**BASE, key: changed}) != base, f"{key} does not reach the render"
    except AnsibleTemplatePluginError as exc:
        # A trust setting reaches the render by refusing it.
        assert key in TRUST_VARS and "serving refused" in str(exc), exc
