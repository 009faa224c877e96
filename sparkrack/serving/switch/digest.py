"""The head's manifest digest, carried to the receivers out of band.

The head's ``download`` container reports the sha256 of the manifest it computed from the Hub's
metadata in its termination message (``fetch_base.report_manifest``). The serve play reads the
fetch Job's pods through the API, and :func:`head_manifest` turns them into the deployment's
manifest ConfigMap, which the receiver Jobs mount (``objects.MANIFEST_VOLUME``). A receiver
refuses a pushed manifest whose sha256 differs. The pusher runs in another container without API
access: it cannot write the termination message of the download container nor the ConfigMap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkrack import contract
from sparkrack.serving.scripts.fetch_base import read_manifest_digest
from sparkrack.serving.switch.objects import FETCH_BACKOFF

DOWNLOAD_CONTAINER = "download"
"""The head's container that computes the manifest (an init container when the Job pushes)."""


def _download_status(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for entry in status.get(key) or []:
            if isinstance(entry, Mapping) and entry.get("name") == DOWNLOAD_CONTAINER:
                return entry
    return None


def head_manifest(
    deployment: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    namespace: str,
    backoff: int = FETCH_BACKOFF,
) -> dict[str, Any]:
    """``{"state": "done" | "waiting" | "failed", "why": ..., "configmap": ...}`` for one
    deployment (its render facts) from the pods of its fetch Job: done once a pod's download
    container ended with 0 and reported a digest (``configmap``: the object to apply); failed
    when it ended with 0 and reported none, or when more pods failed than the Job retries."""
    job = str(deployment.get("fetch_job", ""))
    failures = 0
    for pod in sorted(
        pods,
        key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")),
        reverse=True,
    ):
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get("job-name") != job:
            continue
        entry = _download_status(pod)
        ended = ((entry or {}).get("state") or {}).get("terminated")
        if not isinstance(ended, Mapping):
            continue
        if ended.get("exitCode") != 0:
            failures += 1
            continue
        digest = read_manifest_digest(str(ended.get("message") or ""))
        if digest is None:
            return {
                "state": "failed",
                "why": f"the download container of {job} ended without reporting the manifest "
                "sha256 in its termination message",
                "configmap": None,
            }
        return {
            "state": "done",
            "why": f"{job}: manifest sha256 {digest}",
            "configmap": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": str(deployment["manifest_configmap"]),
                    "namespace": namespace,
                    "labels": dict(deployment.get("manifest_labels") or {}),
                },
                "data": {contract.FETCH_MANIFEST_KEY: digest},
            },
        }
    if failures > backoff:
        return {
            "state": "failed",
            "why": f"the download container of {job} failed {failures} times",
            "configmap": None,
        }
    return {"state": "waiting", "why": f"{job}: the download has not ended", "configmap": None}
