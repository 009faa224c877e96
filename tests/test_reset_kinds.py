"""reset.yml removes every cluster-scoped object the serve render makes: deleting the serving
namespace takes the namespaced ones, not these (the memory guard's admission policy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sparkrack.serving.deployments.bundle import from_inventory, render_serving

ROOT = Path(__file__).resolve().parent.parent


def reset_kinds(text: str) -> set[str]:
    """The kinds reset.yml removes, by name: sparkrack_k8s_labelled removes a kind in every
    API group that serves it."""
    [play] = [p for p in yaml.safe_load(text) if "reset_kinds" in p.get("vars", {})]
    return set(play["vars"]["reset_kinds"])


def cluster_scoped(docs: list[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in docs if "namespace" not in d["metadata"]}


def test_reset_removes_every_cluster_scoped_kind_the_serve_render_makes() -> None:
    docs = render_serving(from_inventory(ROOT / "inventories" / "lab"))["manifests"]
    made = cluster_scoped(docs)
    assert {"ValidatingAdmissionPolicy", "PersistentVolume"} <= made
    assert made <= reset_kinds((ROOT / "playbooks" / "reset.yml").read_text())


def test_negative_control_a_kind_left_out_is_missing() -> None:
    text = (ROOT / "playbooks" / "reset.yml").read_text()
    lines = [line for line in text.splitlines() if line.strip() != "- ValidatingAdmissionPolicy"]
    assert len(lines) == len(text.splitlines()) - 1
    docs = render_serving(from_inventory(ROOT / "inventories" / "lab"))["manifests"]
    assert not cluster_scoped(docs) <= reset_kinds("\n".join(lines))
