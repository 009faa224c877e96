"""The pod plumbing every serving object shares, written once: metadata, node pinning, containers
with their words escaped, the volumes of the node's HF cache and of the switch ConfigMap, and the
least privilege of every pod.

Least privilege: no serving pod talks to the Kubernetes API, so none mounts a ServiceAccount
token (:func:`pod_spec`). Every container that is not an engine (fetch, push, receiver, pre-pull,
the ranks' waits, the gateway) is :func:`hardened`: it runs as :data:`~sparkrack.contract.SERVING_UID`,
never as root, on a read-only root filesystem (``/tmp`` is an ``emptyDir``, and ``HOME``), with no
privilege escalation, the runtime's default seccomp profile and every capability dropped; it asks
for no GPU, so ``NVIDIA_VISIBLE_DEVICES=void`` keeps the NVIDIA runtime from handing it the GPUs an
image's own environment (``all`` in the CUDA images) would.

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
from sparkrack.k8s.common import agents_namespace_manifest, namespace_manifest
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


TMP_VOLUME = "tmp"
TMP_MOUNT = "/tmp"
TMP_SIZE = "1Gi"
"""The writable scratch space of a hardened container (its home too)."""
NO_GPU = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
"""A container that asks for no GPU sees none, whatever its image's environment says."""
SECCOMP = {"type": "RuntimeDefault"}


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


def meta(
    name: str, ns: str, labels: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """Object metadata; ``annotations``: the policy scanner's accepted findings
    (:func:`sparkrack.k8s.scanner.skips`)."""
    out: dict[str, Any] = {"name": name, "namespace": ns, "labels": dict(labels)}
    if annotations:
        out["annotations"] = dict(annotations)
    return out


def namespace(ctx: ServingContext) -> dict[str, Any]:
    return namespace_manifest(ctx.namespace)


def agents_namespace(ctx: ServingContext) -> dict[str, Any]:
    return agents_namespace_manifest(ctx.agents_namespace)


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


def container_security() -> dict[str, Any]:
    """The securityContext of a container that is not an engine: nothing beyond a plain user."""
    return {
        "runAsNonRoot": True,
        "runAsUser": contract.SERVING_UID,
        "runAsGroup": contract.SERVING_UID,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "seccompProfile": dict(SECCOMP),
        "capabilities": {"drop": ["ALL"]},
    }


def hardened(c: dict[str, Any]) -> dict[str, Any]:
    """``c`` with :func:`container_security`, a writable ``/tmp`` (its ``HOME``) and no GPU.
    The pod must carry :func:`tmp_volume`."""
    env = [e for e in c.get("env", []) if e["name"] not in ("HOME", NO_GPU["name"])]
    return {
        **c,
        "env": [*env, {"name": "HOME", "value": TMP_MOUNT}, dict(NO_GPU)],
        "volumeMounts": [*c.get("volumeMounts", []), {"name": TMP_VOLUME, "mountPath": TMP_MOUNT}],
        "securityContext": container_security(),
    }


def tmp_volume() -> dict[str, Any]:
    return {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": TMP_SIZE}}


def pod_spec(spec: dict[str, Any], *, nonroot: bool) -> dict[str, Any]:
    """A pod spec that mounts no ServiceAccount token. ``nonroot``: every container of it is
    :func:`hardened`, and the pod says so too (user, group, the group of its Secret and
    ConfigMap files, seccomp)."""
    out: dict[str, Any] = {"automountServiceAccountToken": False, **spec}
    if nonroot:
        out["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": contract.SERVING_UID,
            "runAsGroup": contract.SERVING_UID,
            "fsGroup": contract.SERVING_UID,
            "seccompProfile": dict(SECCOMP),
        }
    return out


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
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Job that runs ``pod`` once: retried ``backoff`` times, bounded by its own ``timeout``
    (plus :data:`JOB_GRACE_SECONDS`), removed :data:`FINISHED_TTL_SECONDS` after it finished."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, ns, labels, annotations),
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
