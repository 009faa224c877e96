"""The shipped files under ``sparkrack/data/observe/``, rendered from :mod:`.rules` and
:mod:`.dashboards` (the tests fail when a file differs from what these functions render)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import yaml

from sparkrack.observe import dashboards, rules

DATA: Final = Path(__file__).resolve().parent.parent / "data" / "observe"
RULES_FILE: Final = "sparkrack-rules.yml"
PROMETHEUS_RULE_FILE: Final = "prometheusrule.yml"
HEADER: Final = (
    "# Rendered by `python -m sparkrack.observe` from sparkrack/observe/; do not edit.\n"
)


def _yaml(data: object) -> str:
    return HEADER + "---\n" + yaml.safe_dump(data, sort_keys=False, width=100)


def rendered() -> dict[str, str]:
    """Path relative to ``DATA`` -> text."""
    out = {
        RULES_FILE: _yaml(rules.rule_groups()),
        PROMETHEUS_RULE_FILE: _yaml(rules.prometheus_rule()),
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
