"""The watchdog probes with the deployment's engine key, and a refused key is a configuration
error: reported and alerted, never a restart or a routing change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkrack import contract
from sparkrack.bench.server import spawn
from sparkrack.serving.agent_settings import labels as watchdog_labels
from sparkrack.serving.deployments.bundle import from_inventory, render_serving
from sparkrack.watch.probe import Verdict
from sparkrack.watch.supervisor import State, Supervisor

ROOT = Path(__file__).resolve().parents[2]
KEY = "k-" + "7" * 30


def watch_once(url: str, env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    cmd = [sys.executable, "-m", "sparkrack", "watch", "--url", url, "--once", "--json"]
    proc = subprocess.run(
        [*cmd, "--stall-after", "2", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert KEY not in proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def keyed() -> Any:
    with spawn(["--rate", "100", "--api-key-env", "STANDIN_KEY"], env={"STANDIN_KEY": KEY}) as url:
        yield url


def test_with_the_key_the_keyed_stand_in_is_healthy(keyed: str) -> None:
    code, probe = watch_once(keyed, {"WATCH_KEY": KEY}, "--api-key-env", "WATCH_KEY")
    assert (code, probe["verdict"]) == (0, "healthy"), probe


@pytest.mark.parametrize("key", [None, "wrong"])
def test_without_the_key_the_verdict_is_a_config_error(keyed: str, key: str | None) -> None:
    """Negative control: the same stand-in answers 401, and the verdict says configuration."""
    env = {"WATCH_KEY": key} if key else {}
    code, probe = watch_once(keyed, env, "--api-key-env", "WATCH_KEY")
    assert (code, probe["verdict"]) == (1, str(Verdict.CONFIG)), probe
    assert "HTTP 401" in probe["detail"] and "--api-key-env" in probe["detail"]


def test_a_config_error_never_restarts_nor_unroutes() -> None:
    """However long it lasts, in whatever state: no restart, no routing change."""
    for start in State:
        sup = Supervisor(state=start)
        for minute in range(60):
            decision = sup.decide(Verdict.CONFIG, 1000.0 + 60 * minute)
            assert not decision.restart and not decision.capture
            assert decision.routable is None
            assert decision.state is start
        assert sup.restarts == []


def test_erroring_still_restarts() -> None:
    """Negative control of the one above: an engine error does lead to a restart."""
    decision = Supervisor().decide(Verdict.ERRORING, 1000.0)
    assert decision.restart and decision.routable is False


def test_the_watchdog_deployment_reads_the_key_from_the_deployment_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    found = from_inventory("inventories/lab", check_memory=False)
    docs = render_serving(found)["manifests"]
    watchdogs = [
        d
        for d in docs
        if d["kind"] == "Deployment"
        and d["metadata"]["labels"].get(contract.LABEL_COMPONENT) == contract.COMPONENT_WATCHDOG
    ]
    keyed = [d for d in found.deployments if d.res.engine.client_key_env]
    assert keyed and len(watchdogs) == len(found.deployments)
    for d in keyed:
        [wd] = [w for w in watchdogs if w["metadata"]["labels"] == watchdog_labels(d.name)]
        container = wd["spec"]["template"]["spec"]["containers"][0]
        args = container["args"]
        assert args[args.index("--api-key-env") + 1] == contract.ENGINE_KEY_ENV
        [var] = [e for e in container["env"] if e["name"] == contract.ENGINE_KEY_ENV]
        assert var == {
            "name": contract.ENGINE_KEY_ENV,
            "valueFrom": {
                "secretKeyRef": {"name": d.res.names.keys, "key": contract.ENGINE_KEY_KEY}
            },
        }


def test_no_key_is_a_literal_of_the_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every variable that carries a key, in every container of the render, is a Secret
    reference; no word of any argv follows a key option but a ``$(VAR)`` or a variable name."""
    monkeypatch.chdir(ROOT)
    docs = render_serving(from_inventory("inventories/lab", check_memory=False))["manifests"]
    key_vars = {contract.ENGINE_KEY_ENV, contract.ADMIN_KEY_ENV, "VLLM_API_KEY"}
    seen = 0
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            for e in c.get("env", []):
                if e["name"] in key_vars:
                    seen += 1
                    assert "value" not in e and "secretKeyRef" in e["valueFrom"], e
            words = [*c.get("command", []), *c.get("args", [])]
            for option, value in zip(words, words[1:], strict=False):
                if option in ("--api-key", "--admin-api-key"):
                    assert value.startswith("$("), (option, value)
                if option == "--api-key-env":
                    assert value in key_vars
    assert seen
