"""Multus CNI, thick plugin (client shim + per-node daemon), laid out for K3s.

K3s keeps its CNI config in ``/var/lib/rancher/k3s/agent/etc/cni/net.d`` and its plugin binaries
in ``/var/lib/rancher/k3s/data/cni``. The multus daemon runs delegates chrooted to the host
(``chrootDir``), so ``binDir`` is the host path, and the bin dir is mounted at the identical path
inside the daemon (Multus requires the same path in the pod and on the host).
"""

from __future__ import annotations

import json

from sparkrack.k8s import scanner
from sparkrack.k8s.common import (
    K3S_CNI_BIN_DIR,
    K3S_CNI_CONF_DIR,
    TOLERATE_TAINTS,
    Manifest,
    daemon_set,
    metadata,
)
from sparkrack.k8s.options import ClusterOptions

COMPONENT = "multus"
NAMESPACE = "kube-system"
NAD_CRD_NAME = "network-attachment-definitions.k8s.cni.cncf.io"


def daemon_config() -> dict[str, object]:
    """The multus daemon's ``daemon-config.json`` for K3s paths."""
    return {
        "chrootDir": "/hostroot",
        "cniVersion": "0.3.1",
        "logLevel": "verbose",
        "logToStderr": True,
        "binDir": K3S_CNI_BIN_DIR,
        "cniConfigDir": "/host/etc/cni/net.d",
        "multusAutoconfigDir": "/host/etc/cni/net.d",
        "multusConfigFile": "auto",
        "socketDir": "/host/run/multus/",
    }


def nad_crd() -> Manifest:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata(NAD_CRD_NAME, COMPONENT),
        "spec": {
            "group": "k8s.cni.cncf.io",
            "scope": "Namespaced",
            "names": {
                "plural": "network-attachment-definitions",
                "singular": "network-attachment-definition",
                "kind": "NetworkAttachmentDefinition",
                "shortNames": ["net-attach-def"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {
                                    "type": "object",
                                    "properties": {"config": {"type": "string"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def _host_path(name: str, path: str, kind: str | None = None) -> dict[str, object]:
    hp: dict[str, object] = {"path": path}
    if kind:
        hp["type"] = kind
    return {"name": name, "hostPath": hp}


def render_multus(opts: ClusterOptions) -> list[Manifest]:
    selector = {"name": "multus"}
    rbac: list[Manifest] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": metadata(
                "multus",
                COMPONENT,
                annotations=scanner.skips({"CKV_K8S_49": scanner.MULTUS["CKV_K8S_49"]}),
            ),
            "rules": [
                {"apiGroups": ["k8s.cni.cncf.io"], "resources": ["*"], "verbs": ["*"]},
                {
                    "apiGroups": [""],
                    "resources": ["pods", "pods/status"],
                    "verbs": ["get", "list", "update", "watch"],
                },
                {
                    "apiGroups": ["", "events.k8s.io"],
                    "resources": ["events"],
                    "verbs": ["create", "patch", "update"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": metadata("multus", COMPONENT),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "multus",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "multus", "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata("multus", COMPONENT, NAMESPACE),
        },
    ]
    config_map: Manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata("multus-daemon-config", COMPONENT, NAMESPACE),
        "data": {"daemon-config.json": json.dumps(daemon_config(), indent=2)},
    }
    mounts = [
        {"name": "cni", "mountPath": "/host/etc/cni/net.d"},
        {"name": "cnibin", "mountPath": K3S_CNI_BIN_DIR},
        {"name": "host-run", "mountPath": "/host/run"},
        {"name": "host-var-lib-cni-multus", "mountPath": "/var/lib/cni/multus"},
        {
            "name": "host-var-lib-kubelet",
            "mountPath": "/var/lib/kubelet",
            "mountPropagation": "HostToContainer",
        },
        {"name": "host-run-k8s-cni-cncf-io", "mountPath": "/run/k8s.cni.cncf.io"},
        {
            "name": "host-run-netns",
            "mountPath": "/run/netns",
            "mountPropagation": "HostToContainer",
        },
        {"name": "multus-daemon-config", "mountPath": "/etc/cni/net.d/multus.d", "readOnly": True},
        {"name": "hostroot", "mountPath": "/hostroot", "mountPropagation": "HostToContainer"},
        {"name": "multus-conf-dir", "mountPath": "/etc/cni/multus/net.d"},
    ]
    pod_spec: dict[str, object] = {
        "hostNetwork": True,
        "hostPID": True,
        "priorityClassName": "system-node-critical",
        "serviceAccountName": "multus",
        "terminationGracePeriodSeconds": 10,
        "tolerations": TOLERATE_TAINTS,
        "initContainers": [
            {
                "name": "install-multus-binary",
                "image": opts.multus_image,
                "command": [
                    "/usr/src/multus-cni/bin/install_multus",
                    "-d",
                    "/host/opt/cni/bin",
                    "-t",
                    "thick",
                ],
                "resources": {"requests": {"cpu": "10m", "memory": "15Mi"}},
                "securityContext": {"privileged": True},
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": [
                    {
                        "name": "cnibin",
                        "mountPath": "/host/opt/cni/bin",
                        "mountPropagation": "Bidirectional",
                    }
                ],
            }
        ],
        "containers": [
            {
                "name": "kube-multus",
                "image": opts.multus_image,
                "command": ["/usr/src/multus-cni/bin/multus-daemon"],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "50Mi"},
                    "limits": {"cpu": "100m", "memory": "50Mi"},
                },
                "securityContext": {"privileged": True},
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "env": [
                    {
                        "name": "MULTUS_NODE_NAME",
                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                    }
                ],
                "volumeMounts": mounts,
            }
        ],
        "volumes": [
            _host_path("cni", K3S_CNI_CONF_DIR),
            _host_path("cnibin", K3S_CNI_BIN_DIR),
            _host_path("hostroot", "/"),
            {
                "name": "multus-daemon-config",
                "configMap": {
                    "name": "multus-daemon-config",
                    "items": [{"key": "daemon-config.json", "path": "daemon-config.json"}],
                },
            },
            _host_path("host-run", "/run"),
            _host_path("host-var-lib-cni-multus", "/var/lib/cni/multus"),
            _host_path("host-var-lib-kubelet", "/var/lib/kubelet"),
            _host_path("host-run-k8s-cni-cncf-io", "/run/k8s.cni.cncf.io"),
            _host_path("host-run-netns", "/run/netns/"),
            _host_path("multus-conf-dir", "/etc/cni/multus/net.d", "DirectoryOrCreate"),
        ],
    }
    daemonset = daemon_set("kube-multus-ds", COMPONENT, NAMESPACE, selector, pod_spec)
    daemonset["metadata"]["annotations"] = scanner.skips(
        scanner.IMAGES, scanner.NETWORK_POLICY, scanner.MULTUS
    )
    return [nad_crd(), *rbac, config_map, daemonset]
