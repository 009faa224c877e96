"""docs/architecture.md's "who can reach what" table is the lab render's NetworkPolicies,
written out; a stale row is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkrack.serving.deployments.bundle import from_inventory, in_apply_order, render_serving
from sparkrack.serving.objects.reach import reach_table, shipped

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "architecture.md"


@pytest.fixture(scope="module")
def rendered() -> str:
    return reach_table(in_apply_order(render_serving(from_inventory(ROOT / "inventories" / "lab"))))


def test_the_architecture_table_is_the_render(rendered: str) -> None:
    assert shipped(PAGE.read_text()) == rendered, (
        "docs/architecture.md's who-can-reach-what table drifted from the render: replace the "
        "block between its markers with sparkrack.serving.objects.reach.reach_table(...) of "
        "in_apply_order(render_serving(from_inventory('inventories/lab')))"
    )


def test_a_stale_row_is_caught(rendered: str) -> None:
    """Negative control: the row of the watchdog's egress as it was before egress was limited
    (the API port of any host), planted in the page."""
    text = PAGE.read_text()
    row = next(
        r for r in shipped(text).splitlines() if "`sparkrack-agents/sparkrack-gemma-watchdog`" in r
    )
    stale = row.replace("the API server (172.28.250.10/32) at 6443/TCP", "anyone at 6443/TCP")
    assert stale != row
    assert shipped(text.replace(row, stale)) != rendered


def test_every_policy_has_a_row_and_no_pod_sends_unlimited(rendered: str) -> None:
    docs = in_apply_order(render_serving(from_inventory(ROOT / "inventories" / "lab")))
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    rows = [r for r in rendered.splitlines() if r.startswith("| ") and "`" in r]
    assert len(rows) == len(policies)
    assert "(not limited)" not in rendered and "| anyone" not in rendered
