"""The watchdog as a cluster component: per serving deployment, a one-replica Deployment running
``sparkrack watch`` on the control-plane node, with a Role that grants exactly what its actions
need.

Why a Deployment and not a sidecar of rank 0: the watchdog deletes every rank pod of a stalled
group; as a sidecar it would kill itself in the act, lose its in-flight evidence and share the
fate of a wedged pod. On the control-plane node it needs no GPU and none of a Spark's unified
memory, outlives every restart it makes, and keeps its state (restart times) in the annotations
of a ConfigMap of its own, the one object it writes besides the API Service's selector.

The watchdogs and the memory guard run in the agents' namespace
(:func:`sparkrack.contract.agents_namespace`, Pod Security ``restricted``), apart from the
privileged engine pods: their ServiceAccounts and pods live there, and their Roles live in the
serving namespace, bound to those accounts, naming the objects they may touch. Evidence goes to
a local PersistentVolume on the control-plane node (:func:`evidence_volume`), bounded by the
bundle format's rotation and size cap (:mod:`sparkrack.diagnose.bundle`).

The image must carry sparkrack with aiohttp and the Kubernetes client (image/Containerfile, built
by ``make image``); no image is named here, the inventory gives one pinned by digest.
"""

from __future__ import annotations

from typing import Any, Final

from sparkrack import contract
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.k8s import scanner
from sparkrack.serving.agent_settings import (
    EVIDENCE_DIR,
    MemguardSettings,
    WatchdogSettings,
    labels,
    name,
)
from sparkrack.serving.names import ObjectNames
from sparkrack.serving.objects.network import (
    NAMESPACE_NAME_LABEL,
    api_server,
    dns,
    in_namespace,
    policy,
    tcp,
)
from sparkrack.serving.objects.pod import (
    hardened,
    meta,
    no_expansion,
    pod_ip_env,
    pod_spec,
    secret_env,
    tmp_volume,
)
from sparkrack.serving.profile.knobs import PodVariable

COMPONENT = contract.COMPONENT_WATCHDOG
METRICS_PORT = 9464
EVIDENCE_MOUNT = EVIDENCE_DIR
RESOURCES = {
    "CKV_K8S_11": "the watchdog sleeps between probes; a CPU limit would only delay a verdict",
}

__all__ = [
    "MemguardSettings",
    "WatchdogSettings",
    "labels",
    "manifests",
    "memguard_manifests",
    "name",
    "rules",
    "state",
]


def rules(deployment: str, ranks: int) -> list[dict[str, Any]]:
    """What the watchdog's actions call on its own deployment's objects, each named: read its
    rank StatefulSets, read, delete and read the logs of their pods (a StatefulSet's one pod is
    ``<set>-0``), read and re-point its API Service, read and write its state ConfigMap. Events
    have generated names: listing them is the one unnamed right, and it reads only."""
    names = ObjectNames.of(deployment)
    sets = [names.statefulset(r) for r in range(ranks)]
    pods = [names.pod(r) for r in range(ranks)]
    return [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "delete"],
            "resourceNames": pods,
        },
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"], "resourceNames": pods},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
        {
            "apiGroups": [""],
            "resources": ["services"],
            "verbs": ["get", "patch"],
            "resourceNames": [names.api],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "patch"],
            "resourceNames": [name(deployment)],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets"],
            "verbs": ["get"],
            "resourceNames": sets,
        },
    ]


def state(deployment: str, namespace: str) -> dict[str, Any]:
    """The watchdog's state object: an empty ConfigMap whose annotations the watchdog writes
    (:meth:`sparkrack.watch.cluster.Cluster.annotate`); applying it again keeps them."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name(deployment), namespace, labels(deployment)),
    }


def account(
    metadata: dict[str, Any], granted: list[dict[str, Any]], home: str
) -> list[dict[str, Any]]:
    """A ServiceAccount in namespace ``home``, and a Role granting ``granted`` with its
    RoleBinding to that account in ``metadata``'s namespace, all named and labelled by
    ``metadata``."""
    obj = metadata["name"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**metadata, "namespace": home}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": dict(metadata),
            "rules": granted,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(metadata),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": obj},
            "subjects": [{"kind": "ServiceAccount", "name": obj, "namespace": home}],
        },
    ]


EVIDENCE_CLAIM: Final = f"{contract.OBJECT_PREFIX}-evidence"
"""The claim every watchdog of the agents' namespace mounts its evidence from."""
EVIDENCE_SIZE: Final = "1Gi"
"""The evidence volume's stated size: ``KEEP`` bundles of each deployment, each log cut to
``MAX_LOG_BYTES`` (:mod:`sparkrack.diagnose.bundle`), stay far below it; a local volume does not
enforce it."""


def evidence_volume(directory: str, agents: str) -> list[dict[str, Any]]:
    """A local PersistentVolume on the control-plane node at ``directory`` (the serve play
    creates it, owned by the watchdog's user) and the claim bound to it in namespace ``agents``.
    A pod of a ``restricted`` namespace may mount no hostPath; a claim it may."""
    labels = {**contract.PART_OF, contract.LABEL_COMPONENT: COMPONENT}
    volume = f"{agents}-evidence"
    access = ["ReadWriteOnce"]
    size = {"storage": EVIDENCE_SIZE}
    control_plane = {
        "key": contract.LABEL_ROLE,
        "operator": "In",
        "values": [contract.ROLE_CONTROL_PLANE],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume, "labels": dict(labels)},
            "spec": {
                "capacity": dict(size),
                "accessModes": list(access),
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "volumeMode": "Filesystem",
                "local": {"path": directory},
                "claimRef": {"namespace": agents, "name": EVIDENCE_CLAIM},
                "nodeAffinity": {
                    "required": {"nodeSelectorTerms": [{"matchExpressions": [control_plane]}]}
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta(EVIDENCE_CLAIM, agents, labels),
            "spec": {
                "accessModes": list(access),
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": dict(size)},
            },
        },
    ]


def manifests(
    deployment: str,
    namespace: str,
    url: str,
    alias: str,
    settings: WatchdogSettings,
    head: dict[str, str] | None = None,
    api_port: int = SERVING_DEFAULTS["serving_api_port"],
    key_secret: str | None = None,
    ranks: int = 1,
    api_address: str = "",
    agents: str | None = None,
) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, state ConfigMap, NetworkPolicy and the Deployment of
    one serving deployment's watchdog (``ranks``: how many rank StatefulSets it may touch).
    ``url``: rank 0's engine (its stable pod name, never the API Service, which the watchdog
    takes out of routing); ``head``: the labels of rank 0's pod, the one destination its
    NetworkPolicy lets it probe, on ``api_port``; ``key_secret``: the Secret in ``agents`` with
    the deployment's engine key, which the probe sends (None: the engine checks no key).
    ``agents``: the namespace of its account, pod and policy (default: ``namespace``); its Role,
    binding and state ConfigMap stay in the serving ``namespace``."""
    obj = name(deployment)
    own = labels(deployment)
    home = agents or namespace
    s = settings
    args: list[str] = [
        "watch",
        "--url",
        url,
        "--name",
        deployment,
        "--deployment",
        deployment,
        "--namespace",
        namespace,
        "--ranks",
        str(ranks),
        "--alias",
        alias,
        "--stall-after",
        f"{s.stall_s:g}",
        "--interval",
        f"{s.interval_s:g}",
        "--max-restarts",
        str(s.max_restarts),
        "--restart-window",
        f"{s.restart_window_s:g}",
        "--restart-grace",
        f"{s.restart_grace_s:g}",
        "--evidence",
        EVIDENCE_MOUNT,
        "--metrics-host",
        PodVariable.of(contract.POD_IP_ENV),
        "--metrics-port",
        str(METRICS_PORT),
    ]
    if s.canary:
        args += ["--probe", "canary"]
    env = [pod_ip_env()]
    if key_secret is not None:
        # The key reaches the process as a variable read from the Secret, never as a word.
        args += ["--api-key-env", contract.ENGINE_KEY_ENV]
        env.append(secret_env(contract.ENGINE_KEY_ENV, key_secret, contract.ENGINE_KEY_KEY))
    container = hardened(
        {
            "name": COMPONENT,
            "image": s.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sparkrack"],
            # Every word reaches the process as written; the pod's address is Kubernetes' to
            # fill in (metrics on the pod's cluster address only).
            "args": [no_expansion(w) for w in args],
            "env": env,
            "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
            "resources": {
                "requests": {"cpu": "10m", "memory": "64Mi"},
                "limits": {"memory": "256Mi"},
            },
            "livenessProbe": {
                "httpGet": {"path": "/metrics", "port": "metrics"},
                "periodSeconds": 30,
                "timeoutSeconds": 5,
            },
            "readinessProbe": {
                "httpGet": {"path": "/metrics", "port": "metrics"},
                "periodSeconds": 10,
            },
            "volumeMounts": [{"name": "evidence", "mountPath": EVIDENCE_MOUNT}],
        }
    )
    pod = pod_spec(
        {
            # The one pod of the namespace that talks to the API: its own ServiceAccount's token.
            "automountServiceAccountToken": True,
            "serviceAccountName": obj,
            "nodeSelector": {contract.LABEL_ROLE: contract.ROLE_CONTROL_PLANE},
            "containers": [container],
            "volumes": [
                {
                    "name": "evidence",
                    # The local volume on the control-plane node's evidence directory; the
                    # bundle format keeps it bounded (rotation, per-log cap).
                    "persistentVolumeClaim": {"claimName": EVIDENCE_CLAIM},
                },
                tmp_volume(),
            ],
        },
        nonroot=True,
    )
    return [
        *account(meta(obj, namespace, own), rules(deployment, ranks), home),
        state(deployment, namespace),
        watchdog_policy(deployment, home, namespace, head or {}, api_port, api_address),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(
                obj,
                home,
                own,
                scanner.skips(
                    scanner.IMAGES,
                    scanner.TOKEN,
                    RESOURCES,
                    *([scanner.WATCHDOG_KEY] if key_secret is not None else []),
                ),
            ),
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": dict(own)},
                "template": {
                    "metadata": {
                        "labels": dict(own),
                        "annotations": {
                            contract.PROMETHEUS_SCRAPE_ANNOTATION: "true",
                            contract.PROMETHEUS_PATH_ANNOTATION: "/metrics",
                            contract.PROMETHEUS_PORT_ANNOTATION: str(METRICS_PORT),
                        },
                    },
                    "spec": pod,
                },
            },
        },
    ]


def watchdog_policy(
    deployment: str,
    namespace: str,
    serving: str,
    head: dict[str, str],
    api_port: int,
    api_address: str,
) -> dict[str, Any]:
    """The policy of the watchdog's pod in ``namespace``. In: the metrics port from the
    monitoring namespace. Out: rank 0's engine port in the ``serving`` namespace, the API server
    (its address only) and the cluster DNS; nothing else."""
    monitoring = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: contract.MONITORING_NAMESPACE}}
    }
    egress: list[dict[str, Any]] = [
        {"to": [in_namespace(serving, head)], "ports": tcp(api_port)},
        *api_server(api_address),
        dns(),
    ]
    own = labels(deployment)
    ingress = [{"from": [monitoring], "ports": tcp(METRICS_PORT)}]
    return policy(name(deployment), namespace, own, own, ingress, egress)


# --- the memory guard: one pod per Spark --------------------------------------------------------

MEMGUARD: Final = contract.COMPONENT_MEMGUARD
MEMGUARD_NAME: Final = f"{contract.OBJECT_PREFIX}-{MEMGUARD}"
"""The guard's DaemonSet, ServiceAccount, Role and RoleBinding."""
PROC: Final = "/proc"
"""The guard's own /proc: ``meminfo`` and ``pressure/memory`` are the node's in every pid
namespace, so no host /proc is mounted (whose ``<pid>/environ`` files hold other pods' keys)."""
MEMGUARD_PROBES: Final = dict.fromkeys(
    ("CKV_K8S_8", "CKV_K8S_9"),
    "the guard serves no port and no traffic; the kubelet restarts it when its loop exits",
)
NODE_NAME_ENV: Final = "NODE_NAME"
NODE_NAME_WORD: Final = PodVariable.of(NODE_NAME_ENV)


def memguard_rules() -> list[dict[str, Any]]:
    """List the serving pods, delete one, record why: nothing more. Which pod it may delete (an
    engine pod on its own node) no Role can say: :func:`memguard_policy` does, in admission."""
    return [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]


def memguard_account(namespace: str) -> str:
    """The user name the API server gives the guard's ServiceAccount."""
    return f"system:serviceaccount:{namespace}:{MEMGUARD_NAME}"


def selector_expression(selector: str, obj: str) -> str:
    """A CEL expression true of ``obj`` (``oldObject``, ``object``) when the label selector
    ``selector`` matches it. Only the forms of the contract's selectors are taken: ``key=value``
    and ``key`` (exists), comma-separated; another form raises ValueError rather than match
    more than the selector does."""
    labels = f"{obj}.metadata.labels"
    terms = [f"has({labels})"]
    for requirement in selector.split(","):
        key, equals, value = requirement.partition("=")
        if not key or any(c in requirement for c in "!()< ") or value.startswith("="):
            raise ValueError(
                f"label selector {selector!r}: {requirement!r} is not key or key=value"
            )
        terms.append(f"{key!r} in {labels}")
        if equals:
            terms.append(f"{labels}[{key!r}] == {value!r}")
    return " && ".join(terms)


def memguard_policy(namespace: str, home: str | None = None) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding: a pod deletion in ``namespace`` by the
    guard's account (of namespace ``home``, default ``namespace``) is refused unless the pod is an engine pod (:data:`sparkrack.contract.ENGINE_SELECTOR`, the
    selector the guard lists with) on the node the guard's token is bound to (the API server
    records that node in the token's ``extra``)."""
    policy_name = f"{MEMGUARD_NAME}-{namespace}"
    labels = {**contract.PART_OF, contract.LABEL_COMPONENT: MEMGUARD}
    extra = f"request.userInfo.extra[{contract.NODE_NAME_EXTRA!r}]"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy_name, "labels": dict(labels)},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["DELETE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "matchConditions": [
                    {
                        "name": "the-memory-guard",
                        "expression": "request.userInfo.username == "
                        f"{memguard_account(home or namespace)!r}",
                    }
                ],
                "validations": [
                    {
                        "expression": selector_expression(contract.ENGINE_SELECTOR, "oldObject"),
                        "message": "the memory guard deletes engine pods only",
                        "reason": "Forbidden",
                    },
                    {
                        "expression": f"{contract.NODE_NAME_EXTRA!r} in request.userInfo.extra "
                        f"&& has(oldObject.spec.nodeName) && oldObject.spec.nodeName == {extra}[0]",
                        "message": "the memory guard deletes pods of its own node only",
                        "reason": "Forbidden",
                    },
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy_name, "labels": dict(labels)},
            "spec": {
                "policyName": policy_name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}
                },
            },
        },
    ]


def memguard_manifests(
    namespace: str, settings: MemguardSettings, api_address: str = "", agents: str | None = None
) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding and the DaemonSet of the memory guard: one pod on every
    Spark under a user of its own, reading its own /proc, ranking the engine pods by their
    planned memory, deleting only engine pods of ``namespace`` on its own node
    (:func:`memguard_policy`). Its account, pods and policy live in ``agents`` (default:
    ``namespace``), its Role in ``namespace``.

    A DaemonSet and not a sidecar: the guard must outlive the pod it stops and watch a Spark
    with no engine on it yet. Requests equal to limits (Guaranteed QoS) put it last in the
    kernel OOM killer's order, after the engine pods."""
    obj = MEMGUARD_NAME
    labels = {**contract.PART_OF, contract.LABEL_COMPONENT: MEMGUARD}
    metadata = {"name": obj, "namespace": namespace, "labels": dict(labels)}
    home = agents or namespace
    s = settings
    args: list[str] = [
        "memguard",
        "--node",
        NODE_NAME_WORD,
        "--namespace",
        namespace,
        "--proc",
        PROC,
        "--floor",
        s.floor,
        "--psi-full",
        f"{s.psi_full:g}",
        "--interval",
        f"{s.interval_s:g}",
        "--grace",
        str(s.grace_s),
    ]
    resources = {"cpu": "20m", "memory": "96Mi"}
    container = hardened(
        {
            "name": MEMGUARD,
            "image": s.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sparkrack"],
            # The node's name is Kubernetes' to fill in; every other word reaches the process
            # as written.
            "args": [no_expansion(w) for w in args],
            "env": [
                {
                    "name": NODE_NAME_ENV,
                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                }
            ],
            "resources": {"requests": dict(resources), "limits": dict(resources)},
        }
    )
    pod = pod_spec(
        {
            # Lists and deletes pods through its own ServiceAccount's token.
            "automountServiceAccountToken": True,
            "serviceAccountName": obj,
            "nodeSelector": {contract.LABEL_ROLE: contract.ROLE_SPARK},
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
            "volumes": [tmp_volume()],
        },
        nonroot=True,
    )
    # A user of its own: no file or process of another serving container is its to read. The
    # container's own user wins over the pod's, so both say so.
    own_user = {"runAsUser": contract.MEMGUARD_UID, "runAsGroup": contract.MEMGUARD_UID}
    pod["securityContext"].update(own_user, fsGroup=contract.MEMGUARD_UID)
    container["securityContext"].update(own_user)
    return [
        *account(metadata, memguard_rules(), home),
        *memguard_policy(namespace, home),
        # Nothing in; out, the API server's address at its port alone (the in-cluster
        # configuration names the API by address: no DNS).
        policy(obj, home, labels, labels, [], api_server(api_address)),
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                **metadata,
                "namespace": home,
                "annotations": scanner.skips(scanner.IMAGES, scanner.TOKEN, MEMGUARD_PROBES),
            },
            "spec": {
                "selector": {"matchLabels": dict(labels)},
                "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
            },
        },
    ]
