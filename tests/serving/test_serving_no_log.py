"""The HF token never reaches Ansible's output: real ansible-playbook at -vvv, a sentinel token.

The serving role's apply tasks run on localhost against a real API server (``kube_api``): once
with a Secret name the API refuses, once with one it accepts. The sentinel must appear nowhere:
not in the -vvv output, not in Ansible's log file, not in any file the run leaves behind, and
the applied Secret read back from the API holds it in no annotation. The negative control runs,
against ``tests/data/no_log/ansible_collections`` (a ``kubernetes.core.k8s`` stand-in that fails
with the Secret's data in its message), a rescue that echoes ``ansible_failed_result.msg``, and
must find it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client

from sparkrack.inputs.variable_table import contract_fact

if TYPE_CHECKING:
    from conftest import Playbook

DATA = Path(__file__).resolve().parents[1] / "data" / "no_log"
SENTINEL = "hf_SENTINEL_7f3c9a1e5b2d4c6a8e0f"


def run_play(
    runner: Playbook, playbook: Path, tmp_path: Path, *extra: str, **extra_env: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """ansible-playbook -vvv with every file Ansible writes under ``tmp_path / 'run'``."""
    run = tmp_path / "run"
    (run / "home").mkdir(parents=True)
    secrets = tmp_path / "secrets.json"  # the input; the only file allowed to hold the token
    secrets.write_text(json.dumps({"serving_hf_token": SENTINEL}))
    env = {
        "HOME": str(run / "home"),
        "ANSIBLE_LOG_PATH": str(run / "ansible.log"),
        "ANSIBLE_LOCAL_TEMP": str(run / "local-tmp"),
        "ANSIBLE_REMOTE_TMP": str(run / "remote-tmp"),
        "ANSIBLE_FORCE_COLOR": "false",
        **extra_env,
    }
    # The fact preflight exports to every play: the role's defaults read it.
    facts = json.dumps({"sparkrack_contract": contract_fact(str(run / "home"))})
    proc = runner(
        "-vvv", "-e", facts, "-e", f"@{secrets}", *extra, str(playbook), env=env, timeout=300
    )
    return proc, run


def sentinel_hits(proc: subprocess.CompletedProcess[str], run: Path) -> list[str]:
    hits = [f"output:{n}" for n, line in enumerate(proc.stdout.splitlines()) if SENTINEL in line]
    hits += [f"stderr:{n}" for n, line in enumerate(proc.stderr.splitlines()) if SENTINEL in line]
    files = [p for p in run.rglob("*") if p.is_file()]
    hits += [str(p) for p in files if SENTINEL.encode() in p.read_bytes()]
    return hits


def real_api(kube_api: Any, namespace: str, *extra: str) -> list[str]:
    return [
        "-e", f"serving_kubeconfig={kube_api.kubeconfig}",
        "-e", f"serving_namespace={namespace}",
        "-e", "serving_gateway_timeout=1",
        *extra,
    ]  # fmt: skip


def test_a_failing_secret_task_never_prints_the_token(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path
) -> None:
    extra = real_api(kube_api, "no-log-refused", "-e", "serving_hf_token_secret=Bad_Secret_Name")
    proc, run = run_play(ansible_playbook, DATA / "play.yml", tmp_path, *extra)
    out = proc.stdout + proc.stderr
    # The run really went through the Secret the API refused and the role's rescue.
    assert proc.returncode == 2, out[-3000:]
    assert "TASK [serving : Apply the HF token Secret]" in out
    assert "Serving failed in deployment" in out
    assert "HF token Secret" in out.split("Serving failed in deployment")[-1]
    assert (run / "ansible.log").stat().st_size > 0
    assert sentinel_hits(proc, run) == []


def test_an_applied_secret_lets_the_deploy_go_on(
    ansible_playbook: Playbook, kube_api: Any, tmp_path: Path
) -> None:
    """The failure check reads only whether an object came back, and one does on success; the
    Secret, applied server-side, holds the token in no annotation."""
    proc, run = run_play(
        ansible_playbook, DATA / "play.yml", tmp_path, *real_api(kube_api, "no-log-applied")
    )
    out = proc.stdout + proc.stderr
    assert "TASK [serving : Remove the objects of deployments that left the list" in out, out[
        -3000:
    ]
    assert "Applying the HF token Secret" not in out
    assert sentinel_hits(proc, run) == []
    secret = client.CoreV1Api(kube_api.client()).read_namespaced_secret(
        "sparkrack-hf-token", "no-log-applied"
    )
    assert secret.data["token"] and SENTINEL not in json.dumps(secret.metadata.annotations or {})
    assert "kubectl.kubernetes.io/last-applied-configuration" not in (
        secret.metadata.annotations or {}
    )


def test_negative_control_a_rescue_that_echoes_the_result_is_caught(
    ansible_playbook: Playbook, tmp_path: Path
) -> None:
    proc, run = run_play(
        ansible_playbook, DATA / "echo.yml", tmp_path, ANSIBLE_COLLECTIONS_PATH=str(DATA)
    )
    assert proc.returncode == 2, proc.stdout[-3000:]
    hits = sentinel_hits(proc, run)
    assert any(h.startswith("output:") for h in hits)
    assert str(run / "ansible.log") in hits
