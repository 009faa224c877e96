"""The metric names sparkrack's rules and dashboards use, and where each one is defined.

Engine metrics are each engine's (``Engine.metrics``, read from the engines' own sources):
``tests/observe/test_observe_metrics.py`` opens the real wheels of every version sparkrack's
images run and fails when a name is not declared there with the same type. Exporter metrics
name the exporter's source file they come from.
"""

from __future__ import annotations

from typing import Final

from sparkrack.serving.engines import ENGINES
from sparkrack.serving.engines.facts import Metric

__all__ = ["METRICS", "Metric", "by_name", "s", "series_names"]

NODE_EXPORTER: Final = "node-exporter"
DCGM_EXPORTER: Final = "dcgm-exporter"
KSM: Final = "kube-state-metrics"
KUBELET: Final = "kubelet"

METRICS: Final[tuple[Metric, ...]] = (
    *(m for eng in ENGINES.values() for m in eng.metrics),
    # -- node-exporter (collector/meminfo.go: /proc/meminfo keys; collector/infiniband_linux.go)
    Metric(
        "node_memory_MemFree_bytes",
        "gauge",
        NODE_EXPORTER,
        "prometheus/node_exporter:collector/meminfo.go",
    ),
    Metric(
        "node_memory_MemTotal_bytes",
        "gauge",
        NODE_EXPORTER,
        "prometheus/node_exporter:collector/meminfo.go",
    ),
    # collector/pressure_linux.go: /proc/pressure/memory, "some" and "full" totals in seconds
    Metric(
        "node_pressure_memory_waiting_seconds_total",
        "counter",
        NODE_EXPORTER,
        "prometheus/node_exporter:collector/pressure_linux.go",
    ),
    Metric(
        "node_pressure_memory_stalled_seconds_total",
        "counter",
        NODE_EXPORTER,
        "prometheus/node_exporter:collector/pressure_linux.go",
    ),
    Metric(
        "node_infiniband_port_data_received_bytes",
        "counter",
        NODE_EXPORTER,
        "prometheus/node_exporter:collector/infiniband_linux.go",
    ),
    Metric(
        "node_infiniband_port_data_transmitted_bytes",
        "counter",
        NODE_EXPORTER,
        "prometheus/node_exporter:collector/infiniband_linux.go",
    ),
    # -- dcgm-exporter (etc/default-counters.csv)
    Metric(
        "DCGM_FI_DEV_GPU_TEMP",
        "gauge",
        DCGM_EXPORTER,
        "NVIDIA/dcgm-exporter:etc/default-counters.csv",
    ),
    Metric(
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        DCGM_EXPORTER,
        "NVIDIA/dcgm-exporter:etc/default-counters.csv",
    ),
    Metric(
        "DCGM_FI_DEV_GPU_UTIL",
        "gauge",
        DCGM_EXPORTER,
        "NVIDIA/dcgm-exporter:etc/default-counters.csv",
    ),
    Metric(
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        DCGM_EXPORTER,
        "NVIDIA/dcgm-exporter:etc/default-counters.csv",
    ),
    # -- kube-state-metrics (docs/metrics/workload/{statefulset,pod}-metrics.md)
    Metric(
        "kube_statefulset_replicas",
        "gauge",
        KSM,
        "kubernetes/kube-state-metrics:docs/metrics/workload/statefulset-metrics.md",
    ),
    Metric(
        "kube_statefulset_status_replicas_ready",
        "gauge",
        KSM,
        "kubernetes/kube-state-metrics:docs/metrics/workload/statefulset-metrics.md",
    ),
    Metric(
        "kube_pod_container_status_restarts_total",
        "counter",
        KSM,
        "kubernetes/kube-state-metrics:docs/metrics/workload/pod-metrics.md",
    ),
    # -- kubelet /metrics/probes (scraped by kube-prometheus-stack's kubelet ServiceMonitor)
    Metric(
        "prober_probe_total",
        "counter",
        KUBELET,
        "kubernetes/kubernetes:pkg/kubelet/prober/prober_manager.go",
    ),
)
"""Every metric a shipped rule or dashboard reads."""


def by_name(name: str) -> Metric:
    for m in METRICS:
        if m.name == name:
            return m
    raise KeyError(f"{name} is not in sparkrack.observe.metrics.METRICS")


def series_names() -> set[str]:
    """Every series name a query may use."""
    return {s for m in METRICS for s in m.series()}


def s(name: str, suffix: str = "") -> str:
    """The stored series of a table metric (``suffix``: ``_bucket`` etc. of a histogram);
    KeyError for a name outside the table, so a query cannot name an unlisted metric."""
    m = by_name(name)
    series = m.series()
    wanted = f"{name}{suffix}" if m.kind == "histogram" else series[0]
    if wanted not in series:
        raise KeyError(f"{wanted}: {name} is a {m.kind}")
    return wanted
