"""Every name that crosses a boundary between sparkrack's Python, its Ansible roles and the
cluster: labels, object names, mount paths, file names, serving defaults. One place each.

Roles read these through the ``sparkrack_contract`` filter; the renderers import them.
"""

from __future__ import annotations

import re
from typing import Any, Final

# --- labels ----------------------------------------------------------------------------------
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
PART_OF_VALUE: Final = "sparkrack"
PART_OF: Final = {LABEL_PART_OF: PART_OF_VALUE}
"""Every object sparkrack renders carries this label (removal by label)."""
LABEL_COMPONENT: Final = "sparkrack.io/component"
COMPONENT_SERVING: Final = "serving"
COMPONENT_GATEWAY: Final = "gateway"
COMPONENT_FABRIC_CHECK: Final = "fabric-check"
COMPONENT_WATCHDOG: Final = "watchdog"
COMPONENT_MEMGUARD: Final = "memguard"
LABEL_ROLE: Final = "sparkrack.io/role"
ROLE_CONTROL_PLANE: Final = "control-plane"
ROLE_SPARK: Final = "spark"
LABEL_PROFILE: Final = "sparkrack.io/profile"
LABEL_DEPLOYMENT: Final = "sparkrack.io/deployment"
LABEL_RANK: Final = "sparkrack.io/rank"
ENGINE_SELECTOR: Final = f"{LABEL_COMPONENT}={COMPONENT_SERVING},{LABEL_RANK}"
"""Label selector of the engine (rank) pods of every deployment."""
LABEL_FABRIC_SWEEP: Final = "sparkrack.io/fabric-sweep"
"""On a fabric-check pod: the gate's sweep it belongs to (all-rails, rail0, rail1, ...)."""
LABEL_SPARK_INDEX: Final = "sparkrack.io/spark-index"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
MULTUS_NETWORKS_ANNOTATION: Final = "k8s.v1.cni.cncf.io/networks"
POD_FABRIC_IFNAME: Final = "net1"
"""The first rail's VF inside a pod (``pod_ifname(0)``); NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME
point here."""
PROMETHEUS_SCRAPE_ANNOTATION: Final = "prometheus.io/scrape"
PROMETHEUS_PATH_ANNOTATION: Final = "prometheus.io/path"
PROMETHEUS_PORT_ANNOTATION: Final = "prometheus.io/port"
"""Annotations of a pod whose engine serves Prometheus metrics (the scrape job keeps those pods)."""
FIELD_MANAGER: Final = "sparkrack"
"""Field manager of what sparkrack applies server-side (Secrets: no last-applied annotation)."""
API_WAIT_SLEEP_S: Final = 1
"""Seconds between two reads of an object a play waits on (kubernetes.core's ``wait_sleep``, 5 s
by default): one GET a second, so a wait ends about a second after its object is done."""
API_POLL_SLEEP_S: Final = 2
"""Seconds between two reads of a play's ``until`` loop over ``k8s_info``, where each read is a
module run of its own (about a second of the control machine's CPU): a Job, a pod's termination
message, a fabric-check sweep, whose end no collection predicate expresses."""
SPEC_HASH_ANNOTATION: Final = "sparkrack.io/spec-hash"
"""Hash of a Job's rendered form: an unchanged Job is left alone, a changed one replaced."""
WATCHDOG_STATE_ANNOTATION: Final = "sparkrack.io/watchdog-state"
"""In the watchdog's own state ConfigMap (named like the watchdog): its state (healthy, stalled,
restarting, recovered, failed)."""
WATCHDOG_VERDICT_ANNOTATION: Final = "sparkrack.io/watchdog-verdict"
"""In the watchdog's state ConfigMap: its last verdict line and its time."""
WATCHDOG_RESTARTS_ANNOTATION: Final = "sparkrack.io/watchdog-restarts"
"""In the watchdog's state ConfigMap: Unix times of its group restarts (its budget)."""
PLANNED_MEMORY_ANNOTATION: Final = "sparkrack.io/planned-memory-bytes"
"""On every rank pod: the unified memory its rank plans on its Spark, in bytes (the planner's
footprint); the memory guard ranks engine pods by it (an engine's CUDA pool is not what its
memory cgroup is charged, nor what its containers request)."""
LABEL_QUARANTINE: Final = "sparkrack.io/quarantined"
"""Added to a deployment's API Service selector while it is sick: no pod carries it, so the
Service has no endpoints and the gateway's router cools the route down and fails over."""

# --- the serving namespace ------------------------------------------------------------------
POD_SECURITY_LEVEL: Final = "privileged"
"""Pod Security level of the serving namespace: the strictest its pods allow (the real admission
plugin refuses some of them at ``baseline``; tests/serving/objects/test_pod_security.py). What
needs more than ``baseline``: the SGLang ranks and the fabric-check pods run privileged (RDMA
verbs on the VF Multus moves in), or with ``serving_rdma_access: device-plugin`` add
``IPC_LOCK``, which ``baseline`` does not allow either; every rank and fetch pod mounts the
node's HF cache (``hostPath``); the fetch and receiver Jobs use the host network (the fabric PF
addresses). Only the pre-pull pods would pass ``restricted`` (the agents run in a namespace of
their own, :func:`agents_namespace`). Set on the namespace
explicitly, so a cluster whose default is stricter (K3s' hardening guide: restricted) admits
exactly this namespace's pods."""
NAMESPACE_LABELS: Final = {
    **PART_OF,
    **{
        f"pod-security.kubernetes.io/{mode}": POD_SECURITY_LEVEL
        for mode in ("enforce", "audit", "warn")
    },
}
"""Labels of the serving namespace, rendered by the add-ons and by the serve play alike."""

# --- the agents' namespace ----------------------------------------------------------------------
AGENTS_SUFFIX: Final = "-agents"
"""The agents' namespace is the serving namespace's name with this suffix."""
AGENTS_POD_SECURITY_LEVEL: Final = "restricted"
"""Pod Security level of the agents' namespace, where the gateway, the watchdogs and the memory
guard run: none of them needs a host path, a host port, a capability or root, so the strictest
level admits them, and the API server refuses any pod there that would need more (a patched
template included)."""
AGENTS_NAMESPACE_LABELS: Final = {
    **PART_OF,
    **{
        f"pod-security.kubernetes.io/{mode}": AGENTS_POD_SECURITY_LEVEL
        for mode in ("enforce", "audit", "warn")
    },
}


def agents_namespace(serving_namespace: str) -> str:
    """The namespace of the agents that hold API tokens or keys for the serving namespace."""
    return f"{serving_namespace}{AGENTS_SUFFIX}"


MONITORING_NAMESPACE: Final = "monitoring"
"""Namespace of the monitoring stack (Prometheus scrapes the serving pods from there)."""
RDMA_ACCESS: Final = ("privileged", "device-plugin")
"""How an NCCL rank reaches the RDMA devices of the VF Multus moves in (``serving_rdma_access``):
``privileged`` sees every host device (``/dev/infiniband`` included; the only way with the
host-device CNI alone, src:roce-post); ``device-plugin`` asks an RDMA device plugin or CDI for
``serving_rdma_resource`` and adds ``IPC_LOCK`` alone (verbs pin memory), nothing else."""
RDMA_CAPABILITY: Final = "IPC_LOCK"
"""The one capability an unprivileged NCCL rank needs: RDMA registers (pins) its buffers."""

# --- serving objects and paths inside serving pods ----------------------------------------------
API_SERVICE: Final = "sparkrack-openai"
"""The OpenAI-API Service clients call: the gateway in front of every deployment."""
OBJECT_PREFIX: Final = "sparkrack"
HF_TOKEN_KEY: Final = "token"
"""Key of the HF token in its Secret (the Secret's name is ``serving_hf_token_secret``)."""
HF_CACHE_MOUNT: Final = "/var/cache/huggingface"
"""The node's HF cache inside every serving pod (``HF_HOME``). Outside ``/root``, which the
images keep at mode 0700: the fetch and wait containers run as :data:`SERVING_UID` and must reach
it."""
SERVING_UID: Final = 65532
"""The user (and group) every serving container that is not an engine runs as: the fetch,
receiver, pre-pull, wait and gateway containers. The serve play gives this user the HF cache
directory on each Spark of a deployment, the only host path those containers write."""
MEMGUARD_UID: Final = 65531
"""The memory guard's own user (and group): not :data:`SERVING_UID`, so it shares no user with
the fetch and receiver containers whose processes hold the HF token and the rsync password."""
NODE_NAME_EXTRA: Final = "authentication.kubernetes.io/node-name"
"""What a pod-bound ServiceAccount token tells the API server about the node its pod runs on
(``request.userInfo.extra``): the memory guard's admission policy reads it."""
LAUNCHER_MOUNT: Final = "/opt/sparkrack"
"""Where the launcher ConfigMap (patch engine, group guard, smoke client) is mounted."""
ENGINE_CONFIG_MOUNT: Final = "/etc/sparkrack/engine"
"""Where an engine's rendered config files are mounted."""
GUARD_FILE: Final = "group_guard.py"
GATE_FILE: Final = "engine_gate.py"
"""The gate in front of a gated engine's HTTP server (``Engine.gated``), in the launcher ConfigMap."""
GATE_CONTAINER: Final = "engine-gate"
"""Name of the gate's container in a gated engine's head pod."""
DEFAULT_CONTAINER_ANNOTATION: Final = "kubectl.kubernetes.io/default-container"
"""The container ``kubectl logs``/``exec`` of a pod pick without ``-c``."""
SMOKE_FILE: Final = "smoke_chat.py"

# --- a model switch: fetch step, JIT caches, pre-pull (sparkrack/serving/switch/) -------------
COMPONENT_FETCH: Final = "fetch"
"""Component label of the fetch and receiver Jobs of a deployment."""
COMPONENT_PREPULL: Final = "prepull"
"""Component label of the image pre-pull Jobs."""
SWITCH_MOUNT: Final = "/opt/sparkrack/switch"
"""Where the fetch-step ConfigMap is mounted (fetch Jobs, receiver Jobs, serving init containers)."""
FETCH_FILE: Final = "fetch_step.py"
HF_HUB_CACHE_MOUNT: Final = f"{HF_CACHE_MOUNT}/hub"
"""huggingface_hub's cache inside every pod (``$HF_HOME/hub``): the fetch step's ``--cache``."""
FETCH_PORT_SPAN: Final = 1000
"""Each deployment's receivers listen on one port of [serving_fetch_port, + FETCH_PORT_SPAN)."""
FETCH_SECRET_MOUNT: Final = "/etc/sparkrack/fetch-secret"
"""Where the rsync Secret is mounted in the fetch and receiver Jobs."""
FETCH_MANIFEST_MOUNT: Final = "/etc/sparkrack/fetch-manifest"
"""Where a receiver mounts its deployment's manifest ConfigMap (optional: the serve play writes it
once the head's download reported the manifest's sha256)."""
FETCH_MANIFEST_KEY: Final = "manifest-sha256"
"""Key of the manifest ConfigMap: the sha256 of the manifest the head's download computed."""
FETCH_MANIFEST_FILE: Final = f"{FETCH_MANIFEST_MOUNT}/{FETCH_MANIFEST_KEY}"
PHASE_FILE: Final = "/dev/termination-log"
"""Where the fetch step's containers write their phase records (``--phases``): the file
Kubernetes reads as the container's termination message, so the serve play finds the records
in the pod's status (format: ``fetch_base.phase``/``read_phases``)."""
FETCH_PASSWORD_KEY: Final = "password"
"""Key of the rsync client's password file (the password alone) in the rsync Secret."""
FETCH_SECRETS_KEY: Final = "rsyncd.secrets"
"""Key of the rsync daemon's secrets file (``user:password`` lines) in the rsync Secret."""
JIT_CACHE_MOUNT: Final = "/var/cache/sparkrack/jit"
"""Where a serving pod mounts its Spark's JIT-cache directory of its image."""
FLIGHT_RECORDER_DIR: Final = "/var/lib/sparkrack/flight-recorder"
"""Where NCCL ranks' PyTorch flight recorders write their dumps on a collective timeout, one
directory per deployment (:func:`flight_recorder_dir`): the same path on the Spark (hostPath)
and in the pod, one file per rank (``fr_dump_rank_<N>``); ``sparkrack diagnose`` reads them
beside the rank logs."""


FLIGHT_RECORDER_DUMP_PREFIX: Final = "fr_dump_rank_"
"""PyTorch appends the rank to the dump prefix it is given: rank N writes
``<flight_recorder_dir>/fr_dump_rank_N`` (the rank env sets it, diagnose and the evidence play
read it)."""


def flight_recorder_dir(deployment: str) -> str:
    """The flight-recorder directory of one deployment (two deployments never share a file)."""
    return f"{FLIGHT_RECORDER_DIR}/{deployment}"


GATEWAY_KEY_KEY: Final = "key"
"""Key of the gateway's master key in its Secret (``serving_gateway_key_secret``)."""
ENGINE_KEY_KEY: Final = "engine"
"""Key of a deployment's engine key (what the gateway and clients send) in its key Secret."""
ADMIN_KEY_KEY: Final = "admin"
"""Key of a deployment's admin key (the engine's admin routes) in its key Secret."""
ENGINE_KEY_ENV: Final = "SPARKRACK_ENGINE_KEY"
"""Variable of a serving container holding its deployment's engine key (from the key Secret);
the smoke client and the group guard read it there."""
ADMIN_KEY_ENV: Final = "SPARKRACK_ADMIN_KEY"
"""Variable of a serving container holding its deployment's admin key (from the key Secret)."""
POD_IP_ENV: Final = "POD_IP"
"""Variable of a serving container holding the pod's cluster address (downward API): the only
address its engine serves HTTP on."""

# --- K3s: the cluster's networks and ports (rendered by sparkrack/k3s/config.py) --------------
K3S_API_PORT: Final = 6443
CLUSTER_CIDR: Final = "10.42.0.0/16"
"""Pod network (K3s' default, written into the server config so the fabric check reads it)."""
SERVICE_CIDR: Final = "10.43.0.0/16"
"""Service network (K3s' default, written into the server config like :data:`CLUSTER_CIDR`)."""
NODE_PORT_RANGE: Final = (30000, 32767)
"""K3s' (and Kubernetes') default NodePort range, open on every node's host network."""
HOST_PORTS: Final[dict[int, str]] = {
    K3S_API_PORT: "the K3s API server",
    2379: "etcd (K3s server)",
    2380: "etcd peers (K3s server)",
    8472: "flannel's VXLAN",
    10249: "kube-proxy's metrics",
    10250: "the kubelet",
    10256: "kube-proxy's health check",
}
"""Ports K3s listens on in a node's host network (K3s docs, "Inbound Rules for K3s Nodes")."""

# --- K3s: files sparkrack writes on the nodes and the control machine --------------------------
KUBELET_SYSCTLS: Final[dict[str, int]] = {
    # What the kubelet would set itself; with protect-kernel-defaults it only checks them.
    "vm.overcommit_memory": 1,
    "vm.panic_on_oom": 0,
    "kernel.panic": 10,
    "kernel.panic_on_oops": 1,
    "kernel.keys.root_maxkeys": 1000000,
    "kernel.keys.root_maxbytes": 25000000,
}
"""The kernel settings the kubelet's ``protect-kernel-defaults`` requires. None of the Spark's
own settings (spark_base_sysctl: ARP, rp_filter, socket buffers) touches them, so every Spark can
run with the flag; ``kernel.panic``/``kernel.panic_on_oops`` change what a kernel oops does (the
Spark reboots 10 s later instead of running on half-broken)."""
KUBECONFIG_FILE: Final = ".kube/sparkrack.yaml"
"""The kubeconfig sparkrack writes on the control machine, relative to the user's home."""
K3S_TOKEN_FILE: Final = "/etc/rancher/k3s/sparkrack-join-token"
K3S_AGENT_SECRET_FILE: Final = "/etc/rancher/k3s/sparkrack-agent-secret"
"""Root-only file on the server holding the agents' join secret (config.yaml's
``agent-token-file``): agents never hold the server token, which is cluster admin."""
K3S_AGENT_TOKEN_FILE: Final = "/var/lib/rancher/k3s/server/agent-token"
"""Where the K3s server writes the agent token in its secure form (the CA hash, then the secret):
what the agents' ``token-file`` receives."""
K3S_PSA_CONFIG_FILE: Final = "/etc/rancher/k3s/sparkrack-psa.yaml"
"""The Pod Security admission configuration the server's kube-apiserver reads."""
"""Root-only file holding the agents' join token (config.yaml names it as ``token-file``)."""
K3S_CNI_CONF_DIR: Final = "/var/lib/rancher/k3s/agent/etc/cni/net.d"
K3S_CNI_BIN_DIR: Final = "/var/lib/rancher/k3s/data/cni"
"""The CNI layout K3s uses instead of /etc/cni/net.d and /opt/cni/bin."""

LABEL_VALUE_MAX: Final = 63
STATEFULSET_NAME_MAX: Final = 52
"""A StatefulSet's pods carry ``controller-revision-hash: <name>-<10-character hash>``, a label
value of at most 63 characters: a longer StatefulSet name is created, but none of its pods."""
DEPLOYMENT_NAME_MAX: Final = STATEFULSET_NAME_MAX - len(f"{OBJECT_PREFIX}--r0")
"""The longest deployment name whose rank-0 StatefulSet (``sparkrack-<name>-r0``) fits: 39."""
SLUG_MAX: Final = DEPLOYMENT_NAME_MAX


def label_value(text: str) -> str:
    """A valid label value for ``text``: at most 63 characters, alphanumeric at both ends.

    Labels and the selectors that match them both go through this function, so a long profile
    name is cut the same way on both sides.
    """
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:LABEL_VALUE_MAX]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def slug(name: str) -> str:
    """Profile name -> DNS-1123 label fragment (``qwen3.5-397b`` -> ``qwen3-5-397b``)."""
    text = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return text[:SLUG_MAX].rstrip("-") or "profile"


SERVING_PRUNE_KINDS: Final = (
    "StatefulSet",
    "Service",
    "ConfigMap",
    "NetworkPolicy",
    "Secret",
    "Pod",
)
"""Kinds a switch removes for a deployment that left the list or changed profile, in order; pods
last, so waiting for them is waiting for their GPUs. A deployment's Secrets (keys, rsync password)
carry its name but no profile: they go only with the deployment."""


def pod_ifname(rail: int) -> str:
    """Name of rail ``rail``'s VF inside a pod: ``net1`` for the first rail, then ``net2``..."""
    return f"net{rail + 1}"


def contract_fact(home: str | None = None) -> dict[str, Any]:
    """The names Ansible needs, as one fact (``sparkrack_contract``, set once by preflight).

    ``home`` is the control machine's home folder; with it the fact carries the full kubeconfig
    path, without it only ``kubeconfig_file`` (relative to the home).
    """
    return {
        "part_of": dict(PART_OF),
        "part_of_selector": f"{LABEL_PART_OF}={PART_OF_VALUE}",
        "label_component": LABEL_COMPONENT,
        "label_role": LABEL_ROLE,
        "role_spark": ROLE_SPARK,
        "component_serving": COMPONENT_SERVING,
        "component_gateway": COMPONENT_GATEWAY,
        "component_fabric_check": COMPONENT_FABRIC_CHECK,
        "fabric_check_selector": f"{LABEL_COMPONENT}={COMPONENT_FABRIC_CHECK}",
        "engine_selector": ENGINE_SELECTOR,
        "spark_selector": f"{LABEL_ROLE}={ROLE_SPARK}",
        "label_profile": LABEL_PROFILE,
        "label_deployment": LABEL_DEPLOYMENT,
        "serving_listed_kinds": [k for k in SERVING_PRUNE_KINDS if k != "Secret"],
        "api_service": API_SERVICE,
        "agents_suffix": AGENTS_SUFFIX,
        "launcher_mount": LAUNCHER_MOUNT,
        "smoke_file": SMOKE_FILE,
        "smoke_path": f"{LAUNCHER_MOUNT}/{SMOKE_FILE}",
        "hf_token_key": HF_TOKEN_KEY,
        "serving_uid": SERVING_UID,
        "component_fetch": COMPONENT_FETCH,
        "component_prepull": COMPONENT_PREPULL,
        "fetch_password_key": FETCH_PASSWORD_KEY,
        "fetch_secrets_key": FETCH_SECRETS_KEY,
        "gateway_key_key": GATEWAY_KEY_KEY,
        "engine_key_key": ENGINE_KEY_KEY,
        "admin_key_key": ADMIN_KEY_KEY,
        "engine_key_env": ENGINE_KEY_ENV,
        "pod_ip_env": POD_IP_ENV,
        "field_manager": FIELD_MANAGER,
        "api_wait_sleep_s": API_WAIT_SLEEP_S,
        "api_poll_sleep_s": API_POLL_SLEEP_S,
        "kubeconfig_file": KUBECONFIG_FILE,
        **({"kubeconfig": f"{home.rstrip('/')}/{KUBECONFIG_FILE}"} if home else {}),
        "k3s_token_file": K3S_TOKEN_FILE,
        "k3s_agent_secret_file": K3S_AGENT_SECRET_FILE,
        "k3s_agent_token_file": K3S_AGENT_TOKEN_FILE,
        "k3s_psa_config_file": K3S_PSA_CONFIG_FILE,
        "kubelet_sysctls": dict(KUBELET_SYSCTLS),
        "k3s_cni_conf_dir": K3S_CNI_CONF_DIR,
        "k3s_cni_bin_dir": K3S_CNI_BIN_DIR,
        "flight_recorder_dir": FLIGHT_RECORDER_DIR,
        "flight_recorder_dump_prefix": FLIGHT_RECORDER_DUMP_PREFIX,
        "deployment_name_max": DEPLOYMENT_NAME_MAX,
    }
