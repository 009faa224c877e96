"""Jinja filters exposing the sparkrack core to Ansible. Thin wrappers only: logic lives in sparkrack/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# Make the checkout's package importable when ansible-playbook runs without `pip install -e .`.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from ansible.errors import AnsibleFilterError  # noqa: E402

from sparkrack.addressplan import compute_plan, nodes_from_hostvars  # noqa: E402
from sparkrack.contract import contract_fact  # noqa: E402
from sparkrack.errors import SparkrackError  # noqa: E402
from sparkrack.inventory import group_problems  # noqa: E402


def fabric_plan(
    fabric: Any, hosts: list[str], hostvars: Any, source: str = "inventory"
) -> dict[str, Any]:
    """``{{ fabric | sparkrack_fabric_plan(groups['sparks'], hostvars) }}`` -> the plan as a dict."""
    try:
        plan = compute_plan(fabric, nodes_from_hostvars(hosts, hostvars), source=source)
    except SparkrackError as exc:
        raise AnsibleFilterError(f"address plan refused:\n{exc}") from None
    return plan.to_dict()


def inventory_problems(groups: Any, hostvars: Any, source: str = "inventory") -> list[str]:
    """``{{ groups | sparkrack_inventory_problems(hostvars, inventory_dir) }}`` -> [] when sound."""
    return [str(p) for p in group_problems(groups, hostvars, source)]


def contract(home: str) -> dict[str, Any]:
    """``{{ lookup('env', 'HOME') | sparkrack_contract }}`` -> the names of sparkrack/contract.py."""
    return contract_fact(str(home))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sparkrack_fabric_plan": fabric_plan,
            "sparkrack_contract": contract,
            "sparkrack_inventory_problems": inventory_problems,
        }
