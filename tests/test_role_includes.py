"""Roles share work through whole roles, never through each other's task files.

Inside roles/<name>/, an ``include_role``/``import_role`` that picks a task file
(``tasks_from``, ``handlers_from``, ``vars_from``, ``defaults_from``) of ANOTHER role is refused:
that is reaching into its private files and setting its private variables. A playbook may call a
role's entry point only when the role declares it in meta/argument_specs.yml (its public API).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
INCLUDES = {
    "include_role",
    "import_role",
    "ansible.builtin.include_role",
    "ansible.builtin.import_role",
}
FROM_KEYS = ("tasks_from", "handlers_from", "vars_from", "defaults_from")


def role_calls(node: Any) -> Iterator[dict[str, Any]]:
    """Every include_role/import_role argument mapping in a parsed YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in INCLUDES and isinstance(value, dict):
                yield value
            else:
                yield from role_calls(value)
    elif isinstance(node, list):
        for item in node:
            yield from role_calls(item)


def entry_points(root: Path, role: str) -> set[str]:
    spec = root / "roles" / role / "meta" / "argument_specs.yml"
    if not spec.is_file():
        return set()
    return set((yaml.safe_load(spec.read_text()) or {}).get("argument_specs", {}))


def include_problems(root: Path) -> list[str]:
    problems: list[str] = []
    files = sorted((root / "roles").rglob("*.yml")) + sorted((root / "playbooks").rglob("*.yml"))
    for path in files:
        rel = path.relative_to(root)
        owner = rel.parts[1] if rel.parts[0] == "roles" else None
        for doc in yaml.safe_load_all(path.read_text()):
            for call in role_calls(doc):
                target = str(call.get("name", "")).rsplit(".", 1)[-1]
                for key in FROM_KEYS:
                    if key not in call:
                        continue
                    entry = str(call[key]).removesuffix(".yml").removesuffix(".yaml")
                    if owner is not None and target != owner:
                        problems.append(f"{rel}: {owner} includes {target} {key}={call[key]}")
                    elif owner is None and entry not in entry_points(root, target):
                        problems.append(
                            f"{rel}: {key}={call[key]} of {target} is not an entry point in "
                            f"roles/{target}/meta/argument_specs.yml"
                        )
    return problems


def test_no_role_reaches_into_another_role() -> None:
    assert include_problems(ROOT) == []


def test_the_shared_install_is_a_whole_role() -> None:
    """k3s_server and k3s_agent both include k3s_install, as a role."""
    for role in ("k3s_server", "k3s_agent"):
        doc = yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text())
        names = [c.get("name") for c in role_calls(doc)]
        assert "k3s_install" in names, role
        text = (ROOT / "roles" / role / "tasks" / "main.yml").read_text()
        assert "noqa" not in text, role


def write(root: Path, rel: str, data: Any) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))


def test_a_cross_role_task_file_is_refused(tmp_path: Path) -> None:
    write(
        tmp_path,
        "roles/agent/tasks/main.yml",
        [{"name": "x", "ansible.builtin.include_role": {"name": "server", "tasks_from": "node"}}],
    )
    assert include_problems(tmp_path) == [
        "roles/agent/tasks/main.yml: agent includes server tasks_from=node"
    ]


def test_a_playbook_may_call_only_declared_entry_points(tmp_path: Path) -> None:
    write(
        tmp_path, "roles/r/meta/argument_specs.yml", {"argument_specs": {"main": {}, "probe": {}}}
    )
    play = [
        {
            "hosts": "all",
            "tasks": [
                {"ansible.builtin.include_role": {"name": "r", "tasks_from": "probe"}},
                {"ansible.builtin.include_role": {"name": "r", "tasks_from": "private.yml"}},
                {"ansible.builtin.include_role": {"name": "r"}},
            ],
        }
    ]
    write(tmp_path, "playbooks/p.yml", play)
    assert include_problems(tmp_path) == [
        "playbooks/p.yml: tasks_from=private.yml of r is not an entry point in "
        "roles/r/meta/argument_specs.yml"
    ]


def test_a_role_including_itself_or_a_whole_role_passes(tmp_path: Path) -> None:
    write(
        tmp_path,
        "roles/a/tasks/main.yml",
        [
            {"ansible.builtin.include_role": {"name": "a", "tasks_from": "other"}},
            {"ansible.builtin.include_role": {"name": "b"}},
        ],
    )
    assert include_problems(tmp_path) == []
