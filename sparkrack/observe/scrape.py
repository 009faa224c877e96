"""How Prometheus finds the engines' metrics and which labels their series carry.

Serving pods of rank 0 carry the ``prometheus.io/*`` annotations (:mod:`sparkrack.contract`);
the scrape job below keeps those pods and copies the deployment's labels onto every series, so
rules and dashboards select by ``deployment`` and ``profile``. The same relabelings serve the
optional ``PodMonitor`` (:func:`sparkrack.serving.manifests.pod_monitor`).
"""

from __future__ import annotations

from typing import Any, Final

from sparkrack import contract

DEPLOYMENT: Final = "deployment"
"""Series label: the pod's ``sparkrack.io/deployment`` label."""
PROFILE: Final = "profile"
"""Series label: the pod's ``sparkrack.io/profile`` label."""
NAMESPACE: Final = "namespace"
POD: Final = "pod"
GROUP_BY: Final = (NAMESPACE, DEPLOYMENT, PROFILE)
"""Labels every serving rule and dashboard query keeps."""
SCRAPE_JOB: Final = "sparkrack-serving"


def meta_label(pod_label: str) -> str:
    """Prometheus' Kubernetes service-discovery label of a pod label."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in pod_label)


def meta_annotation(annotation: str) -> str:
    return "__meta_kubernetes_pod_annotation_" + "".join(
        c if c.isalnum() else "_" for c in annotation
    )


def pod_relabelings() -> list[dict[str, Any]]:
    """Copy the deployment's labels onto every scraped series (Prometheus Operator spelling)."""
    return [
        {"sourceLabels": [meta_label(contract.LABEL_DEPLOYMENT)], "targetLabel": DEPLOYMENT},
        {"sourceLabels": [meta_label(contract.LABEL_PROFILE)], "targetLabel": PROFILE},
        {"sourceLabels": ["__meta_kubernetes_namespace"], "targetLabel": NAMESPACE},
        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": POD},
    ]


def scrape_config() -> dict[str, Any]:
    """A plain Prometheus scrape job for annotated serving pods (``additionalScrapeConfigs``)."""
    keep = [
        {
            "source_labels": [meta_annotation(contract.PROMETHEUS_SCRAPE_ANNOTATION)],
            "regex": "true",
            "action": "keep",
        },
        {
            "source_labels": [meta_annotation(contract.PROMETHEUS_PATH_ANNOTATION)],
            "regex": "(.+)",
            "target_label": "__metrics_path__",
        },
        {
            "source_labels": [
                "__address__",
                meta_annotation(contract.PROMETHEUS_PORT_ANNOTATION),
            ],
            "regex": r"([^:]+)(?::\d+)?;(\d+)",
            "replacement": "$1:$2",
            "target_label": "__address__",
        },
    ]
    copy = [
        {"source_labels": r["sourceLabels"], "target_label": r["targetLabel"]}
        for r in pod_relabelings()
    ]
    return {
        "job_name": SCRAPE_JOB,
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": keep + copy,
    }
