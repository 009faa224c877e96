"""The metric names sparkrack's rules and dashboards use, and where each one is defined.

Engine metrics are read from the engines' own sources: ``tests/observe/test_observe_metrics.py`` opens
the real wheels of every version sparkrack's images run and fails when a name is not declared
there with the same type. Exporter metrics name the exporter's source file they come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["counter", "gauge", "histogram"]

SGLANG_SOURCE: Final = "sglang/srt/observability/metrics_collector.py"
SGLANG_VERSIONS: Final = ("0.5.10", "0.5.11", "0.5.12", "0.5.13")
"""The SGLang releases of the shipped images (sparkrack/serving/images.py)."""
VLLM_LOGGERS: Final = "vllm/v1/metrics/loggers.py"
VLLM_SPEC: Final = "vllm/v1/spec_decode/metrics.py"
VLLM_VERSIONS: Final = ("0.18.0", "0.19.0")


@dataclass(frozen=True)
class Metric:
    """One metric as its source declares it."""

    name: str
    kind: Kind
    exporter: str
    """``sglang`` / ``vllm`` (a PyPI distribution) or an exporter's name."""
    source: str
    """File that declares it: a path inside the wheel, or ``repo:path`` of an exporter."""
    versions: tuple[str, ...] = ()
    """Wheel versions checked (engine metrics only)."""

    def series(self) -> tuple[str, ...]:
        """Names of the series Prometheus stores (prometheus_client appends ``_total`` to a
        counter and ``_bucket``/``_sum``/``_count`` to a histogram)."""
        if self.kind == "counter":
            return (self.name if self.name.endswith("_total") else f"{self.name}_total",)
        if self.kind == "histogram":
            return tuple(f"{self.name}{s}" for s in ("_bucket", "_sum", "_count"))
        return (self.name,)


def _sg(name: str, kind: Kind) -> Metric:
    return Metric(name, kind, "sglang", SGLANG_SOURCE, SGLANG_VERSIONS)


def _vl(name: str, kind: Kind, source: str = VLLM_LOGGERS) -> Metric:
    return Metric(name, kind, "vllm", source, VLLM_VERSIONS)


NODE_EXPORTER: Final = "node-exporter"
DCGM_EXPORTER: Final = "dcgm-exporter"
KSM: Final = "kube-state-metrics"
KUBELET: Final = "kubelet"

METRICS: Final[tuple[Metric, ...]] = (
    # -- SGLang (server started with --enable-metrics)
    _sg("sglang:generation_tokens_total", "counter"),
    _sg("sglang:prompt_tokens_total", "counter"),
    _sg("sglang:time_to_first_token_seconds", "histogram"),
    _sg("sglang:inter_token_latency_seconds", "histogram"),
    _sg("sglang:num_running_reqs", "gauge"),
    _sg("sglang:num_queue_reqs", "gauge"),
    _sg("sglang:token_usage", "gauge"),
    _sg("sglang:mamba_usage", "gauge"),
    _sg("sglang:spec_accept_length", "gauge"),
    _sg("sglang:gen_throughput", "gauge"),
    # -- vLLM (/metrics on the API port by default)
    _vl("vllm:generation_tokens", "counter"),
    _vl("vllm:prompt_tokens", "counter"),
    _vl("vllm:time_to_first_token_seconds", "histogram"),
    _vl("vllm:inter_token_latency_seconds", "histogram"),
    _vl("vllm:num_requests_running", "gauge"),
    _vl("vllm:num_requests_waiting", "gauge"),
    _vl("vllm:kv_cache_usage_perc", "gauge"),
    _vl("vllm:spec_decode_num_drafts", "counter", VLLM_SPEC),
    _vl("vllm:spec_decode_num_accepted_tokens", "counter", VLLM_SPEC),
    # -- node-exporter (collector/meminfo.go: /proc/meminfo keys; collector/infiniband_linux.go)
    Metric(
        "node_memory_MemAvailable_bytes",
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
