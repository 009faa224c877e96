"""The Jobs of a model switch: image pre-pull, fetch once, copy over the fabric.

Per deployment (:func:`fetch_objects`, validated offline like every other manifest):

* the switch ConfigMap: the fetch step (``fetch_step.py``, stdlib only, sent verbatim), mounted
  at :data:`~sparkrack.contract.SWITCH_MOUNT` by the Jobs below and by every rank's init
  containers (:func:`sparkrack.serving.manifests.switch_init_containers`);
* the fetch Job, pinned to the head's Spark: ``download`` (an init container: free disk checked
  against the model size first, the HF token from its Secret by reference), then ``push`` of the
  snapshot to every other Spark of the deployment over the fabric PF addresses (rsync, the
  marker last). A one-Spark deployment only downloads;
* one receiver Job per other Spark: an rsync daemon on the host network (so it listens on the
  fabric PF address), which exits when the marker arrives. The rsync password comes from a Secret
  the serve play creates; only the reference is rendered here.

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
from typing import Any

from sparkrack import contract
from sparkrack.fabric.addressplan import FabricPlan, NodePlan
from sparkrack.planner.memory import GB
from sparkrack.serving.context import ServingContext
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.base import hf_token_env, section
from sparkrack.serving.objects.ranks import (
    SWITCH_VOLUME,
    deployment_name,
    meta,
    names,
    no_expansion,
    node_selector,
    rank_nodes,
    receiver_name,
    serving_labels,
)
from sparkrack.serving.profile.capacity import plan_profile
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.switch.plan import (
    UNPINNED,
    download_argv,
    marker_path,
    push_argv,
    receive_argv,
    script_text,
)

DISK_MARGIN = 0.05
"""Free disk asked beyond the checkpoint: tokenizer, configs, partial files of a resumed copy."""
FETCH_BACKOFF = 2
"""Retries of a fetch or receiver pod (an interrupted download or copy resumes)."""
PREPULL_BACKOFF = 1
JOB_GRACE_SECONDS = 600
"""Added to a Job's own timeout for its deadline: image pull and pod start."""
FINISHED_TTL_SECONDS = 86400
"""A finished Job (and its pod's log) is kept a day, then removed by Kubernetes."""
SECRET_VOLUME = "fetch-secret"


def fetch_labels(profile: Profile, ctx: ServingContext) -> dict[str, str]:
    return {
        **contract.PART_OF,
        contract.LABEL_COMPONENT: contract.COMPONENT_FETCH,
        contract.LABEL_DEPLOYMENT: deployment_name(profile, ctx),
        contract.LABEL_PROFILE: contract.label_value(profile.name),
    }


def fetch_selector() -> str:
    """Label selector of every fetch and receiver Job."""
    return f"{contract.LABEL_COMPONENT}={contract.COMPONENT_FETCH}"


def prepull_selector() -> str:
    return f"{contract.LABEL_COMPONENT}={contract.COMPONENT_PREPULL}"


def need_bytes(profile: Profile) -> int:
    """Free disk the fetch step asks for: the checkpoint size (``model_info.weights_gb``, else the
    planner's weights) plus :data:`DISK_MARGIN`."""
    weights = section(profile.data, "model_info").get("weights_gb")
    gb = float(weights) if weights is not None else plan_profile(profile).weights_total_gb
    return int(gb * GB * (1 + DISK_MARGIN))


def pf_address(plan: FabricPlan, node: NodePlan) -> str:
    """The Spark's address on its first fabric rail's PF: where its receiver listens."""
    for port in node.ports:
        if port.name == plan.sriov_port:
            return port.address
    return node.ports[0].address


def switch_configmap(profile: Profile, ctx: ServingContext) -> dict[str, Any]:
    """The fetch step for the Jobs and the ranks' init containers; labelled as a serving object
    of the deployment, so it is removed with it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(
            names(profile, ctx)["switch"], ctx.namespace, serving_labels(profile, ctx)
        ),
        "data": {contract.FETCH_FILE: script_text()},
    }


def _job(
    name: str, ctx: ServingContext, labels: dict[str, str], pod: dict[str, Any], timeout: int
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, ctx.namespace, labels),
        "spec": {
            "backoffLimit": FETCH_BACKOFF,
            "activeDeadlineSeconds": timeout + JOB_GRACE_SECONDS,
            "ttlSecondsAfterFinished": FINISHED_TTL_SECONDS,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"restartPolicy": "Never", **pod},
            },
        },
    }


def _container(name: str, image: str, argv: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [no_expansion(w) for w in argv],
        **extra,
    }


def fetch_objects(profile: Profile, ctx: ServingContext) -> list[dict[str, Any]]:
    """The switch ConfigMap, the fetch Job on the head's Spark and a receiver Job per other
    Spark of one deployment."""
    nodes = rank_nodes(engine_of(profile.data), ctx)
    head, others = nodes[0], nodes[1:]
    labels = fetch_labels(profile, ctx)
    revision = profile.revision or UNPINNED
    size = need_bytes(profile)
    cache = contract.HF_HUB_CACHE_MOUNT
    hf_mount = {"name": "hf-cache", "mountPath": contract.HF_CACHE_MOUNT}
    switch_mount = {"name": SWITCH_VOLUME, "mountPath": contract.SWITCH_MOUNT, "readOnly": True}
    secret_mount = {
        "name": SECRET_VOLUME,
        "mountPath": contract.FETCH_SECRET_MOUNT,
        "readOnly": True,
    }
    volumes: list[dict[str, Any]] = [
        {"name": "hf-cache", "hostPath": {"path": ctx.hf_cache, "type": "DirectoryOrCreate"}},
        {
            "name": SWITCH_VOLUME,
            "configMap": {"name": names(profile, ctx)["switch"], "defaultMode": 0o555},
        },
    ]
    secret_volume = {
        "name": SECRET_VOLUME,
        # rsync refuses a secrets or password file that others can read.
        "secret": {"secretName": ctx.fetch_secret, "defaultMode": 0o400},
    }
    # The engine image downloads: it carries huggingface_hub, which the engine loads models with.
    download = _container(
        "download",
        profile.image,
        download_argv(profile.model, revision, cache, size, timeout_s=ctx.fetch_timeout),
        env=[{"name": "HF_HOME", "value": contract.HF_CACHE_MOUNT}, hf_token_env(ctx)],
        volumeMounts=[hf_mount, switch_mount],
    )
    pod: dict[str, Any] = {"nodeSelector": node_selector(head), "hostNetwork": True}
    if others:
        push = _container(
            "push",
            ctx.fetch_image,
            push_argv(
                cache,
                profile.model,
                revision,
                [pf_address(ctx.plan, n) for n in others],
                f"{contract.FETCH_SECRET_MOUNT}/{contract.FETCH_PASSWORD_KEY}",
                port=ctx.fetch_port,
                timeout_s=ctx.fetch_timeout,
            ),
            volumeMounts=[hf_mount, switch_mount, secret_mount],
        )
        pod |= {"initContainers": [download], "containers": [push]}
        pod["volumes"] = [*volumes, secret_volume]
    else:
        pod |= {"containers": [download], "volumes": volumes}
    docs = [
        switch_configmap(profile, ctx),
        _job(names(profile, ctx)["fetch"], ctx, labels, pod, ctx.fetch_timeout),
    ]
    for node in others:
        receive = _container(
            "receive",
            ctx.fetch_image,
            receive_argv(
                cache,
                size,
                f"{contract.FETCH_SECRET_MOUNT}/{contract.FETCH_SECRETS_KEY}",
                port=ctx.fetch_port,
                address=pf_address(ctx.plan, node),
                repo=profile.model,
                revision=revision,
                timeout_s=ctx.fetch_timeout,
            ),
            ports=[{"name": "rsync", "containerPort": ctx.fetch_port}],
            volumeMounts=[hf_mount, switch_mount, secret_mount],
        )
        docs.append(
            _job(
                receiver_name(profile, ctx, node),
                ctx,
                labels,
                {
                    "nodeSelector": node_selector(node),
                    "hostNetwork": True,
                    "containers": [receive],
                    "volumes": [*volumes, secret_volume],
                },
                ctx.fetch_timeout,
            )
        )
    return docs


def fetch_facts(profile: Profile, ctx: ServingContext) -> dict[str, Any]:
    """What the serve play and an owner need to know about one deployment's fetch."""
    nodes = rank_nodes(engine_of(profile.data), ctx)
    return {
        "fetch_job": names(profile, ctx)["fetch"],
        "receiver_jobs": [receiver_name(profile, ctx, n) for n in nodes[1:]],
        "revision": profile.revision or UNPINNED,
        "revision_pinned": profile.revision is not None,
        "marker": str(marker_path(contract.HF_HUB_CACHE_MOUNT, profile.model, profile.revision)),
        "marker_on_host": str(marker_path(f"{ctx.hf_cache}/hub", profile.model, profile.revision)),
        "need_bytes": need_bytes(profile),
        "copy_to": [pf_address(ctx.plan, n) for n in nodes[1:]],
    }


def prepull_jobs(
    deployments: Sequence[tuple[Profile, ServingContext]], ctx: ServingContext
) -> list[dict[str, Any]]:
    """One Job per Spark that pulls every image it is about to run (each deployment's serving
    image on its Sparks, the fetch image on every Spark that fetches or receives) by running a
    trivial command in each. Empty unless ``serving_prepull`` is on. No GPU is requested: the old
    model keeps its GPU while the new image downloads."""
    if not ctx.prepull:
        return []
    images: dict[str, tuple[NodePlan, list[str]]] = {}
    for profile, dctx in deployments:
        for node in rank_nodes(engine_of(profile.data), dctx):
            wanted = images.setdefault(node.name, (node, []))[1]
            for image in (profile.image, dctx.fetch_image):
                if image not in wanted:
                    wanted.append(image)
    labels = {**contract.PART_OF, contract.LABEL_COMPONENT: contract.COMPONENT_PREPULL}
    jobs = []
    for node, wanted in sorted(images.values(), key=lambda item: item[0].spark_index):
        pod = {
            "nodeSelector": node_selector(node),
            "containers": [
                _container(f"pull-{i}", image, ["python3", "-c", "pass"])
                for i, image in enumerate(wanted)
            ],
        }
        job = _job(
            f"{contract.OBJECT_PREFIX}-prepull-{node.spark_index}",
            ctx,
            {**labels, contract.LABEL_SPARK_INDEX: str(node.spark_index)},
            pod,
            ctx.prepull_timeout,
        )
        job["spec"]["backoffLimit"] = PREPULL_BACKOFF
        jobs.append(job)
    return jobs
