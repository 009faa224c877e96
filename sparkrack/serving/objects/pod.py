"""The pod plumbing every serving object shares, written once: metadata, node pinning, containers
with their words escaped, and the volumes of the node's HF cache and of the switch ConfigMap.

Kubernetes expands ``$(VAR)`` in a container's command, args and env values; every ``$`` of a
rendered word is written as ``$$`` so a profile value can never pull the HF token (or any other
variable of the pod) into the server's argv. The one exception is a
:class:`~sparkrack.serving.profile.knobs.PodVariable`, a reference only the renderer writes (the
engine's keys, the pod's address).
"""

from __future__ import annotations

from typing import Any

from sparkrack import contract
from sparkrack.fabric.addressplan import NodePlan
from sparkrack.k8s.common import namespace_manifest
from sparkrack.serving.context import ServingContext
from sparkrack.serving.profile.knobs import PodVariable

HF_VOLUME = "hf-cache"
SWITCH_VOLUME = "switch"
SWITCH_MODE = 0o555
"""The switch ConfigMap's files are run as scripts."""
JOB_GRACE_SECONDS = 600
"""Added to a Job's own timeout for its deadline: image pull and pod start."""
FINISHED_TTL_SECONDS = 86400
"""A finished Job (and its pod's log) is kept a day, then removed by Kubernetes."""


def no_expansion(word: str) -> str:
    """``word`` as Kubernetes must see it so that it reaches the process unchanged (a
    :class:`PodVariable` is left for Kubernetes to expand)."""
    if isinstance(word, PodVariable):
        return str(word)
    return word.replace("$", "$$")


def pod_ip_env() -> dict[str, Any]:
    """The pod's cluster address, from the downward API."""
    return {
        "name": contract.POD_IP_ENV,
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    }


def secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    """A variable read from a Secret: its value never appears in a manifest."""
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def meta(name: str, ns: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": ns, "labels": dict(labels)}


def namespace(ctx: ServingContext) -> dict[str, Any]:
    return namespace_manifest(ctx.namespace)


def node_selector(node: NodePlan) -> dict[str, str]:
    """Pin a pod to its Spark twice: the K3s node name and the spark-index label the K3s roles
    set from the same address plan. A cluster where the two disagree leaves the pod Pending
    instead of running a rank on the wrong Spark (with another Spark's VF address)."""
    return {
        contract.HOSTNAME_LABEL: str(node.name),
        contract.LABEL_SPARK_INDEX: str(node.spark_index),
    }


def container(name: str, image: str, argv: list[str], **extra: Any) -> dict[str, Any]:
    """A container that runs ``argv`` as its command (every word escaped)."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [no_expansion(w) for w in argv],
        **extra,
    }


def hf_cache_volume(ctx: ServingContext) -> dict[str, Any]:
    """The Spark's Hugging Face cache (hostPath), shared by the fetch step and the ranks."""
    return {"name": HF_VOLUME, "hostPath": {"path": ctx.hf_cache, "type": "DirectoryOrCreate"}}


def hf_cache_mount(read_only: bool = False) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": HF_VOLUME, "mountPath": contract.HF_CACHE_MOUNT}
    return {**mount, "readOnly": True} if read_only else mount


def switch_volume(configmap: str) -> dict[str, Any]:
    """The deployment's switch ConfigMap (the fetch step)."""
    return {"name": SWITCH_VOLUME, "configMap": {"name": configmap, "defaultMode": SWITCH_MODE}}


def switch_mount() -> dict[str, Any]:
    return {"name": SWITCH_VOLUME, "mountPath": contract.SWITCH_MOUNT, "readOnly": True}


def job(
    name: str,
    ns: str,
    labels: dict[str, str],
    pod: dict[str, Any],
    timeout: int,
    backoff: int,
) -> dict[str, Any]:
    """A Job that runs ``pod`` once: retried ``backoff`` times, bounded by its own ``timeout``
    (plus :data:`JOB_GRACE_SECONDS`), removed :data:`FINISHED_TTL_SECONDS` after it finished."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, ns, labels),
        "spec": {
            "backoffLimit": backoff,
            "activeDeadlineSeconds": timeout + JOB_GRACE_SECONDS,
            "ttlSecondsAfterFinished": FINISHED_TTL_SECONDS,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"restartPolicy": "Never", **pod},
            },
        },
    }


def configmap(name: str, ns: str, labels: dict[str, str], data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name, ns, labels),
        "data": data,
    }
