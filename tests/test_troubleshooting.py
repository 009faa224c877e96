"""docs/guide/troubleshooting.md has a row for every wait task of the serve play (roles/serving/tasks),
and each row's time limit names the variable or figure the task waits for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "roles" / "serving" / "tasks"
PAGE = ROOT / "docs" / "guide" / "troubleshooting.md"
WAIT_ARGS = ("wait_timeout", "wait_condition")


def _module_args(task: dict[str, Any]) -> dict[str, Any]:
    return next(
        (v for k, v in task.items() if "." in k and isinstance(v, dict)),
        {},
    )


SHARED_WAIT = "wait.yml"
"""The serve role's one wait (roles/serving/tasks/wait.yml), included once per kind of object
with ``serving_wait_what`` and ``serving_wait_timeout``: each include is a wait of its own."""


def _shared_wait_title() -> str:
    first = yaml.safe_load((TASKS / SHARED_WAIT).read_text())[0]
    return title(first)


def _included_wait(task: dict[str, Any]) -> dict[str, Any] | None:
    """An include of the shared wait, as the task the play prints: its title, then what."""
    include = next((v for k, v in task.items() if k.endswith("include_tasks")), None)
    variables = task.get("vars") or {}
    if include != SHARED_WAIT or "serving_wait_what" not in variables:
        return None
    what = re.sub(r"\{\{.*?\}\}", "DEPLOYMENT", str(variables["serving_wait_what"]))
    return {
        "name": f"{_shared_wait_title()} — {what}",
        "kubernetes.core.k8s_info": {"wait_timeout": variables.get("serving_wait_timeout", "")},
    }


def wait_tasks(tasks: list[Any]) -> list[dict[str, Any]]:
    """Every task that waits: a module told to wait, an until/retries loop or a wait_for, and
    each include of the shared wait."""
    found: list[dict[str, Any]] = []
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        for nested in ("block", "rescue", "always"):
            found += wait_tasks(task.get(nested, []))
        included = _included_wait(task)
        if included is not None:
            found.append(included)
            continue
        args = _module_args(task)
        if (
            "until" in task
            or "retries" in task
            or args.get("wait") is True
            or any(key in args for key in WAIT_ARGS)
            or any(key.endswith("wait_for") for key in task)
        ):
            found.append(task)
    return found


def title(task: dict[str, Any]) -> str:
    """The task's name without the per-item suffix (`` — {{ ... }}``)."""
    return re.sub(r"\s*—\s*\{\{.*\}\}\s*$", "", str(task["name"])).strip()


def limit(task: dict[str, Any]) -> str | None:
    """The variable the task's time limit reads (None: a literal or a retry count)."""
    timeout = str(_module_args(task).get("wait_timeout", ""))
    found = re.search(r"\{\{\s*(?:serving_rendered\.switch\.)?(\w+)", timeout)
    if found is None:
        return None
    name = found.group(1)
    return name if name.startswith("serving_") else f"serving_{name}"


def rows(page: str) -> dict[str, list[str]]:
    """The page's table rows: the first cell (the task) -> the other cells."""
    table: dict[str, list[str]] = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 5 and not set(cells[0]) <= {"-"}:
            table[cells[0]] = cells[1:]
    return table


def missing(tasks: list[dict[str, Any]], page: str) -> list[str]:
    """What the page lacks: a task without a row, or a row whose limit omits the variable."""
    table = rows(page)
    out = []
    for task in tasks:
        name = title(task)
        if name not in table:
            out.append(f"no row for {name!r}")
            continue
        variable = limit(task)
        if variable is not None and variable not in table[name][0]:
            out.append(f"{name!r}: its time limit does not name {variable}")
    return out


def serve_wait_tasks() -> list[dict[str, Any]]:
    found = []
    for path in sorted(TASKS.rglob("*.yml")):
        if path.name == SHARED_WAIT:
            continue  # its task is a template: each include above is one wait
        found += wait_tasks(yaml.safe_load(path.read_text()) or [])
    return found


def test_the_serve_role_has_wait_tasks() -> None:
    names = {title(t) for t in serve_wait_tasks()}
    shared = _shared_wait_title()
    assert f"{shared} — the weight download and copy Jobs" in names
    assert f"{shared} — the ranks of DEPLOYMENT" in names
    assert len(names) >= 8


def test_every_wait_task_has_a_row() -> None:
    assert missing(serve_wait_tasks(), PAGE.read_text()) == []


def test_a_new_wait_without_a_row_fails() -> None:
    planted = yaml.safe_load(
        """
- name: Wait until the new thing is Ready — {{ serving_deployment.name }}
  kubernetes.core.k8s_info:
    kind: Pod
    wait: true
    wait_timeout: "{{ serving_new_timeout }}"
- name: Poll the new thing
  ansible.builtin.uri:
    url: http://x
  until: false
  retries: 3
- name: Not a wait
  ansible.builtin.debug:
    msg: hello
"""
    )
    assert missing(serve_wait_tasks() + wait_tasks(planted), PAGE.read_text()) == [
        "no row for 'Wait until the new thing is Ready'",
        "no row for 'Poll the new thing'",
    ]


def test_a_row_with_the_wrong_limit_fails() -> None:
    page = PAGE.read_text().replace("`serving_ready_timeout` (2 400 s)", "2 400 s")
    assert missing(serve_wait_tasks(), page) == [
        f"'{_shared_wait_title()} — the ranks of DEPLOYMENT': its time limit does not name "
        "serving_ready_timeout"
    ]
