"""Read an Ansible inventory directory the way ansible-playbook does.

The CLI (``sparkrack render --inventory DIR``) must see the same variables as the playbooks, so
this uses ansible-core's own InventoryManager/VariableManager instead of parsing YAML by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkrack.addressplan import FabricPlan, compute_plan, nodes_from_hostvars
from sparkrack.errors import Problem, SparkrackError

SPARK_GROUP = "sparks"
CONTROL_PLANE_GROUP = "control_plane"


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
