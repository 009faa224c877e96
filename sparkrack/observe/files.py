"""The shipped files under ``sparkrack/data/observe/``, rendered from :mod:`.rules` and
:mod:`.dashboards` (the tests fail when a file differs from what these functions render)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import yaml

from sparkrack.observe import dashboards, rules, stack

DATA: Final = Path(__file__).resolve().parent.parent / "data" / "observe"
RULES_FILE: Final = "sparkrack-rules.yml"
PROMETHEUS_RULE_FILE: Final = "prometheusrule.yml"
STACK_FILE: Final = "monitoring-stack.yml"
HEADER: Final = (
    "# Rendered by `python -m sparkrack.observe` from sparkrack/observe/; do not edit.\n"
)


class _Dumper(yaml.SafeDumper):
    """yamllint's layout: sequences indented under their key, multi-line strings as blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _yaml(data: object) -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
    return HEADER + "---\n" + body


def rendered() -> dict[str, str]:
    """Path relative to ``DATA`` -> text."""
    out = {
        RULES_FILE: _yaml(rules.rule_groups()),
        PROMETHEUS_RULE_FILE: _yaml(rules.prometheus_rule(stack.NAMESPACE)),
        STACK_FILE: _yaml(stack.stack_file()),
    }
    for name, board in dashboards.dashboards().items():
        out[f"dashboards/{name}"] = json.dumps(board, indent=2, sort_keys=True) + "\n"
    return out


def write_all(root: Path = DATA) -> list[Path]:
    written = []
    for rel, text in rendered().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
