"""One OpenAI endpoint for every deployment: a LiteLLM proxy that routes by model alias.

Its config is rendered from the deployments (alias -> the deployment's API Service) into a
ConfigMap; its master key comes from a Secret the serve play creates from a vaulted variable, the
same way as the HF token, and is only referenced here. The Service ``sparkrack-openai`` is what
clients call. The gateway runs on the control plane, not on a Spark: it needs no GPU and no
unified memory the planner counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from sparkrack import contract
from sparkrack.k8s import scanner
from sparkrack.serving.context import ServingContext
from sparkrack.serving.deployments.load import Deployment
from sparkrack.serving.objects.pod import hardened, meta, pod_spec, tmp_volume

LITELLM_VERSION = "1.102.4"
"""The LiteLLM release: the PyPI wheel the routing test runs, and the image tag below."""
IMAGE = f"ghcr.io/berriai/litellm:main-v{LITELLM_VERSION}"
NAME = f"{contract.OBJECT_PREFIX}-gateway"
CONFIG_FILE = "config.yaml"
CONFIG_MOUNT = "/etc/litellm"
PORT = 4000
MASTER_KEY_ENV = "LITELLM_MASTER_KEY"
SECRET_KEY = contract.GATEWAY_KEY_KEY


def backend_key(dep: Deployment) -> str:
    """The key the gateway sends to a deployment. Servers reached inside the cluster check none,
    but LiteLLM's OpenAI client needs one; naming the deployment lets a test prove each route
    reaches its own backend."""
    return f"{contract.OBJECT_PREFIX}-{dep.name}"


def backend_url(dep: Deployment, ctx: ServingContext) -> str:
    return f"http://{dep.res.names.api}.{ctx.namespace}.svc.cluster.local:{ctx.api_port}/v1"


def config(
    deployments: Sequence[Deployment], ctx: ServingContext, urls: dict[str, str] | None = None
) -> dict[str, Any]:
    """The LiteLLM proxy config: one route per alias. ``urls`` replaces a deployment's backend
    URL (by deployment name), for running the same config against local servers."""
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
        "general_settings": {"master_key": f"os.environ/{MASTER_KEY_ENV}"},
    }


def config_text(deployments: Sequence[Deployment], ctx: ServingContext) -> str:
    return yaml.safe_dump(config(deployments, ctx), sort_keys=False)


def manifests(deployments: Sequence[Deployment], ctx: ServingContext) -> list[dict[str, Any]]:
    """ConfigMap (the config), Deployment (the proxy) and the Service clients call."""
    labels = {**contract.PART_OF, contract.LABEL_COMPONENT: contract.COMPONENT_GATEWAY}
    ns = ctx.namespace
    # LiteLLM runs as the serving user on a read-only root: its optional web UI, which it would
    # rewrite under /var/lib/litellm at start, is not served; the OpenAI API is all clients use.
    litellm = hardened(
        {
            "name": "litellm",
            "image": IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "args": ["--config", f"{CONFIG_MOUNT}/{CONFIG_FILE}", "--port", str(PORT)],
            "env": [
                {
                    "name": MASTER_KEY_ENV,
                    "valueFrom": {
                        "secretKeyRef": {"name": ctx.gateway_key_secret, "key": SECRET_KEY}
                    },
                }
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
                    scanner.NETWORK_POLICY,
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
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(contract.API_SERVICE, ns, labels),
            "spec": {
                "type": "ClusterIP",
                "selector": dict(labels),
                "ports": [{"name": "http", "port": ctx.api_port, "targetPort": "http"}],
            },
        },
    ]
