"""NVIDIA k8s-device-plugin on the Sparks: advertises ``nvidia.com/gpu`` (1 per GB10 by default).

Runs only on nodes the K3s agent role labelled ``sparkrack.io/role=spark``. The container runtime
side (nvidia runtime as K3s' default, or a CDI spec) comes from the nvidia_driver role; the device
list strategy here has to match it (``cdi-cri`` with the CDI spec, ``envvar`` with the runtime).
"""

from __future__ import annotations

import json

from sparkrack.k8s import scanner
from sparkrack.k8s.common import (
    LABEL_ROLE,
    ROLE_SPARK,
    TOLERATE_TAINTS,
    Manifest,
    daemon_set,
    metadata,
)
from sparkrack.k8s.options import ClusterOptions

COMPONENT = "nvidia-device-plugin"
NAMESPACE = "kube-system"


def sharing_config(opts: ClusterOptions) -> dict[str, object] | None:
    """Time-slicing config when more than one ``nvidia.com/gpu`` per Spark is wanted, else None."""
    if opts.gpus_per_spark <= 1:
        return None
    return {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "resources": [{"name": "nvidia.com/gpu", "replicas": opts.gpus_per_spark}]
            }
        },
    }


def render_device_plugin(opts: ClusterOptions) -> list[Manifest]:
    selector = {"name": COMPONENT}
    sharing = sharing_config(opts)
    args = [
        "--device-discovery-strategy=nvml",
        f"--device-list-strategy={opts.device_list_strategy}",
    ]
    mounts: list[dict[str, object]] = [
        {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
        {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True},
        {"name": "cdi-root", "mountPath": "/var/run/cdi"},
    ]
    volumes: list[dict[str, object]] = [
        {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
        {"name": "driver-root", "hostPath": {"path": "/"}},
        {"name": "cdi-root", "hostPath": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}},
    ]
    docs: list[Manifest] = []
    if sharing is not None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": metadata("nvidia-device-plugin-config", COMPONENT, NAMESPACE),
                "data": {"config.yaml": json.dumps(sharing, indent=2)},
            }
        )
        args.append("--config-file=/config/config.yaml")
        mounts.append({"name": "plugin-config", "mountPath": "/config", "readOnly": True})
        volumes.append(
            {"name": "plugin-config", "configMap": {"name": "nvidia-device-plugin-config"}}
        )
    pod_spec: dict[str, object] = {
        "priorityClassName": "system-node-critical",
        # Talks to the kubelet's device-plugin socket, never to the API.
        "automountServiceAccountToken": False,
        "nodeSelector": {LABEL_ROLE: ROLE_SPARK},
        "tolerations": TOLERATE_TAINTS,
        "containers": [
            {
                "name": "nvidia-device-plugin-ctr",
                "image": opts.device_plugin_image,
                "args": args,
                "securityContext": {"privileged": True},
                "resources": {
                    "requests": {"cpu": "10m", "memory": "64Mi"},
                    "limits": {"cpu": "200m", "memory": "256Mi"},
                },
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    if opts.gpu_runtime_class:
        pod_spec["runtimeClassName"] = opts.gpu_runtime_class
    daemonset = daemon_set("nvidia-device-plugin", COMPONENT, NAMESPACE, selector, pod_spec)
    daemonset["metadata"]["annotations"] = scanner.skips(
        scanner.IMAGES, scanner.NETWORK_POLICY, scanner.DEVICE_PLUGIN
    )
    return [*docs, daemonset]
