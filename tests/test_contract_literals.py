"""No contract name is spelled out in roles/ or playbooks/: labels, object and service names, mount
paths, the kubeconfig path and the K3s CNI folder come from sparkrack/contract.py, which preflight
exports once as the ``sparkrack_contract`` fact.

The scanner reads YAML as data (comments are not code) and templates as text. A distinctive value
(a path, a label key, a file name, a ``sparkrack-*`` object name) is refused anywhere in a
string; a plain word (``sparkrack``, ``serving``, ``fabric-check``) only where it stands alone as
a value or as a quoted string inside a Jinja expression, because the same word also names roles,
folders and CLI commands. Task names, descriptions and Galaxy metadata are prose and are not
scanned.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack import contract
from sparkrack.adapters.ansible import contract as fact
from sparkrack.inputs.variable_table import SERVING_DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("roles", "playbooks")
PROSE_KEYS = {"name", "description", "short_description", "role", "galaxy_info"}
# Contract names by shape, whatever their value (a label under the contract's prefix, ...).
PATTERNS = {
    "sparkrack.io/": re.compile(r"sparkrack\.io/"),
    contract.LABEL_PART_OF: re.compile(re.escape(contract.LABEL_PART_OF)),
    contract.LAUNCHER_MOUNT: re.compile(re.escape(contract.LAUNCHER_MOUNT) + r"(/|\b)"),
    ".kube/": re.compile(r"\.kube/"),
    contract.K3S_CNI_BIN_DIR: re.compile(re.escape(contract.K3S_CNI_BIN_DIR)),
}


def contract_strings() -> set[str]:
    """Every string contract.py exports: module constants, label keys of its dicts, the fact's values.

    The fact's own keys and SERVING_DEFAULTS' keys are the names roles use to read the values
    (``sparkrack_contract.api_service``, ``serving_namespace``): they are not contract literals.
    """
    out: set[str] = set()

    def add(value: Any) -> None:
        if isinstance(value, str):
            out.add(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and "/" in key:  # a label key such as part-of
                    add(key)
                add(item)

    for name, value in vars(contract).items():
        if name.isupper():
            add(value)
    add(fact(""))
    return {s for s in out if s}


def distinctive(value: str) -> bool:
    """A path, a label key, a file name or an object name under the contract's prefix."""
    return "/" in value or "." in value or value.startswith(contract.OBJECT_PREFIX + "-")


def yaml_strings(node: Any, key: str = "") -> Iterator[str]:
    """Every string value (and mapping key) of a YAML document, prose keys left out."""
    if key in PROSE_KEYS:
        return
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str):
                yield k
            yield from yaml_strings(v, str(k))
    elif isinstance(node, list):
        for item in node:
            yield from yaml_strings(item, key)


def file_strings(path: Path) -> Iterator[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix in (".yml", ".yaml"):
        for doc in yaml.safe_load_all(text):
            yield from yaml_strings(doc)
    else:  # templates and shipped files: every line that is not a comment
        yield from (line for line in text.splitlines() if not line.lstrip().startswith("#"))


def literal_hits(root: Path, names: set[str]) -> list[str]:
    """``file: literal`` for every contract name spelled out under root/roles and root/playbooks."""
    hits: list[str] = []
    plain = {n for n in names if not distinctive(n)}
    marked = {n for n in names if distinctive(n)}
    for top in SCANNED:
        for path in sorted((root / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(root)
            for text in file_strings(path):
                found = {shown for shown, p in PATTERNS.items() if p.search(text)}
                found |= {n for n in marked if n in text}
                found |= {n for n in plain if text.strip() == n}
                found |= {n for n in plain if re.search(rf"['\"]{re.escape(n)}['\"]", text)}
                hits += [f"{rel}: {n!r} in {text.strip()[:100]!r}" for n in sorted(found)]
    return hits


def test_the_scanner_knows_the_names_of_this_issue() -> None:
    names = contract_strings()
    for name in (
        contract.API_SERVICE,
        contract.LABEL_COMPONENT,
        contract.LAUNCHER_MOUNT,
        contract.KUBECONFIG_FILE,
        contract.K3S_CNI_BIN_DIR,
        contract.PART_OF_VALUE,
        f"{contract.LAUNCHER_MOUNT}/{contract.SMOKE_FILE}",
        f"{contract.LABEL_COMPONENT}={contract.COMPONENT_FABRIC_CHECK}",
        SERVING_DEFAULTS["serving_hf_token_secret"],
    ):
        assert name in names


def test_no_contract_literal_in_roles_or_playbooks() -> None:
    assert literal_hits(ROOT, contract_strings()) == []


def plant(tmp_path: Path, rel: str, text: str) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("rel", "text", "literal"),
    [
        (
            "roles/x/tasks/main.yml",
            "- name: Pods\n  kubernetes.core.k8s_info:\n"
            "    label_selectors: [sparkrack.io/component=serving]\n",
            "sparkrack.io/",
        ),
        (
            "roles/x/tasks/main.yml",
            "- name: Smoke\n  ansible.builtin.command: python3 /opt/sparkrack/smoke_chat.py\n",
            contract.LAUNCHER_MOUNT,
        ),
        ("roles/x/defaults/main.yml", "x_service: sparkrack-openai\n", contract.API_SERVICE),
        ("roles/x/defaults/main.yml", "x_namespace: sparkrack\n", contract.PART_OF_VALUE),
        (
            "playbooks/p.yml",
            "- hosts: all\n  vars:\n    l: \"{{ {'app': 'sparkrack'} }}\"\n",
            contract.PART_OF_VALUE,
        ),
        ("roles/x/defaults/main.yml", "x_kubeconfig: ~/.kube/sparkrack.yaml\n", ".kube/"),
        (
            "roles/x/templates/u.j2",
            "# comment /var/lib/rancher/k3s/data/cni\nExec=/var/lib/rancher/k3s/data/cni/x\n",
            contract.K3S_CNI_BIN_DIR,
        ),
    ],
)
def test_a_planted_literal_is_found(tmp_path: Path, rel: str, text: str, literal: str) -> None:
    plant(tmp_path, rel, text)
    hits = literal_hits(tmp_path, contract_strings())
    assert hits and any(repr(literal) in hit for hit in hits), hits


def test_names_read_from_the_fact_and_prose_pass(tmp_path: Path) -> None:
    plant(
        tmp_path,
        "roles/x/tasks/main.yml",
        "# the sparkrack-openai Service (a comment)\n"
        "- name: Call sparkrack-openai on its /opt/sparkrack mount\n"
        "  ansible.builtin.debug:\n"
        '    msg: "{{ sparkrack_contract.api_service }} {{ sparkrack_contract.smoke_path }}"\n'
        "- name: A role named like a component\n"
        "  ansible.builtin.include_role:\n"
        "    name: serving\n",
    )
    plant(tmp_path, "playbooks/p.yml", "- hosts: all\n  roles:\n    - role: serving\n")
    assert literal_hits(tmp_path, contract_strings()) == []


def test_the_fact_carries_the_kubeconfig_under_the_given_home() -> None:
    fact = contract.contract_fact("/home/owner/")
    assert fact["kubeconfig"] == "/home/owner/" + contract.KUBECONFIG_FILE
    assert "kubeconfig" not in contract.contract_fact()
    assert fact["part_of_selector"] == "=".join(next(iter(contract.PART_OF.items())))
