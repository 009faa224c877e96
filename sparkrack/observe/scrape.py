"""How Prometheus finds the engines' metrics and which labels their series carry.

Serving pods of rank 0 carry the ``prometheus.io/*`` annotations (their engine renders them);
the scrape job below keeps those pods and copies the deployment's labels onto every series
(:func:`sparkrack.serving.objects.ranks.pod_relabelings`, shared with the optional
``PodMonitor``), so rules
and dashboards select by ``deployment`` and ``profile``.
"""

from __future__ import annotations

from typing import Any, Final

from sparkrack import contract
from sparkrack.serving.objects.ranks import (
    SERIES_DEPLOYMENT,
    SERIES_NAMESPACE,
    SERIES_POD,
    SERIES_PROFILE,
    pod_relabelings,
)

DEPLOYMENT: Final = SERIES_DEPLOYMENT
PROFILE: Final = SERIES_PROFILE
NAMESPACE: Final = SERIES_NAMESPACE
POD: Final = SERIES_POD
GROUP_BY: Final = (NAMESPACE, DEPLOYMENT, PROFILE)
"""Labels every serving rule and dashboard query keeps."""
SCRAPE_JOB: Final = "sparkrack-serving"


def meta_annotation(annotation: str) -> str:
    return "__meta_kubernetes_pod_annotation_" + "".join(
        c if c.isalnum() else "_" for c in annotation
    )


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
