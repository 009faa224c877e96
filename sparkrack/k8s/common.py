"""Pieces every cluster add-on renderer shares: labels, pinned versions, K3s paths, validation."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sparkrack.contract import (
    AGENTS_NAMESPACE_LABELS,
    HOSTNAME_LABEL,
    K3S_CNI_BIN_DIR,
    K3S_CNI_CONF_DIR,
    LABEL_RANK,
    LABEL_ROLE,
    LABEL_SPARK_INDEX,
    NAMESPACE_LABELS,
    PART_OF,
    ROLE_CONTROL_PLANE,
    ROLE_SPARK,
)
from sparkrack.errors import Problem, SparkrackError
from sparkrack.inputs.inventory import plain  # exact builtin types, no tagged str
from sparkrack.k8s.validate import validate_manifests

Manifest = dict[str, Any]

# --- Node labels written by the K3s roles (config.yaml) and read by the add-on selectors -------
# (the names themselves live in sparkrack.contract)
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"

__all__ = [
    "HOSTNAME_LABEL",
    "K3S_CNI_BIN_DIR",
    "K3S_CNI_CONF_DIR",
    "LABEL_RANK",
    "LABEL_ROLE",
    "LABEL_SPARK_INDEX",
    "PART_OF",
    "ROLE_CONTROL_PLANE",
    "ROLE_SPARK",
]


def namespace_manifest(name: str) -> Manifest:
    """The serving namespace. The add-ons and the serve play both apply it: one renderer, so
    neither undoes the other's labels (Pod Security level included)."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": dict(NAMESPACE_LABELS)},
    }


def agents_namespace_manifest(name: str) -> Manifest:
    """The agents' namespace (:func:`sparkrack.contract.agents_namespace`), at its own Pod
    Security level."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": dict(AGENTS_NAMESPACE_LABELS)},
    }


# Node agents (CNI daemon, device plugin) must run on every node whatever its taints.
TOLERATE_TAINTS = [
    {"operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists", "effect": "NoExecute"},
]


def labels(component: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Object labels: part-of sparkrack + the component name (+ extra)."""
    return {**PART_OF, "app.kubernetes.io/name": component, **(extra or {})}


def metadata(
    name: str,
    component: str,
    namespace: str | None = None,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels(component, extra_labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    return meta


def daemon_set(
    name: str,
    component: str,
    namespace: str,
    selector: dict[str, str],
    pod_spec: dict[str, object],
) -> Manifest:
    """A rolling-update DaemonSet whose pods carry the sparkrack labels plus ``selector``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(name, component, namespace, selector),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": labels(component, selector)}, "spec": pod_spec},
        },
    }


def validated(docs: Iterable[Manifest], source: str) -> list[Manifest]:
    """Return ``docs`` (as plain data) if every manifest passes offline schema validation,
    else refuse them all."""
    docs = [plain(doc) for doc in docs]
    problems: list[Problem] = validate_manifests(docs, source)
    for doc in docs:
        meta = doc.get("metadata") or {}
        if (meta.get("labels") or {}).get("app.kubernetes.io/part-of") != "sparkrack":
            problems.append(
                Problem(
                    source,
                    f"{doc.get('kind', '?')}/{meta.get('name', '?')}:metadata.labels",
                    "lacks app.kubernetes.io/part-of: sparkrack",
                    "render the object through sparkrack.k8s.common.metadata()",
                    "k8s-labels",
                )
            )
    if problems:
        raise SparkrackError(problems)
    return docs
