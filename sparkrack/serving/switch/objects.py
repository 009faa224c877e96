"""The Jobs of a model switch: image pre-pull, fetch once, copy over the fabric.

Per deployment (:func:`switch_objects`, validated offline like every other manifest):

* the switch ConfigMap: the fetch step (``fetch_step.py`` and the files it imports, stdlib
  only, sent verbatim), mounted at :data:`~sparkrack.contract.SWITCH_MOUNT` by the Jobs below
  and by every rank's init containers: wait for the weights; flush the page cache and wait for
  ``MemFree`` (``memsettle.py``); then the ``settle`` sidecar, which flushes every interval
  while the engine loads, until the deployment's API Service answers ``/health``;
* the fetch Job, pinned to the head's Spark: ``download`` (an init container: free disk checked
  against the model size first, the HF token from its Secret by reference), then ``push`` of the
  snapshot to every other Spark of the deployment over the fabric PF addresses (rsync, the
  marker last). A one-Spark deployment only downloads, on the cluster network, where its own
  NetworkPolicy lets it reach the DNS and the Hub (:func:`~sparkrack.serving.objects.network.
  fetch_policy`); a pushing fetch Job is on the host network, outside every policy;
* one receiver Job per other Spark: an rsync daemon on the host network (so it listens on the
  fabric PF address) on the deployment's own port, taking connections from the head's PF address
  only, which verifies what arrived and writes the marker itself. It takes the pushed manifest
  only when its sha256 is the one the head's ``download`` reported in its termination message:
  the serve play reads that from the pod's status and writes it into the deployment's manifest
  ConfigMap (``names.manifest``), which the receivers mount (optional: a round waits until the
  kubelet shows it). The pusher has no API access and no way to that ConfigMap. The
  rsync password comes from the deployment's own Secret, which the serve play writes with a
  fresh password before the Jobs start; only the reference is rendered here.

Optional (``serving_prepull: true``, :func:`prepull_jobs`): one Job per Spark that pulls every
image the Spark is about to run, before anything is removed, so the old model keeps serving while
the new image downloads.

The serve play applies them in this order: pre-pull Jobs (wait Complete), fetch objects (wait for
the Jobs to Complete), then prune and apply the deployments (their ranks wait for the marker and
for free memory in init containers). Every Job is bounded by ``activeDeadlineSeconds`` and
``backoffLimit`` and removed ``ttlSecondsAfterFinished`` after it finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkrack import contract
from sparkrack.fabric.addressplan import NodePlan
from sparkrack.k8s import scanner
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines.base import hf_token_env
from sparkrack.serving.objects.network import fetch_policy
from sparkrack.serving.objects.pod import (
    NO_GPU,
    SECCOMP,
    configmap,
    container,
    hardened,
    hf_cache_mount,
    hf_cache_volume,
    job,
    node_selector,
    pod_spec,
    switch_mount,
    switch_volume,
    tmp_volume,
)
from sparkrack.serving.resolution import Resolution
from sparkrack.serving.switch.plan import estimate, fetch_plan, script_files, settle_argv

RECEIVER_SECURITY: dict[str, Any] = {
    # Root for chroot and for giving the transfer uid the model's folder (the cache is a
    # root-owned hostPath); nothing else: every transfer then runs chrooted as that uid.
    "runAsUser": 0,
    "allowPrivilegeEscalation": False,
    "capabilities": {
        "drop": ["ALL"],
        "add": ["CHOWN", "DAC_OVERRIDE", "SETGID", "SETUID", "SYS_CHROOT"],
    },
}
"""The receiver container's securityContext (fetch_daemon.TRANSFER_UID does the writing)."""
FETCH_BACKOFF = 2
"""Retries of a fetch or receiver pod (an interrupted download or copy resumes)."""
PREPULL_BACKOFF = 1
FETCH_SKIPS = scanner.skips(
    scanner.IMAGES,
    scanner.BOUNDED_JOB,
    scanner.FABRIC_PUSH,
    scanner.SECRET_ENV,
)
RECEIVER_SKIPS = scanner.skips(
    scanner.IMAGES,
    scanner.BOUNDED_JOB,
    scanner.FABRIC_PUSH,
    scanner.RECEIVER_ROOT,
)
PREPULL_SKIPS = scanner.skips(scanner.IMAGES, scanner.BOUNDED_JOB)
SECRET_VOLUME = "fetch-secret"
MANIFEST_VOLUME = "fetch-manifest"


@dataclass(frozen=True)
class Switch:
    """What a switch renders for one deployment."""

    init_containers: list[dict[str, Any]]
    """Before every rank: wait for the weights, then for the rank's free memory; the settle
    sidecar beside the engine while it loads."""
    objects: list[dict[str, Any]]
    """The switch ConfigMap, the fetch Job and the receiver Jobs."""
    facts: dict[str, Any] = field(default_factory=dict)
    """What the serve play and an owner need to know about the fetch."""


SETTLE_SECURITY: dict[str, Any] = {"privileged": True, "runAsUser": 0, "runAsNonRoot": False}
"""The memory wait and the settle sidecar write ``/proc/sys/vm/drop_caches`` and
``compact_memory``: that takes CAP_SYS_ADMIN and a writable ``/proc/sys``, which a container
runtime gives only a privileged container (no capability alone unmasks ``/proc/sys``)."""


def settle_container(
    name: str, image: str, argv: list[str], script_mount: dict[str, Any]
) -> dict[str, Any]:
    """A container of the settle step: privileged as root (:data:`SETTLE_SECURITY`), no GPU,
    nothing mounted but the switch ConfigMap's scripts."""
    c = container(name, image, argv, volumeMounts=[script_mount], env=[dict(NO_GPU)])
    return {**c, "securityContext": dict(SETTLE_SECURITY)}


def secret_name(res: Resolution) -> str:
    """The deployment's own rsync Secret (``serving_fetch_secret`` + the deployment's name): the
    serve play writes it with a fresh random password before the deployment's fetch Jobs start."""
    return f"{res.ctx.fetch_secret}-{res.name}"


def jobs_selector() -> str:
    """Label selector of every pre-pull, fetch and receiver Job: one API read lists them all."""
    return (
        f"{contract.LABEL_COMPONENT} in ({contract.COMPONENT_PREPULL},{contract.COMPONENT_FETCH})"
    )


def timeline_pods_selector() -> str:
    """Label selector of the pods the switch timeline reads: the fetch Jobs' (their phase
    records) and the ranks' (their Ready times)."""
    return (
        f"{contract.LABEL_COMPONENT} in ({contract.COMPONENT_FETCH},{contract.COMPONENT_SERVING})"
    )


def switch_objects(res: Resolution) -> Switch:
    """The switch of one deployment: the ranks' init containers, the switch ConfigMap, the fetch
    Job on the head's Spark and a receiver Job per other Spark, and the facts of the fetch."""
    profile, ctx, names = res.profile, res.ctx, res.names
    plan, script = fetch_plan(res), script_files()
    token = hf_token_env(ctx)
    ns, timeout = ctx.namespace, ctx.fetch_timeout
    labels = {**res.labels, contract.LABEL_COMPONENT: contract.COMPONENT_FETCH}
    # One mount object per kind, shared by the containers of a pod (the YAML dump anchors it).
    hf_mount, script_mount = hf_cache_mount(), switch_mount()
    secret_mount = {
        "name": SECRET_VOLUME,
        "mountPath": contract.FETCH_SECRET_MOUNT,
        "readOnly": True,
    }
    manifest_mount = {
        "name": MANIFEST_VOLUME,
        "mountPath": contract.FETCH_MANIFEST_MOUNT,
        "readOnly": True,
    }
    manifest_volume = {
        "name": MANIFEST_VOLUME,
        # Optional: the serve play writes it once the head's download reported the digest.
        "configMap": {"name": names.manifest, "optional": True},
    }
    init_mounts = [hf_cache_mount(read_only=True), script_mount]
    # The waits and the settle sidecar run the fetch step in the serving image: python3 is all
    # they need. The memory wait and the sidecar flush the page cache (memsettle.py).
    head_url = f"http://{names.api}.{ns}.svc:{ctx.api_port}/health"
    init = [
        hardened(container("wait-weights", profile.image, plan.wait, volumeMounts=init_mounts)),
        settle_container("wait-memory", profile.image, plan.memwait, script_mount),
        {
            **settle_container(
                "settle", profile.image, settle_argv(head_url, ctx.startup_timeout), script_mount
            ),
            # A native sidecar: it starts before the engine and runs beside it.
            "restartPolicy": "Always",
        },
    ]
    volumes = [hf_cache_volume(ctx), switch_volume(names.switch), tmp_volume()]
    secret = secret_name(res)
    secret_volume = {
        "name": SECRET_VOLUME,
        # rsync refuses a secrets or password file that others can read.
        "secret": {"secretName": secret, "defaultMode": 0o400},
    }
    # The engine image downloads: it carries huggingface_hub, which the engine loads models with.
    # The only container that reaches the Hub, and so the only one given the HF token.
    download = hardened(
        container(
            "download",
            profile.image,
            plan.download,
            env=[{"name": "HF_HOME", "value": contract.HF_CACHE_MOUNT}, token],
            volumeMounts=[hf_mount, script_mount],
        )
    )
    pod: dict[str, Any] = {"nodeSelector": node_selector(res.nodes[0])}
    if plan.push is not None:
        # Only a Job that pushes over the fabric joins the host's network (the PF addresses).
        pod["hostNetwork"] = True
        push = hardened(
            container(
                "push",
                ctx.fetch_image,
                plan.push,
                volumeMounts=[hf_mount, script_mount, secret_mount],
            )
        )
        pod |= {"initContainers": [download], "containers": [push]}
        pod["volumes"] = [*volumes, secret_volume]
    else:
        pod |= {"containers": [download], "volumes": volumes}
    docs = [
        # Labelled as a serving object of the deployment: removed with it.
        configmap(names.switch, ns, res.labels, script),
        # A pod on the cluster network is under the namespace's default deny: its own policy
        # lets the download out, applied before the Job. The host network is outside every policy.
        *([] if pod.get("hostNetwork") else [fetch_policy(res, labels)]),
        job(
            names.fetch,
            ns,
            labels,
            pod_spec(pod, nonroot=True),
            timeout,
            FETCH_BACKOFF,
            FETCH_SKIPS,
        ),
    ]
    for node, argv in plan.receive:
        receive = hardened(
            container(
                "receive",
                ctx.fetch_image,
                argv,
                ports=[{"name": "rsync", "containerPort": plan.port}],
                volumeMounts=[hf_mount, script_mount, secret_mount, manifest_mount],
            )
        )
        # The receiver starts as root to chroot and to hand the model's folder to the transfer
        # user; the rest of the hardening stays (read-only root, RuntimeDefault, no escalation).
        receive["securityContext"] = {**receive["securityContext"], **RECEIVER_SECURITY}
        del receive["securityContext"]["runAsNonRoot"], receive["securityContext"]["runAsGroup"]
        receiver = pod_spec(
            {
                "nodeSelector": node_selector(node),
                "hostNetwork": True,
                "containers": [receive],
                "volumes": [*volumes, secret_volume, manifest_volume],
            },
            nonroot=False,
        )
        receiver["securityContext"] = {"seccompProfile": dict(SECCOMP)}
        docs.append(
            job(names.receiver(node), ns, labels, receiver, timeout, FETCH_BACKOFF, RECEIVER_SKIPS)
        )
    facts = {
        "fetch_job": names.fetch,
        "receiver_jobs": [names.receiver(node) for node, _argv in plan.receive],
        "revision": plan.revision,
        "revision_pinned": profile.revision is not None,
        "marker": plan.marker,
        "marker_on_host": plan.marker_on_host,
        "need_bytes": res.need_bytes,
        "copy_to": plan.copy_to,
        "copy_rails": plan.copy_rails,
        "copy_shape": plan.shape,
        "fetch_port": plan.port,
        "fetch_secret": secret,
        "manifest_configmap": names.manifest,
        # Labelled as the switch ConfigMap: a serving object of the deployment, removed with it.
        "manifest_labels": dict(res.labels),
        # The switch estimate, printed beside the measured timeline (seconds, None: not
        # predicted; how it was reckoned, from which rates).
        "predicted": [
            {"phase": p.name, "seconds": p.seconds, "how": p.how} for p in estimate(res).phases
        ],
    }
    return Switch(init, docs, facts)


def fetch_objects(res: Resolution) -> list[dict[str, Any]]:
    """The switch ConfigMap, the fetch Job (with its NetworkPolicy on the cluster network) and
    the receiver Jobs of one deployment."""
    return switch_objects(res).objects


def rank_init_containers(res: Resolution) -> list[dict[str, Any]]:
    """What every rank of one deployment waits for before it starts (its init containers)."""
    return switch_objects(res).init_containers


def prepull_jobs(deployments: Sequence[Resolution], ctx: ServingContext) -> list[dict[str, Any]]:
    """One Job per Spark that pulls every image it is about to run (each deployment's serving
    image on its Sparks, the fetch image on every Spark that fetches or receives) by running a
    trivial command in each. Empty unless ``serving_prepull`` is on. No GPU is requested: the old
    model keeps its GPU while the new image downloads."""
    if not ctx.prepull:
        return []
    images: dict[str, tuple[NodePlan, list[str]]] = {}
    for res in deployments:
        for node in res.nodes:
            wanted = images.setdefault(node.name, (node, []))[1]
            for image in (res.profile.image, res.ctx.fetch_image):
                if image and image not in wanted:  # no fetch image: nothing to pull for it
                    wanted.append(image)
    labels = {**contract.PART_OF, contract.LABEL_COMPONENT: contract.COMPONENT_PREPULL}
    return [
        job(
            f"{contract.OBJECT_PREFIX}-prepull-{node.spark_index}",
            ctx.namespace,
            {**labels, contract.LABEL_SPARK_INDEX: str(node.spark_index)},
            pod_spec(
                {
                    "nodeSelector": node_selector(node),
                    "containers": [
                        hardened(container(f"pull-{i}", image, ["python3", "-c", "pass"]))
                        for i, image in enumerate(wanted)
                    ],
                    "volumes": [tmp_volume()],
                },
                nonroot=True,
            ),
            ctx.prepull_timeout,
            PREPULL_BACKOFF,
            PREPULL_SKIPS,
        )
        for node, wanted in sorted(images.values(), key=lambda item: item[0].spark_index)
    ]
