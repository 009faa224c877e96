"""Every variable a playbook reads, or the lab passes with ``-e``, is in the variable table.

The inventory check refuses a name of sparkrack's namespaces that the table does not know
(:mod:`sparkrack.inputs.variables`). A playbook that reads such a name, or a driver that passes
it with ``-e``, would be refused by sparkrack's own first play: ``make lab`` was, for
``sparkrack_summary_file``. This walks every playbook's Jinja (expressions and conditions) and
``lab/lab.py``'s ``-e`` arguments for the names of the closed namespaces they read, less the ones
the plays set themselves, and fails on any the table lacks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import pytest
import yaml

from sparkrack.inputs.variables import COMPUTED, closed, known_names

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = [ROOT / "site.yml", *sorted((ROOT / "playbooks").glob("*.yml"))]
DRIVERS = [ROOT / "lab" / "lab.py"]

CONDITIONS = {"when", "failed_when", "changed_when", "until", "that"}
"""Keys whose value Ansible evaluates as a bare Jinja expression."""


class _Any(dict[str, Any]):
    """Every filter and test name is known: the walk reads names, it never renders."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> Any:
        return lambda *args, **kwargs: None

    def get(self, key: str, default: Any = None) -> Any:
        return self[key]


ENV = jinja2.Environment()
ENV.filters = _Any()
ENV.tests = _Any()


def _expressions(node: Any, key: str = "") -> Iterator[str]:
    """Every Jinja template of a parsed playbook, conditions wrapped as ``{{ ... }}``."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _expressions(v, str(k))
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item, key)
    elif isinstance(node, str):
        if key in CONDITIONS and "{{" not in node:
            yield "{{ " + node + " }}"
        elif "{{" in node or "{%" in node:
            yield node


def _set_here(node: Any) -> Iterator[str]:
    """Names the plays themselves define: set_fact keys, register, vars, loop_var."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("ansible.builtin.set_fact", "set_fact", "vars") and isinstance(v, dict):
                yield from (str(name) for name in v)
            elif k == "register" and isinstance(v, str):
                yield v
            elif k == "loop_control" and isinstance(v, dict) and "loop_var" in v:
                yield str(v["loop_var"])
            yield from _set_here(v)
    elif isinstance(node, list):
        for item in node:
            yield from _set_here(item)


def read_by_playbook(text: str) -> set[str]:
    """The names of sparkrack's namespaces a playbook reads and does not set itself."""
    doc = yaml.safe_load(text)
    read: set[str] = set()
    for template in _expressions(doc):
        read |= jinja2.meta.find_undeclared_variables(ENV.parse(template))
    return {n for n in read - set(_set_here(doc)) if closed(n)}


_DASH_E = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")


def passed_by_driver(source: str) -> set[str]:
    """The names a Python driver passes as ``-e NAME=...`` (the string after an ``"-e"``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.List, ast.Tuple)):
            continue
        items = node.elts
        for flag, value in zip(items, items[1:], strict=False):
            if not (isinstance(flag, ast.Constant) and flag.value in ("-e", "--extra-vars")):
                continue
            text = ""
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                text = value.value
            elif isinstance(value, ast.JoinedStr) and value.values:
                first = value.values[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    text = first.value
            match = _DASH_E.match(text)
            if match:
                names.add(match.group(1))
    return names


def unknown(names: set[str]) -> set[str]:
    known = known_names()
    return {n for n in names if closed(n) and n not in known and n not in COMPUTED}


@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.name)
def test_every_variable_a_playbook_reads_is_in_the_table(path: Path) -> None:
    missing = unknown(read_by_playbook(path.read_text()))
    assert not missing, f"{path.name} reads {sorted(missing)}: add each to VARIABLES"


@pytest.mark.parametrize("path", DRIVERS, ids=lambda p: p.name)
def test_every_variable_the_lab_passes_is_in_the_table(path: Path) -> None:
    passed = passed_by_driver(path.read_text())
    assert passed, f"{path.name} passes no -e variable: the walk found nothing to check"
    missing = unknown(passed)
    assert not missing, f"{path.name} passes {sorted(missing)} with -e: add each to VARIABLES"


def test_the_walk_finds_what_the_playbooks_read() -> None:
    summary = read_by_playbook((ROOT / "playbooks" / "summary.yml").read_text())
    assert "sparkrack_summary_file" in summary
    reset = read_by_playbook((ROOT / "playbooks" / "reset.yml").read_text())
    assert {"serving_hf_cache", "sparkrack_kubeconfig"} <= reset


def test_a_planted_unknown_variable_is_found() -> None:
    play = """
- name: Planted
  hosts: all
  tasks:
    - name: Reads a variable nothing declares
      ansible.builtin.debug:
        msg: "{{ serving_plantd_typo | default('x') }}"
      when: sparkrack_planted_switch | bool
    - name: Sets its own fact, which is not an input
      ansible.builtin.set_fact:
        serving_local_fact: 1
    - name: Reads it
      ansible.builtin.debug:
        msg: "{{ serving_local_fact }}"
"""
    assert unknown(read_by_playbook(play)) == {"serving_plantd_typo", "sparkrack_planted_switch"}
    driver = 'cmd = ["ansible-playbook", "-e", f"sparkrack_planted_file={x}", "-e", "a=1"]\n'
    assert passed_by_driver(driver) == {"sparkrack_planted_file", "a"}
    assert unknown(passed_by_driver(driver)) == {"sparkrack_planted_file"}


def test_the_lab_with_its_summary_file_passes_the_check_and_a_relative_one_is_refused() -> None:
    from test_variables import refusals

    assert refusals({"sparkrack_summary_file": "/work/lab/.state/summary.json"}) == []
    refused = refusals({"sparkrack_summary_file": "summary.json"})
    assert [(key, message) for _, key, message in refused] == [
        ("sparkrack_summary_file", "'summary.json' is not an absolute path")
    ]
