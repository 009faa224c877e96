"""The shipped Grafana dashboards: well-formed, and every panel reads a metric that an engine or
exporter exports (directly, or through a shipped recording rule)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkrack.observe import dashboards, rules
from sparkrack.observe.files import DATA
from sparkrack.observe.metrics import series_names
from sparkrack.observe.promql import metric_names

SHIPPED = sorted(dashboards.FILE_NAMES.values())


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "dashboards" / name).read_text())
    return data


@pytest.mark.parametrize("name", SHIPPED)
def test_every_panel_query_names_an_exported_metric(name: str) -> None:
    queries = dashboards.panel_queries(load(name))
    assert queries
    for title, expr in queries:
        assert metric_names(expr), f"{name} {title!r}: no metric in {expr}"
        assert dashboards.unknown_metrics(expr) == set(), f"{name} {title!r}: {expr}"


def test_recording_rules_read_only_exported_metrics() -> None:
    for rule in rules.recording_rules():
        names = metric_names(rule["expr"])
        assert names and names <= series_names(), rule["record"]


def test_the_check_flags_an_unexported_metric() -> None:
    """Negative control: a panel reading a name no engine exports is caught."""
    board = load("sparkrack-serving.json")
    board["panels"][0]["targets"][0]["expr"] = (
        'sum(rate(sglang:tokens_per_joule_total{deployment=~"$deployment"}[5m]))'
    )
    bad = [t for t, e in dashboards.panel_queries(board) if dashboards.unknown_metrics(e)]
    assert bad == [board["panels"][0]["title"]]
    assert dashboards.unknown_metrics("vllm:num_requests_running") == set()
    assert dashboards.unknown_metrics("vllm:num_requests_runing") == {"vllm:num_requests_runing"}


@pytest.mark.parametrize("name", SHIPPED)
def test_dashboard_structure(name: str) -> None:
    board = load(name)
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    assert "datasource" in variables
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        for target in panel["targets"]:
            for var in ("$deployment", "$instance"):
                if var in target["expr"]:
                    assert var[1:] in variables


def test_serving_dashboard_covers_the_issue_panels() -> None:
    exprs = " ".join(e for _t, e in dashboards.panel_queries(load("sparkrack-serving.json")))
    for record in (
        rules.GEN_RATE,
        rules.TTFT_P95,
        rules.ITL_P95,
        rules.RUNNING,
        rules.QUEUED,
        rules.ACCEPT_LENGTH,
        rules.KV_USAGE,
        rules.MAMBA_USAGE,
    ):
        assert record in exprs
