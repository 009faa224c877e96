"""Jinja filters for the fabric netplan document. Thin wrappers: logic lives in sparkrack/netplan.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from ansible.errors import AnsibleFilterError  # noqa: E402

from sparkrack.errors import SparkrackError  # noqa: E402
from sparkrack.netplan import fabric_interfaces, netplan_config  # noqa: E402


def sparkrack_netplan(
    plan: Any, host: str, management_interfaces: list[str] | None = None, renderer: str = "networkd"
) -> dict[str, Any]:
    """``{{ sparkrack_plan | sparkrack_netplan(inventory_hostname, [mgmt_if]) | to_nice_yaml }}``."""
    try:
        return netplan_config(plan, host, management_interfaces or [], renderer)
    except SparkrackError as exc:
        raise AnsibleFilterError(f"fabric netplan refused:\n{exc}") from None


def sparkrack_fabric_interfaces(plan: Any, host: str) -> list[str]:
    try:
        return fabric_interfaces(plan, host)
    except SparkrackError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sparkrack_netplan": sparkrack_netplan,
            "sparkrack_fabric_interfaces": sparkrack_fabric_interfaces,
        }
