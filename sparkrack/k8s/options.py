"""Operator-tunable settings of the cluster add-ons, with pinned defaults.

The inventory may override any of them through ``cluster_addons`` (group_vars); unknown keys and
wrong types are refused with the file, the key and the fix before anything is rendered.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from sparkrack.errors import Problem, SparkrackError

# Multus thick plugin: v4.2.2 is the Multus release kubespray pins; the "-thick" tag is the
# client/server (daemon) variant. Pinned by tag; override with a digest if your registry policy
# demands one.
MULTUS_IMAGE = "ghcr.io/k8snetworkplumbingwg/multus-cni:v4.2.2-thick"
# NVIDIA k8s-device-plugin v0.18.2: the version the seeds' 4x GB10 cluster runs (NVML discovery,
# CDI device list) — aarch64 image, GB10 (SM121) enumerated through NVML.
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.18.2"
# The fabric check runs on the same image family as serving (src:super-guide: the mainline upstream
# SGLang image for GB10 carries torch + NCCL for aarch64/SM121).
FABRIC_CHECK_IMAGE = "scitrera/dgx-spark-sglang:0.5.12"

_IMAGE_RE = re.compile(r"^[a-z0-9.\-/:_]+(:[\w.\-]+|@sha256:[0-9a-f]{64})$")


@dataclass(frozen=True)
class ClusterOptions:
    namespace: str = "sparkrack"
    multus_image: str = MULTUS_IMAGE
    device_plugin_image: str = DEVICE_PLUGIN_IMAGE
    # "cdi-cri" (CDI spec from the nvidia_driver role), or "envvar" (nvidia runtime hook).
    device_list_strategy: str = "cdi-cri"
    # RuntimeClass for GPU pods; "" = the node's default runtime (set by the driver role).
    gpu_runtime_class: str = ""
    gpus_per_spark: int = 1
    fabric_check_image: str = FABRIC_CHECK_IMAGE
    fabric_check_port: int = 29500
    # Bytes of the largest all-reduce message of the fabric check.
    fabric_check_max_bytes: int = 1 << 30


_DOC: dict[str, str] = {
    "namespace": "namespace of the NADs and the fabric-check pods (serving_namespace)",
    "multus_image": "Multus thick-plugin image, pinned by tag or digest",
    "device_plugin_image": "NVIDIA k8s-device-plugin image, pinned",
    "device_list_strategy": "cdi-cri | envvar | volume-mounts",
    "gpu_runtime_class": "RuntimeClass for GPU pods, '' for the node default",
    "gpus_per_spark": "GPUs each Spark advertises (1 on GB10)",
    "fabric_check_image": "image of the NCCL fabric-check pods (serving image family)",
    "fabric_check_port": "TCP port of the torch.distributed rendezvous on rank 0",
    "fabric_check_max_bytes": "largest all-reduce message in bytes",
}
RULE = "cluster-addons"
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(?!\n)$")


def options_from(raw: Mapping[str, Any] | None, source: str = "cluster_addons") -> ClusterOptions:
    """Build options from inventory data, refusing unknown keys and malformed values."""
    base = ClusterOptions()
    if not raw:
        return base
    if not isinstance(raw, Mapping):
        raise SparkrackError(
            Problem(source, "cluster_addons", "must be a mapping", "see defaults", RULE)
        )
    known = {f.name: f for f in fields(ClusterOptions)}
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            problems.append(
                Problem(
                    source,
                    f"cluster_addons.{key}",
                    "unknown key",
                    f"remove it; known keys: {', '.join(known)}",
                )
            )
            continue
        default = getattr(base, key)
        if isinstance(default, int) and (isinstance(value, bool) or not isinstance(value, int)):
            problems.append(
                Problem(
                    source, f"cluster_addons.{key}", f"must be an integer, got {value!r}", _DOC[key]
                )
            )
            continue
        if isinstance(default, str) and not isinstance(value, str):
            problems.append(
                Problem(
                    source, f"cluster_addons.{key}", f"must be a string, got {value!r}", _DOC[key]
                )
            )
            continue
        values[key] = value
    opts = replace(base, **values)
    for key in ("multus_image", "device_plugin_image", "fabric_check_image"):
        image = getattr(opts, key)
        if not _IMAGE_RE.match(image) or image.endswith(":latest"):
            problems.append(
                Problem(
                    source,
                    f"cluster_addons.{key}",
                    f"{image!r} is not a pinned image reference",
                    "use repo:tag (not latest) or repo@sha256:<digest>",
                )
            )
    if not _NAME_RE.match(opts.namespace):
        problems.append(
            Problem(
                source,
                "cluster_addons.namespace",
                f"{opts.namespace!r} is not a DNS label",
                "e.g. sparkrack",
            )
        )
    if opts.device_list_strategy not in ("cdi-cri", "envvar", "volume-mounts"):
        problems.append(
            Problem(
                source,
                "cluster_addons.device_list_strategy",
                f"{opts.device_list_strategy!r} is not supported",
                "use cdi-cri (CDI spec from the driver role) or envvar",
            )
        )
    if opts.gpus_per_spark < 1:
        problems.append(
            Problem(
                source, "cluster_addons.gpus_per_spark", "must be at least 1", "GB10 has one GPU"
            )
        )
    if not 1024 <= opts.fabric_check_port <= 65535:
        problems.append(
            Problem(source, "cluster_addons.fabric_check_port", "must be 1024..65535", "e.g. 29500")
        )
    if not 1 << 20 <= opts.fabric_check_max_bytes <= 1 << 34:
        problems.append(
            Problem(
                source,
                "cluster_addons.fabric_check_max_bytes",
                "must be between 1 MiB and 16 GiB",
                "1073741824 (1 GiB) saturates a 200 GbE link",
            )
        )
    if opts.gpu_runtime_class and not _NAME_RE.match(opts.gpu_runtime_class):
        problems.append(
            Problem(
                source,
                "cluster_addons.gpu_runtime_class",
                "is not a DNS label",
                "e.g. nvidia, or ''",
            )
        )
    if problems:
        raise SparkrackError([replace(p, rule=RULE) for p in problems])
    return opts
