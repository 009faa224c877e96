"""Read an Ansible inventory directory the way ansible-playbook does.

The CLI (``sparkrack render --inventory DIR``) must see the same variables as the playbooks, so
this uses ansible-core's own InventoryManager/VariableManager instead of parsing YAML by hand.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkrack.errors import Problem, SparkrackError
from sparkrack.fabric.addressplan import FabricPlan, in_fabric, nodes_from_hostvars, rail_subnets
from sparkrack.fabric.layout import compute_plan

SPARK_GROUP = "sparks"
CONTROL_PLANE_GROUP = "control_plane"
HARDWARE = ("real", "simulated")
ADDRESS_VARS = ("ansible_host", "k3s_node_ip", "mgmt_ip")
"""Host variables that carry a host's management address."""


def group_problems(
    groups: Mapping[str, Sequence[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    source: str = "inventory",
) -> list[Problem]:
    """What the inventory's groups must satisfy before a plan is computed (preflight and
    ``sparkrack addresses`` both ask): Sparks, exactly one control plane, ``spark_hardware``, and
    no control-plane address inside ``fabric.subnet``."""
    problems: list[Problem] = []
    sparks = list(groups.get(SPARK_GROUP) or [])
    control = list(groups.get(CONTROL_PLANE_GROUP) or [])
    if not sparks:
        problems.append(
            Problem(
                source,
                SPARK_GROUP,
                "the inventory has no 'sparks' group or it is empty",
                "list the DGX Sparks under 'sparks' (see inventories/example/hosts.yml)",
            )
        )
    if len(control) != 1:
        problems.append(
            Problem(
                source,
                CONTROL_PLANE_GROUP,
                f"has {len(control)} host(s) ({', '.join(control) or 'none'}); exactly one is needed",
                "put the one x86 K3s server under 'control_plane' (see inventories/example/hosts.yml)",
            )
        )
    for host in sparks + control:
        hardware = hostvars.get(host, {}).get("spark_hardware")
        if hardware not in HARDWARE:
            problems.append(
                Problem(
                    source,
                    f"{host}.spark_hardware",
                    f"is {hardware!r}, not one of {', '.join(HARDWARE)}",
                    "set spark_hardware: real (DGX Sparks) or simulated (the lab) in group_vars",
                )
            )
    fabric = next((hostvars.get(h, {}).get("fabric") for h in sparks + control), None)
    subnet_raw = fabric.get("subnet") if isinstance(fabric, Mapping) else None
    rails = fabric.get("rails") if isinstance(fabric, Mapping) else None
    try:
        nets = rail_subnets(
            ipaddress.IPv4Network(str(subnet_raw)),
            len(rails) if isinstance(rails, list) and rails else 1,
        )
    except ValueError:
        nets = []  # compute_plan names a bad subnet or too many rails
    for host in control if subnet_raw else []:
        for var in ADDRESS_VARS:
            address = str(hostvars.get(host, {}).get(var))
            # A DNS name or unset is nothing to compare.
            inside = in_fabric(address, nets)
            if inside is not None:
                problems.append(
                    Problem(
                        source,
                        f"{host}.{var}",
                        f"control-plane address {address} lies inside the fabric subnet {inside}",
                        "reach the control plane over the management network; the QSFP fabric "
                        "links the Sparks only",
                    )
                )
    return problems


@dataclass(frozen=True)
class Inventory:
    path: Path
    groups: dict[str, list[str]]
    hostvars: dict[str, dict[str, Any]]

    @property
    def sparks(self) -> list[str]:
        return list(self.groups.get(SPARK_GROUP, []))

    def var(self, name: str, default: Any = None, host: str | None = None) -> Any:
        """A variable as a Spark (or ``host``) sees it; group_vars/all apply to every host."""
        hosts = [host] if host else self.sparks or list(self.hostvars)
        for h in hosts:
            if name in self.hostvars.get(h, {}):
                return self.hostvars[h][name]
        return default

    def plan(self) -> FabricPlan:
        """The address plan, after the same group checks preflight makes (all problems at once)."""
        problems = group_problems(self.groups, self.hostvars, str(self.path))
        try:
            plan = self._plan()
        except SparkrackError as exc:
            raise SparkrackError(problems + list(exc.problems)) from None
        if problems:
            raise SparkrackError(problems)
        return plan

    def _plan(self) -> FabricPlan:
        fabric = self.var("fabric")
        if fabric is None:
            raise SparkrackError(
                Problem(
                    str(self.path),
                    "fabric",
                    "is not set",
                    "define the fabric block in group_vars/all.yml",
                )
            )
        return compute_plan(
            fabric, nodes_from_hostvars(self.sparks, self.hostvars), source=str(self.path)
        )


def load_inventory(path: str | Path) -> Inventory:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    inv_path = Path(path)
    if not inv_path.exists():
        raise SparkrackError(
            Problem(
                str(inv_path), "inventory", "does not exist", "pass --inventory inventories/<name>"
            )
        )
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(inv_path)])
    variables = VariableManager(loader=loader, inventory=manager)
    groups = {
        str(name): [str(h.name) for h in group.get_hosts()]
        for name, group in manager.groups.items()
    }
    hostvars: dict[str, dict[str, Any]] = {}
    for host in manager.get_hosts():
        raw = variables.get_vars(host=host, include_hostvars=False)
        hostvars[str(host.name)] = {str(k): plain(v) for k, v in raw.items()}
    return Inventory(path=inv_path, groups=groups, hostvars=hostvars)


def plain(value: Any) -> Any:
    """Strip ansible's tagged/unsafe wrappers so values are plain Python data."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value
