"""The kubelet's probes of a rank's pod: HTTP on the process that serves the OpenAI API, or, on
a worker rank that serves no HTTP, the group guard (``serving/scripts/group_guard.py``) against
its head. :meth:`sparkrack.serving.engines.base.Engine.probes` chooses between them."""

from __future__ import annotations

from typing import Any

from sparkrack import contract
from sparkrack.serving.context import ServingContext
from sparkrack.serving.names import ObjectNames

PROBE_PERIOD = 10
LIVENESS_PERIOD = 30


def http_probes(
    ctx: ServingContext, liveness_path: str, port: str | int = "http"
) -> dict[str, Any]:
    """Startup, readiness and liveness probes of the process that serves the OpenAI API, at the
    pod's ``port`` (a gated engine's: the API port, which its gate container names)."""
    return {
        # Weight load + CUDA graph capture: src:ultra-post measured ~490 s for Ultra's weights alone.
        "startupProbe": {
            "httpGet": {"path": "/health", "port": port},
            "periodSeconds": PROBE_PERIOD,
            "timeoutSeconds": 30,
            "failureThreshold": max(1, ctx.startup_timeout // PROBE_PERIOD),
        },
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": port},
            "periodSeconds": 15,
            "timeoutSeconds": 30,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": liveness_path, "port": port},
            "periodSeconds": LIVENESS_PERIOD,
            "timeoutSeconds": 30,
            "failureThreshold": max(2, ctx.liveness_timeout // LIVENESS_PERIOD),
        },
    }


def group_guard_probes(ctx: ServingContext, deployment: str, key_env: str | None) -> dict[str, Any]:
    """Startup and liveness probes of a worker rank of ``deployment``: the group guard from the
    launcher ConfigMap passes once the head answers ``/health`` and fails when the head it saw
    healthy stops answering or restarted, so the group restarts together. It reaches the head
    on its cluster address by its pod's DNS name, with the client key from the variable
    ``key_env`` (None: the engine checks no key)."""
    head = f"http://{ObjectNames.of(deployment).pod_host(0, ctx.namespace)}:{ctx.api_port}"
    guard = ["python3", f"{contract.LAUNCHER_MOUNT}/{contract.GUARD_FILE}"]
    target = ["--head", head, *(["--api-key-env", key_env] if key_env else [])]
    return {
        "startupProbe": {
            "exec": {"command": [*guard, "startup", *target]},
            "periodSeconds": PROBE_PERIOD,
            "timeoutSeconds": 15,
            "failureThreshold": max(1, ctx.startup_timeout // PROBE_PERIOD),
        },
        "livenessProbe": {
            "exec": {"command": [*guard, "live", *target]},
            "periodSeconds": LIVENESS_PERIOD,
            "timeoutSeconds": 15,
            "failureThreshold": max(2, ctx.liveness_timeout // LIVENESS_PERIOD),
        },
    }
