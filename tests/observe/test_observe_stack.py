"""The optional monitoring stack: pinned chart values from Python, and the monitoring role
through real ansible-playbook (validates always, installs nothing without an API)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from sparkrack import contract
from sparkrack.inputs.variable_table import contract_fact
from sparkrack.observe import stack
from sparkrack.observe.scrape import scrape_config

if TYPE_CHECKING:
    from conftest import Playbook

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "monitoring"


def test_chart_is_pinned_and_values_carry_the_scrape_job() -> None:
    data = stack.stack_file()
    assert data["version"].count(".") == 2 and all(p.isdigit() for p in data["version"].split("."))
    spec = data["values"]["prometheus"]["prometheusSpec"]
    assert spec["additionalScrapeConfigs"] == [scrape_config()]
    assert spec["ruleSelectorNilUsesHelmValues"] is False


def test_control_plane_memory_figure_is_what_the_values_set() -> None:
    values = stack.helm_values()
    on_cp = {contract.LABEL_ROLE: contract.ROLE_CONTROL_PLANE}
    limits = [
        values["prometheus"]["prometheusSpec"],
        values["alertmanager"]["alertmanagerSpec"],
        values["grafana"],
        values["prometheusOperator"],
        values["kube-state-metrics"],
    ]
    total = 0
    for part in limits:
        assert part["nodeSelector"] == on_cp
        total += int(part["resources"]["limits"]["memory"].removesuffix("Mi"))
    node = values["prometheus-node-exporter"]["resources"]["limits"]["memory"]
    total += int(node.removesuffix("Mi"))
    assert stack.control_plane_memory_mib()[1] == total


def run_role(playbook: Playbook, tmp_path: Path, enabled: bool) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Monitoring role",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "roles": [{"role": "monitoring", "monitoring_enabled": enabled}],
                }
            ]
        )
    )
    # The fact preflight exports to every play (the role reads its kubeconfig path from it).
    facts = json.dumps({"sparkrack_contract": contract_fact(str(tmp_path)), "k3s_api_ready": False})
    return playbook("-i", "localhost,", "-c", "local", "-e", facts, str(play), timeout=300)


@pytest.mark.parametrize("enabled", [True, False])
def test_role_validates_and_applies_nothing_without_an_api(
    ansible_playbook: Playbook, tmp_path: Path, enabled: bool
) -> None:
    proc = run_role(ansible_playbook, tmp_path, enabled)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"{stack.CHART} {stack.CHART_VERSION}" in proc.stdout
    assert ("NOT APPLIED" in proc.stdout) == enabled
    assert "Install kube-prometheus-stack" not in proc.stdout


# --- no default credentials ------------------------------------------------------------------
DEFAULT_PASSWORDS = {"prom-operator", "admin", "password", "changeme", "grafana"}
CREDENTIAL_KEY = ("password", "passwd", "secretkey", "token", "apikey")


def literal_credentials(values: Any, path: str = "") -> list[str]:
    """Every literal credential in chart values: a key that names one with a string value, or a
    known default password anywhere."""
    found = []
    if isinstance(values, dict):
        for key, value in values.items():
            where = f"{path}.{key}" if path else str(key)
            named = any(k in str(key).lower().replace("_", "") for k in CREDENTIAL_KEY)
            if named and isinstance(value, str) and not str(key).lower().endswith("key"):
                found.append(where)
            found += literal_credentials(value, where)
    elif isinstance(values, list):
        for i, value in enumerate(values):
            found += literal_credentials(value, f"{path}[{i}]")
    elif isinstance(values, str) and values.lower() in DEFAULT_PASSWORDS:
        found.append(f"{path}={values}")
    return found


def test_no_default_credentials_in_the_rendered_values() -> None:
    shipped = yaml.safe_load(
        (
            Path(stack.__file__).resolve().parent.parent
            / "data"
            / "observe"
            / "monitoring-stack.yml"
        ).read_text()
    )
    assert literal_credentials(shipped["values"]) == []
    admin = shipped["values"]["grafana"]["admin"]
    assert admin["existingSecret"] == shipped["grafana_admin"]["secret"]
    assert admin["passwordKey"] == shipped["grafana_admin"]["password_key"]


def test_negative_control_a_chart_default_password_is_found() -> None:
    values = stack.stack_file()["values"]
    values["grafana"]["adminPassword"] = "prom-operator"
    assert literal_credentials(values) == [
        "grafana.adminPassword",
        "grafana.adminPassword=prom-operator",
    ]


def cpufreq_collector_off(values: dict[str, Any]) -> bool:
    """node-exporter's own flag parsing: the last of --[no-]collector.cpufreq wins, on by default."""
    state = True
    for arg in values["prometheus-node-exporter"].get("extraArgs", []):
        if arg == "--no-collector.cpufreq":
            state = False
        elif arg == "--collector.cpufreq":
            state = True
    return not state


def test_node_exporter_ships_without_the_cpufreq_collector() -> None:
    # prometheus/node_exporter#3791: the collector hangs on arm64 with cppc_cpufreq (the GB10).
    shipped = yaml.safe_load(
        (ROOT / "sparkrack" / "data" / "observe" / "monitoring-stack.yml").read_text()
    )
    assert cpufreq_collector_off(shipped["values"])
    assert cpufreq_collector_off(stack.helm_values())


def test_negative_control_the_cpufreq_check_sees_the_flag_dropped_or_undone() -> None:
    values = stack.helm_values()
    values["prometheus-node-exporter"]["extraArgs"] = []
    assert not cpufreq_collector_off(values)
    values["prometheus-node-exporter"]["extraArgs"] = [
        "--no-collector.cpufreq",
        "--collector.cpufreq",
    ]
    assert not cpufreq_collector_off(values)
