"""Grafana dashboards as data: serving (per deployment) and Spark nodes.

Every query reads either a ``sparkrack:*`` recording rule (:mod:`.rules`) or a metric of the
table (:mod:`.metrics`); :func:`unknown_metrics` is the check the tests run on every panel.
"""

from __future__ import annotations

from typing import Any, Final

from sparkrack.observe import rules
from sparkrack.observe.metrics import s, series_names
from sparkrack.observe.promql import metric_names
from sparkrack.observe.scrape import DEPLOYMENT

SCHEMA_VERSION: Final = 39
DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
SEL: Final = f'{{{DEPLOYMENT}=~"$deployment"}}'
NODE_SEL: Final = '{instance=~"$instance"}'
FILE_NAMES: Final = {"serving": "sparkrack-serving.json", "nodes": "sparkrack-spark-nodes.json"}


def recorded_names() -> set[str]:
    return {r["record"] for r in rules.recording_rules()}


def unknown_metrics(expr: str) -> set[str]:
    """Names in ``expr`` that neither an engine/exporter exports nor a shipped rule records."""
    return metric_names(expr) - series_names() - recorded_names()


def _panel(
    pid: int, title: str, unit: str, targets: list[tuple[str, str]], x: int, y: int
) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "expr": expr,
                "legendFormat": legend,
                "datasource": DATASOURCE,
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _grid(panels: list[tuple[str, str, list[tuple[str, str]]]]) -> list[dict[str, Any]]:
    return [
        _panel(i + 1, title, unit, targets, 12 * (i % 2), 8 * (i // 2))
        for i, (title, unit, targets) in enumerate(panels)
    ]


def _variable(name: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": name},
        "definition": query,
        "includeAll": True,
        "multi": True,
        "refresh": 2,
    }


def _dashboard(
    uid: str, title: str, variables: list[dict[str, Any]], panels: list[dict[str, Any]]
) -> dict[str, Any]:
    datasource = {"name": "datasource", "type": "datasource", "query": "prometheus"}
    return {
        "uid": uid,
        "title": title,
        "tags": ["sparkrack"],
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-3h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [datasource, *variables]},
        "panels": panels,
    }


def serving() -> dict[str, Any]:
    legend = "{{" + DEPLOYMENT + "}}"
    panels = _grid(
        [
            ("Generation throughput", "tokens/s (agg)", [(f"{rules.GEN_RATE}{SEL}", legend)]),
            (
                "Time to first token / inter-token latency (p95)",
                "s",
                [
                    (f"{rules.TTFT_P95}{SEL}", f"TTFT {legend}"),
                    (f"{rules.ITL_P95}{SEL}", f"ITL {legend}"),
                ],
            ),
            (
                "Requests running / queued",
                "short",
                [
                    (f"{rules.RUNNING}{SEL}", f"running {legend}"),
                    (f"{rules.QUEUED}{SEL}", f"queued {legend}"),
                ],
            ),
            ("MTP accept length", "short", [(f"{rules.ACCEPT_LENGTH}{SEL}", legend)]),
            (
                "KV cache / Mamba pool usage",
                "percentunit",
                [
                    (f"{rules.KV_USAGE}{SEL}", f"KV {legend}"),
                    (f"{rules.MAMBA_USAGE}{SEL}", f"Mamba {legend}"),
                ],
            ),
        ]
    )
    variables = [_variable(DEPLOYMENT, f"label_values({rules.RUNNING}, {DEPLOYMENT})")]
    return _dashboard("sparkrack-serving", "sparkrack: serving", variables, panels)


def nodes() -> dict[str, Any]:
    free, total = s("node_memory_MemFree_bytes"), s("node_memory_MemTotal_bytes")
    rx = s("node_infiniband_port_data_received_bytes")
    tx = s("node_infiniband_port_data_transmitted_bytes")
    panels = _grid(
        [
            (
                "Unified memory free / total",
                "bytes",
                [
                    (f"{free}{NODE_SEL}", "free {{instance}}"),
                    (f"{total}{NODE_SEL}", "total {{instance}}"),
                ],
            ),
            (
                "GPU utilization",
                "percent",
                [(s("DCGM_FI_DEV_GPU_UTIL"), "{{Hostname}} gpu{{gpu}}")],
            ),
            (
                "GPU temperature / power",
                "short",
                [
                    (s("DCGM_FI_DEV_GPU_TEMP"), "temp C {{Hostname}}"),
                    (s("DCGM_FI_DEV_POWER_USAGE"), "power W {{Hostname}}"),
                ],
            ),
            (
                "Fabric (RDMA port counters)",
                "Bps",
                [
                    (f"rate({rx}{NODE_SEL}[5m])", "rx {{instance}} {{device}} p{{port}}"),
                    (f"rate({tx}{NODE_SEL}[5m])", "tx {{instance}} {{device}} p{{port}}"),
                ],
            ),
        ]
    )
    variables = [_variable("instance", f"label_values({free}, instance)")]
    return _dashboard("sparkrack-spark-nodes", "sparkrack: Spark nodes", variables, panels)


def dashboards() -> dict[str, dict[str, Any]]:
    """File name -> dashboard."""
    return {FILE_NAMES["serving"]: serving(), FILE_NAMES["nodes"]: nodes()}


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
