"""The optional monitoring stack: kube-prometheus-stack from its official Helm chart, pinned,
with sparkrack's scrape job, rules and dashboards. Off by default (``monitoring.enabled``).

Every component runs on the control plane (``sparkrack.io/role=control-plane``) except the
node-exporter DaemonSet, so the Sparks' unified memory stays with the engines. The memory
figures below are the requests and limits these values set: they bound what the stack may take
on the control plane (they are not measurements).
"""

from __future__ import annotations

from typing import Any, Final

from sparkrack import contract
from sparkrack.observe.scrape import scrape_config

CHART: Final = "kube-prometheus-stack"
CHART_REPO: Final = "https://prometheus-community.github.io/helm-charts"
CHART_VERSION: Final = "65.1.1"
NAMESPACE: Final = contract.MONITORING_NAMESPACE
RELEASE: Final = "sparkrack-monitoring"
GRAFANA_ADMIN_SECRET: Final = "sparkrack-grafana-admin"
"""Secret with Grafana's admin user and password, created by the monitoring role from the vaulted
``monitoring_grafana_admin_password`` before the chart is installed: the chart's own default
password is never used."""
GRAFANA_ADMIN_USER_KEY: Final = "admin-user"
GRAFANA_ADMIN_PASSWORD_KEY: Final = "admin-password"
GRAFANA_ADMIN_USER: Final = "admin"
DASHBOARD_LABEL: Final = {"grafana_dashboard": "1"}
"""The label the chart's Grafana sidecar loads dashboards from (its default)."""

# component -> (memory request, memory limit) in MiB on the control plane
MEMORY_MIB: Final[dict[str, tuple[int, int]]] = {
    "prometheus": (512, 2048),
    "alertmanager": (64, 256),
    "grafana": (128, 256),
    "prometheus-operator": (64, 256),
    "kube-state-metrics": (64, 256),
}
NODE_EXPORTER_MIB: Final = (32, 64)
"""Per node (control plane and every Spark)."""


def control_plane_memory_mib() -> tuple[int, int]:
    """(requests, limits) the stack sets on the control plane, node-exporter included."""
    req = sum(r for r, _l in MEMORY_MIB.values()) + NODE_EXPORTER_MIB[0]
    lim = sum(lim for _r, lim in MEMORY_MIB.values()) + NODE_EXPORTER_MIB[1]
    return req, lim


def _resources(component: str) -> dict[str, Any]:
    req, lim = MEMORY_MIB[component]
    return {"requests": {"memory": f"{req}Mi"}, "limits": {"memory": f"{lim}Mi"}}


NODE_EXPORTER_ARGS: Final = ("--no-collector.cpufreq",)
"""Flags the node-exporter DaemonSet adds to the chart's. The cpufreq collector hangs on arm64 hosts
whose cpufreq driver is ``cppc_cpufreq`` (the GB10's): each scrape leaves a goroutine and an open
file behind and the exporter answers 503 until the collector is off (prometheus/node_exporter#3791).
The memory alerts read this exporter, so it must keep answering."""


def helm_values() -> dict[str, Any]:
    def on_cp() -> dict[str, str]:
        return {contract.LABEL_ROLE: contract.ROLE_CONTROL_PLANE}

    return {
        "prometheus": {
            "prometheusSpec": {
                "nodeSelector": on_cp(),
                "resources": _resources("prometheus"),
                "retention": "15d",
                "retentionSize": "10GB",
                "additionalScrapeConfigs": [scrape_config()],
                # pick up sparkrack's PrometheusRule and PodMonitors, not only the chart's own
                "ruleSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "serviceMonitorSelectorNilUsesHelmValues": False,
            }
        },
        "alertmanager": {
            "alertmanagerSpec": {"nodeSelector": on_cp(), "resources": _resources("alertmanager")}
        },
        "grafana": {
            "admin": {
                "existingSecret": GRAFANA_ADMIN_SECRET,
                "userKey": GRAFANA_ADMIN_USER_KEY,
                "passwordKey": GRAFANA_ADMIN_PASSWORD_KEY,
            },
            "nodeSelector": on_cp(),
            "resources": _resources("grafana"),
            "sidecar": {"dashboards": {"enabled": True, "label": "grafana_dashboard"}},
        },
        "prometheusOperator": {
            "nodeSelector": on_cp(),
            "resources": _resources("prometheus-operator"),
        },
        "kube-state-metrics": {
            "nodeSelector": on_cp(),
            "resources": _resources("kube-state-metrics"),
        },
        "prometheus-node-exporter": {
            "extraArgs": list(NODE_EXPORTER_ARGS),
            "resources": {
                "requests": {"memory": f"{NODE_EXPORTER_MIB[0]}Mi"},
                "limits": {"memory": f"{NODE_EXPORTER_MIB[1]}Mi"},
            },
        },
    }


def stack_file() -> dict[str, Any]:
    """What the monitoring role installs: the pinned chart and its values."""
    return {
        "chart": CHART,
        "repo": CHART_REPO,
        "version": CHART_VERSION,
        "namespace": NAMESPACE,
        "release": RELEASE,
        "dashboard_label": dict(DASHBOARD_LABEL),
        # node-exporter uses the host's network, PID namespace and root filesystem.
        "namespace_labels": {
            **contract.PART_OF,
            **{f"pod-security.kubernetes.io/{m}": "privileged" for m in ("enforce", "warn")},
        },
        "grafana_admin": {
            "secret": GRAFANA_ADMIN_SECRET,
            "user": GRAFANA_ADMIN_USER,
            "user_key": GRAFANA_ADMIN_USER_KEY,
            "password_key": GRAFANA_ADMIN_PASSWORD_KEY,
        },
        "values": helm_values(),
    }
