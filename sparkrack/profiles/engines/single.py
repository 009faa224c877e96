"""Single-Spark engines (vLLM, TensorRT-LLM): argv, environment and manifests.

The same serving objects as the SGLang path, built with the profiles team's helpers
(labels, names, probes, HF cache, HF-token Secret reference), for one StatefulSet pinned to
one Spark: the inventory's ``serving_spark`` (``ServingContext.spark``), else the rank-0
Spark of the address plan. Nothing here spans Sparks, so there is no NCCL environment, no
Multus VF and no privileged mode — seed 004 runs the container with ``--gpus all`` only.
"""

from __future__ import annotations

import posixpath
from typing import Any

import yaml

from sparkrack.addressplan import NodePlan
from sparkrack.errors import Problem, SparkrackError
from sparkrack.profiles.engines.knobs import RuntimeKnob
from sparkrack.profiles.manifests import (
    HF_TOKEN_KEY,
    PART_OF,
    RANK,
    SPARK_INDEX,
    _meta,
    _probes,
    names,
    services,
    serving_labels,
    slug,
    statefulset_name,
)
from sparkrack.profiles.profile import Profile
from sparkrack.profiles.registry import engine
from sparkrack.profiles.render import HF_CACHE_MOUNT, ServingContext, _lookup

CONFIG_MOUNT = "/etc/sparkrack/engine"
PLUGIN_VOLUME = "engine-plugins"


def _module(profile: Profile) -> Any:
    from sparkrack.profiles.engines import ENGINE_MODULES

    return ENGINE_MODULES[profile.engine]


def target_node(ctx: ServingContext) -> NodePlan:
    """The Spark that hosts a single-node engine."""
    chosen = getattr(ctx, "spark", None)
    if chosen is None:
        return ctx.rank_node(0)
    for node in ctx.plan.nodes:
        if node.name == chosen:
            return node
    raise SparkrackError(
        Problem(
            "serving_spark",
            str(chosen),
            "is not a Spark of the inventory",
            f"use one of: {', '.join(n.name for n in ctx.plan.nodes)}",
            "serving-spark",
        )
    )


def config_path(profile: Profile) -> str:
    return posixpath.join(CONFIG_MOUNT, _module(profile).CONFIG_FILE)


def _runtime(knob: RuntimeKnob, profile: Profile, ctx: ServingContext) -> str:
    if knob.runtime == "host":
        return "0.0.0.0"
    if knob.runtime == "port":
        return str(ctx.api_port)
    if knob.runtime == "config":
        return config_path(profile)
    raise ValueError(f"unknown runtime value {knob.runtime!r}")


def render_argv(profile: Profile, ctx: ServingContext) -> list[str]:
    """``<entry> <flags in registry order>`` + the profile's extra_args."""
    words: list[str] = list(_module(profile).ENTRY)
    for knob in engine(profile.engine).knobs:
        if isinstance(knob, RuntimeKnob):
            words += [str(knob.flag), _runtime(knob, profile, ctx)]
        else:
            words += knob.args(_lookup(profile.data, knob.key))
    return words + [str(w) for w in profile.data.get("extra_args") or []]


def render_env(profile: Profile, ctx: ServingContext) -> dict[str, str]:
    """Literal environment (the HF token comes from the Secret, not from here)."""
    env: dict[str, str] = {}
    for knob in engine(profile.engine).knobs:
        pair = knob.env_pair(_lookup(profile.data, knob.key))
        if pair:
            env[pair[0]] = pair[1]
    env["HF_HOME"] = HF_CACHE_MOUNT
    env.update({str(k): str(v) for k, v in (profile.data.get("env") or {}).items()})
    return env


def config_files(profile: Profile) -> dict[str, str]:
    """Engine config files rendered from the profile (TensorRT-LLM's extra-llm-api-config.yml)."""
    module = _module(profile)
    if not hasattr(module, "config_file"):
        return {}
    body = yaml.safe_dump(module.config_file(profile.data), sort_keys=False)
    return {module.CONFIG_FILE: body}


def plugin_files(profile: Profile) -> dict[str, str]:
    """File name in the model repo -> absolute path the server reads it from (vLLM plugins)."""
    path = (profile.data.get(profile.engine) or {}).get("reasoning_parser_plugin")
    return {posixpath.basename(str(path)): str(path)} if path else {}


def _secret_env(ctx: ServingContext) -> dict[str, Any]:
    return {
        "name": "HF_TOKEN",
        "valueFrom": {
            "secretKeyRef": {"name": ctx.hf_token_secret, "key": HF_TOKEN_KEY, "optional": True}
        },
    }


def _fetch_plugins(profile: Profile, ctx: ServingContext) -> dict[str, Any]:
    """Init container: the plugin files of the model repo, via the HF cache, into a volume."""
    wanted = sorted(plugin_files(profile))
    script = (
        "import shutil, sys\n"
        "from huggingface_hub import hf_hub_download\n"
        "repo = sys.argv[1]\n"
        "for name in sys.argv[2:]:\n"
        "    shutil.copy(hf_hub_download(repo, name), '/plugins/' + name)\n"
        "    print('fetched', repo, name)\n"
    )
    return {
        "name": "fetch-plugins",
        "image": profile.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", script, profile.model, *wanted],
        "env": [{"name": "HF_HOME", "value": HF_CACHE_MOUNT}, _secret_env(ctx)],
        "volumeMounts": [
            {"name": "hf-cache", "mountPath": HF_CACHE_MOUNT},
            {"name": PLUGIN_VOLUME, "mountPath": "/plugins"},
        ],
    }


def _container(profile: Profile, ctx: ServingContext) -> dict[str, Any]:
    module = _module(profile)
    argv = render_argv(profile, ctx)
    entry = len(module.ENTRY)
    env = [{"name": k, "value": v} for k, v in render_env(profile, ctx).items()]
    env.append(_secret_env(ctx))
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "hf-cache", "mountPath": HF_CACHE_MOUNT},
    ]
    if config_files(profile):
        mounts.append({"name": "engine-config", "mountPath": CONFIG_MOUNT, "readOnly": True})
    for name, path in sorted(plugin_files(profile).items()):
        mounts.append({"name": PLUGIN_VOLUME, "mountPath": path, "subPath": name, "readOnly": True})
    probes = _probes(profile, ctx, 0)
    probes["livenessProbe"]["httpGet"]["path"] = module.HEALTH_PATH
    return {
        "name": profile.engine,
        "image": profile.image,
        "imagePullPolicy": "IfNotPresent",
        "command": argv[:entry],
        "args": argv[entry:],
        "env": env,
        "ports": [{"name": "http", "containerPort": ctx.api_port}],
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "volumeMounts": mounts,
        **probes,
    }


def _config_map_name(profile: Profile) -> str:
    return f"sparkrack-{slug(profile.name)}-config"


def render_manifests(profile: Profile, ctx: ServingContext) -> list[dict[str, Any]]:
    labels = serving_labels(profile)
    n = names(profile)
    ns = ctx.namespace
    node = target_node(ctx)
    selector = {**labels, RANK: "0"}
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": ctx.shm_size}},
        {"name": "hf-cache", "hostPath": {"path": ctx.hf_cache, "type": "DirectoryOrCreate"}},
    ]
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": dict(PART_OF)}}
    ]
    files = config_files(profile)
    if files:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(_config_map_name(profile), ns, labels),
                "data": files,
            }
        )
        volumes.append({"name": "engine-config", "configMap": {"name": _config_map_name(profile)}})
    init: list[dict[str, Any]] = []
    if plugin_files(profile):
        init.append(_fetch_plugins(profile, ctx))
        volumes.append({"name": PLUGIN_VOLUME, "emptyDir": {}})
    docs += services(n, ns, labels, selector, ctx.api_port, ("http", ctx.api_port))
    pod_spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": str(node.name)},
        "terminationGracePeriodSeconds": 30,
        "containers": [_container(profile, ctx)],
        "volumes": volumes,
    }
    if init:
        pod_spec["initContainers"] = init
    docs.append(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": _meta(statefulset_name(profile, 0), ns, selector),
            "spec": {
                "serviceName": n["headless"],
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": {**selector, SPARK_INDEX: str(node.spark_index)}},
                    "spec": pod_spec,
                },
            },
        }
    )
    return docs
