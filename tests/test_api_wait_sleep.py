"""Every wait on a Kubernetes object in the roles and playbooks reads it once a second (the
contract's ``api_wait_sleep_s``), not kubernetes.core's 5 s default: ``k8s`` and ``k8s_info``
with ``wait``, and ``k8s_drain``, which waits for each evicted pod under ``wait_timeout``. An
``until`` loop over ``k8s_info``, a module run per read, polls every ``api_poll_sleep_s``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack import contract

ROOT = Path(__file__).resolve().parent.parent
WAITING = ("kubernetes.core.k8s", "kubernetes.core.k8s_info")
SLEEP = "{{ sparkrack_contract.api_wait_sleep_s }}"
POLL = "{{ sparkrack_contract.api_poll_sleep_s }}"


def waits_without_the_contract_sleep(files: list[Path], root: Path = ROOT) -> list[str]:
    """``file: task`` of each kubernetes.core task that waits with another sleep than the
    contract's (none: the collection's 5 s)."""
    found: list[str] = []

    def walk(tasks: Any, path: Path) -> None:
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks"):
                walk(task.get(key), path)
            for module in WAITING:
                args = task.get(module)
                if not isinstance(args, dict):
                    continue
                if args.get("wait") is True and args.get("wait_sleep") != SLEEP:
                    found.append(f"{path.relative_to(root)}: {task.get('name')}")
            drain = task.get("kubernetes.core.k8s_drain")
            options = drain.get("delete_options") if isinstance(drain, dict) else None
            options = options if isinstance(options, dict) else {}
            if "wait_timeout" in options and options.get("wait_sleep") != SLEEP:
                found.append(f"{path.relative_to(root)}: {task.get('name')}")
            polls = "kubernetes.core.k8s_info" in task and "until" in task
            if polls and task.get("delay") != POLL:
                found.append(f"{path.relative_to(root)}: {task.get('name')}")

    for path in files:
        walk(yaml.safe_load(path.read_text()), path)
    return found


def task_files() -> list[Path]:
    return sorted([*ROOT.glob("roles/*/tasks/**/*.yml"), *ROOT.glob("playbooks/*.yml")])


def test_every_object_wait_reads_the_api_once_a_second() -> None:
    files = task_files()
    assert waits_without_the_contract_sleep(files) == []
    assert contract.contract_fact()["api_wait_sleep_s"] == contract.API_WAIT_SLEEP_S == 1
    assert contract.contract_fact()["api_poll_sleep_s"] == contract.API_POLL_SLEEP_S == 2


NO_WAIT_SLEEP = (r"\n *wait_sleep: .*", "")
PLANTED = [
    # (file, (pattern, replacement), the one task the checker must then name)
    ("roles/k3s_agent/tasks/main.yml", NO_WAIT_SLEEP,
     "main.yml: Wait until this Spark is Ready before the next one is touched"),
    ("playbooks/upgrade.yml", NO_WAIT_SLEEP,
     "upgrade.yml: Drain this Spark (DaemonSet pods stay)"),
    ("roles/fabric_gate/tasks/sweep.yml", (re.escape(f'delay: "{POLL}"'), "delay: 5"),
     "sweep.yml: Wait until every pod finished — {{ fabric_gate_sweep.name }}"),
]  # fmt: skip


@pytest.mark.parametrize(("rel", "edit", "named"), PLANTED, ids=["wait", "drain", "poll"])
def test_negative_control_a_planted_default_sleep_is_found(
    rel: str, edit: tuple[str, str], named: str, tmp_path: Path
) -> None:
    original = (ROOT / rel).read_text()
    text = re.sub(edit[0], edit[1], original)
    assert text != original
    planted = tmp_path / Path(rel).name
    planted.write_text(text)
    assert waits_without_the_contract_sleep([planted], tmp_path) == [named]
