"""One OpenAI endpoint for every deployment: a LiteLLM proxy that routes by model alias.

Its config is rendered from the deployments (alias -> the deployment's API Service) into a
ConfigMap; its master key comes from a Secret the serve play creates from a vaulted variable, the
same way as the HF token, and is only referenced here; so is each deployment's engine key, which
the gateway sends to that deployment (from the deployment's key Secret). The Service ``sparkrack-openai`` is what
clients call. The gateway runs on the control plane, not on a Spark: it needs no GPU and no
unified memory the planner counts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from sparkrack import contract
from sparkrack.k8s import scanner
from sparkrack.serving.context import ServingContext
from sparkrack.serving.deployments.load import Deployment
from sparkrack.serving.objects.network import gateway_policy
from sparkrack.serving.objects.pod import hardened, meta, pod_spec, secret_env, tmp_volume

LITELLM_VERSION = "1.102.4"
"""The LiteLLM release: the PyPI wheel the routing test runs, and the image tag below."""
IMAGE = f"ghcr.io/berriai/litellm:main-v{LITELLM_VERSION}"
NAME = f"{contract.OBJECT_PREFIX}-gateway"
CONFIG_FILE = "config.yaml"
CONFIG_MOUNT = "/etc/litellm"
PORT = 4000
MASTER_KEY_ENV = "LITELLM_MASTER_KEY"
OFFLINE_ENV: dict[str, str] = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
"""LiteLLM reads its bundled price table instead of downloading one at start
(``litellm_core_utils/get_model_cost_map.py``): the gateway's egress reaches the engines only."""
SECRET_KEY = contract.GATEWAY_KEY_KEY
ROUTER_SETTINGS: dict[str, Any] = {
    "routing_strategy": "simple-shuffle",
    "num_retries": 2,
    "allowed_fails": 1,
    "cooldown_time": 30,
}
"""How the proxy's router treats the routes of one alias: replicas (deployments sharing an alias)
are picked at random; a failed request is retried, on another replica when there is one; a route
that fails more than once in a minute sits out ``cooldown_time`` seconds. A sick deployment's API
Service loses its endpoints (the watchdog), so its route fails fast and cools down until the
watchdog puts it back."""


def key_env(dep: Deployment) -> str | None:
    """The gateway's variable holding a deployment's engine key (None: its engine checks none)."""
    if dep.res.engine.client_key_env is None:
        return None
    return "SPARKRACK_KEY_" + re.sub(r"[^A-Z0-9]", "_", dep.name.upper())


def backend_key(dep: Deployment) -> str:
    """What the gateway sends a deployment as its key: the engine key, read from the gateway's
    environment (``os.environ/``: LiteLLM resolves it when it loads the config). An engine that
    checks no key gets a placeholder naming the deployment (LiteLLM's OpenAI client needs one)."""
    env = key_env(dep)
    return f"os.environ/{env}" if env else f"{contract.OBJECT_PREFIX}-{dep.name}"


def key_envs(deployments: Sequence[Deployment]) -> list[dict[str, Any]]:
    """The gateway's variables of the deployments' engine keys, each from its key Secret."""
    return [
        secret_env(env, d.res.names.keys, contract.ENGINE_KEY_KEY)
        for d in deployments
        if (env := key_env(d)) is not None
    ]


def backend_url(dep: Deployment, ctx: ServingContext) -> str:
    return f"http://{dep.res.names.api}.{ctx.namespace}.svc.cluster.local:{ctx.api_port}/v1"


def config(
    deployments: Sequence[Deployment], ctx: ServingContext, urls: dict[str, str] | None = None
) -> dict[str, Any]:
    """The LiteLLM proxy config: one route per deployment under its alias (replicas share one).
    ``urls`` replaces a deployment's backend URL (by deployment name), for running the same config
    against local servers."""
    return {
        "model_list": [
            {
                "model_name": d.alias,
                "litellm_params": {
                    "model": f"openai/{d.served_name()}",
                    "api_base": (urls or {}).get(d.name, backend_url(d, ctx)),
                    "api_key": backend_key(d),
                },
                "model_info": {"id": d.name},
            }
            for d in deployments
        ],
        "router_settings": dict(ROUTER_SETTINGS),
        "general_settings": {"master_key": f"os.environ/{MASTER_KEY_ENV}"},
    }


def config_text(deployments: Sequence[Deployment], ctx: ServingContext) -> str:
    return yaml.safe_dump(config(deployments, ctx), sort_keys=False)


def service(ctx: ServingContext, labels: dict[str, str]) -> dict[str, Any]:
    """The Service clients call: in the cluster only, or with ``serving_gateway_node_port``
    also at that NodePort. ``externalTrafficPolicy: Local`` lets only a node that runs the
    gateway (the control plane, its nodeSelector) answer there, and keeps the caller's address
    for the NetworkPolicy's ``serving_gateway_clients``."""
    port: dict[str, Any] = {"name": "http", "port": ctx.api_port, "targetPort": "http"}
    spec: dict[str, Any] = {"type": "ClusterIP", "selector": dict(labels), "ports": [port]}
    if ctx.gateway_node_port is not None:
        port["nodePort"] = ctx.gateway_node_port
        spec.update(type="NodePort", externalTrafficPolicy="Local")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(contract.API_SERVICE, ctx.agents_namespace, labels),
        "spec": spec,
    }


def manifests(deployments: Sequence[Deployment], ctx: ServingContext) -> list[dict[str, Any]]:
    """ConfigMap (the config), Deployment (the proxy), the Service clients call and the
    NetworkPolicy of who may call it."""
    labels = {**contract.PART_OF, contract.LABEL_COMPONENT: contract.COMPONENT_GATEWAY}
    ns = ctx.agents_namespace
    # LiteLLM runs as the serving user on a read-only root: its optional web UI, which it would
    # rewrite under /var/lib/litellm at start, is not served; the OpenAI API is all clients use.
    litellm = hardened(
        {
            "name": "litellm",
            "image": IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "args": ["--config", f"{CONFIG_MOUNT}/{CONFIG_FILE}", "--port", str(PORT)],
            "env": [
                secret_env(MASTER_KEY_ENV, ctx.gateway_key_secret, SECRET_KEY),
                *key_envs(deployments),
                *({"name": k, "value": v} for k, v in OFFLINE_ENV.items()),
            ],
            "ports": [{"name": "http", "containerPort": PORT}],
            "readinessProbe": {
                "httpGet": {"path": "/health/readiness", "port": "http"},
                "periodSeconds": 10,
            },
            "livenessProbe": {
                "httpGet": {"path": "/health/liveliness", "port": "http"},
                "periodSeconds": 30,
            },
            "volumeMounts": [{"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True}],
        }
    )
    pod = pod_spec(
        {
            "nodeSelector": {contract.LABEL_ROLE: contract.ROLE_CONTROL_PLANE},
            "containers": [litellm],
            "volumes": [{"name": "config", "configMap": {"name": NAME}}, tmp_volume()],
        },
        nonroot=True,
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(NAME, ns, labels),
            "data": {CONFIG_FILE: config_text(deployments, ctx)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(
                NAME,
                ns,
                labels,
                scanner.skips(
                    scanner.IMAGES,
                    scanner.GATEWAY_RESOURCES,
                    scanner.SECRET_ENV,
                ),
            ),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": dict(labels)},
                "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
            },
        },
        service(ctx, labels),
        gateway_policy(ctx, PORT, [d.res for d in deployments]),
    ]
