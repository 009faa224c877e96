"""The policy scanner's findings sparkrack accepts, each with its reason, written on the object.

``make lint`` scans every rendered manifest with checkov (lab/scan.py). A check an object does
not meet is either fixed or named here and skipped on that object alone through checkov's
annotation (``checkov.io/skip<N>: <check>=<reason>``); a renderer asks for the set that fits
what it renders (:func:`skips`), so a new object carries none until someone says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

ANNOTATION_PREFIX: Final = "checkov.io/skip"

IMAGES: Final = {
    "CKV_K8S_15": "IfNotPresent: the pre-pull Jobs fetch images ahead of a switch and a node may "
    "serve without the registry; the tag or digest fixes what runs",
    "CKV_K8S_43": "the image is the inventory's or the profile's choice, pinned there (digests "
    "where the owner gives them); sparkrack cannot resolve a digest offline",
}
NETWORK_POLICY: Final = {
    "CKV2_K8S_6": "a cluster add-on rendered without a NetworkPolicy: node agents in kube-system, "
    "or fabric-check pods, whose namespace's default deny comes with the serve play's objects",
}
BOUNDED_JOB: Final = {
    "CKV_K8S_10": "a short Job bounded by activeDeadlineSeconds; a CPU request would only delay it",
    "CKV_K8S_11": "a short Job bounded by activeDeadlineSeconds; a CPU limit would throttle the "
    "download or copy of hundreds of GB",
    "CKV_K8S_12": "a short Job bounded by activeDeadlineSeconds; the planner counts engine memory "
    "only",
    "CKV_K8S_13": "a short Job bounded by activeDeadlineSeconds; rsync and the Hub client stream "
    "files and hold little memory",
}
GATEWAY_RESOURCES: Final = {
    "CKV_K8S_10": "runs on the control plane, outside the Sparks' memory plan; no fixed CPU share",
    "CKV_K8S_11": "a CPU limit would throttle streamed responses under load",
    "CKV_K8S_12": "runs on the control plane, outside the Sparks' memory plan",
    "CKV_K8S_13": "LiteLLM's memory grows with concurrent streams; no figure is measured yet",
}
FABRIC_PUSH: Final = {
    "CKV_K8S_19": "copies the weights over the fabric PF addresses, which only the host network "
    "has",
}
SECRET_ENV: Final = {
    "CKV_K8S_35": "the client reads its secret from this variable only (huggingface_hub's "
    "HF_TOKEN, LiteLLM's master key); the value comes from a Secret reference",
}
ENGINE_KEY: Final = {
    "CKV_K8S_35": "the engine reads its API key from this variable only (SGLang's and vLLM's "
    "server options); the value comes from the deployment's key Secret by reference",
}
WATCHDOG_KEY: Final = {
    "CKV_K8S_35": "sparkrack watch reads the engine key it probes with from a variable only "
    "(--api-key-env); the value comes from the deployment's key Secret by reference",
}
TOKEN: Final = {
    "CKV_K8S_38": "the pod calls the Kubernetes API with its own ServiceAccount, whose Role grants "
    "only what its actions need (sparkrack/serving/objects/agents.py)",
}
ENGINE: Final = {
    "CKV_K8S_10": "the engine takes the whole Spark; the planner budgets its unified memory",
    "CKV_K8S_11": "the engine takes the whole Spark; a CPU limit would throttle the scheduler "
    "thread that feeds the GPU",
    "CKV_K8S_12": "the planner budgets the engine's unified memory, which a cgroup request "
    "cannot express (GPU allocations share it)",
    "CKV_K8S_13": "a cgroup memory limit would count the GPU's unified-memory allocations and "
    "kill the engine; the planner and the memory wait bound it instead",
    "CKV_K8S_20": "the engine image runs as its own user (root in the upstream images) and the "
    "SM121 patches are applied in place at start",
    "CKV_K8S_22": "the engine writes Python caches, Triton/Inductor kernels and patched sources "
    "inside the image at start",
    "CKV_K8S_23": "the upstream engine images run as root",
    "CKV_K8S_28": "the upstream engine images run as root with the runtime's default capabilities",
    "CKV_K8S_29": "the engine runs as its image's user; its weight wait is hardened and its "
    "memory settle step runs privileged",
    "CKV_K8S_30": "the engine runs as its image's user; its weight wait is hardened and its "
    "memory settle step runs privileged",
    "CKV_K8S_31": "the engine needs the runtime's default profile, not a stricter one; the "
    "runtime applies RuntimeDefault unless the pod is privileged",
    "CKV_K8S_37": "the upstream engine images run as root with the runtime's default capabilities",
    "CKV_K8S_40": "the upstream engine images run as root",
}
ENGINE_WORKER: Final = {
    "CKV_K8S_9": "a worker rank serves no HTTP; its startup and liveness probes are the group "
    "guard, which follows the head",
}
RECEIVER_ROOT: Final = dict.fromkeys(
    ("CKV_K8S_23", "CKV_K8S_25", "CKV_K8S_37", "CKV_K8S_40"),
    "the rsync receiver starts as root with CHOWN, DAC_OVERRIDE, SETGID, SETUID and SYS_CHROOT "
    "only, to chroot into the one model's folder and give it to the transfer user (the HF cache "
    "is a root-owned hostPath); every transfer runs chrooted as that user",
)
RDMA_PRIVILEGED: Final = {
    "CKV_K8S_16": "RDMA verbs on the VF Multus moves in need /dev/infiniband, which only a "
    "privileged container sees with the host-device CNI (serving_rdma_access: privileged, the "
    "inventory's choice; device-plugin avoids it)",
}

MEMORY_SETTLE: Final = {
    "CKV_K8S_16": "the memory settle step (wait-memory and the settle sidecar) writes "
    "/proc/sys/vm/drop_caches and compact_memory, which takes CAP_SYS_ADMIN and a writable "
    "/proc/sys; the runtime mounts /proc/sys read-only in every container that is not privileged",
}


def skips(*sets: dict[str, str]) -> dict[str, str]:
    """checkov's skip annotations for the union of ``sets`` (a later set's reason wins)."""
    merged: dict[str, str] = {}
    for s in sets:
        merged.update(s)
    return skip_annotations(merged.items())


def skip_annotations(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {
        f"{ANNOTATION_PREFIX}{n}": f"{check}={reason}"
        for n, (check, reason) in enumerate(sorted(pairs), start=1)
    }


def _same(reason: str, *checks: str) -> dict[str, str]:
    return dict.fromkeys(checks, reason)


ROOT_CONTAINER_CHECKS: Final = (
    "CKV_K8S_20",
    "CKV_K8S_22",
    "CKV_K8S_23",
    "CKV_K8S_28",
    "CKV_K8S_29",
    "CKV_K8S_31",
    "CKV_K8S_37",
    "CKV_K8S_40",
)
DEVICE_PLUGIN: Final = {
    **_same(
        "NVIDIA's device plugin reads the host's driver root and serves the kubelet's "
        "device-plugin socket: privileged and root, as its upstream manifest runs it",
        "CKV_K8S_16",
        *ROOT_CONTAINER_CHECKS,
    ),
    **_same(
        "a node agent the kubelet watches through its socket; no HTTP endpoint to probe",
        "CKV_K8S_8",
        "CKV_K8S_9",
    ),
}
MULTUS: Final = {
    **_same(
        "the Multus thick daemon writes CNI configuration and moves VFs between network "
        "namespaces on the host: privileged, root, host network and PID namespace, as its "
        "upstream manifest runs it",
        "CKV_K8S_16",
        "CKV_K8S_17",
        "CKV_K8S_19",
        *ROOT_CONTAINER_CHECKS,
    ),
    **_same("a node agent without a health endpoint", "CKV_K8S_8", "CKV_K8S_9"),
    **_same(
        "a node agent on every node; a limit would fail pod networking under load",
        "CKV_K8S_11",
        "CKV_K8S_13",
    ),
    "CKV_K8S_38": "Multus reads pods and NetworkAttachmentDefinitions from the API",
    "CKV_K8S_49": "Multus' ClusterRole as upstream ships it: every resource and verb of its own "
    "API group k8s.cni.cncf.io alone",
}
FABRIC_CHECK: Final = {
    **_same(
        "RDMA verbs on the VF need /dev/infiniband, which only a privileged container sees "
        "with the host-device CNI; unprivileged, NCCL falls back to sockets, which the gate "
        "must catch, not cause",
        "CKV_K8S_16",
        *ROOT_CONTAINER_CHECKS,
    ),
    **_same("a one-shot all-reduce Pod that exits; nothing to probe", "CKV_K8S_8", "CKV_K8S_9"),
    **_same("a one-shot Pod that takes the GPU for seconds", "CKV_K8S_11", "CKV_K8S_13"),
}
