"""Hostile and broken inventories, as data: a base inventory + one change + the rule it hits.

Every entry starts from the current ``inventories/example`` (read when the entry is built), so
the corpus follows the shipped inventory instead of freezing a copy, with the values every owner
must set first (:data:`OWNED`: images the nodes can pull, a gateway key). Bases:

* ``example``: the example inventory as shipped (one model on every Spark);
* ``mixed``: the example with the README's 2+1+1 ``serving_deployments`` instead of
  ``serving_profile``.

A change is a function of the inventory's folder (set a variable, write a file, append raw
text); ``file`` is the file the refusal must name (relative to the folder, ``""`` = the folder
itself) and ``key`` a part of the key it must name. ``password`` is the vault password the
check is given (``None``: none at all). ``DIAGNOSE`` and ``BENCH`` hold hostile logs and
servers for the commands that echo untrusted text: their entries name the text the output
must carry instead of a rule.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hostile_corpus import bomb
from hostile_servers import SSE_HEAD, Script, chunk, good_chunks, http, stream

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "inventories" / "example"
ALL = "group_vars/all.yml"
PASSWORD = "the right vault password"
DIGEST = "sha256:" + "0123456789abcdef" * 4

Change = Callable[[Path], None]

MIXED = [  # the README's 2+1+1
    {
        "name": "gemma",
        "profile": "gemma-4-31b-it",
        "sparks": ["spark1", "spark2"],
        "topology": {"tp": 2},
        "alias": "gemma-4-31b",
    },
    {
        "name": "super-vllm",
        "profile": "nemotron-3-super-120b-a12b-nvfp4-vllm",
        "sparks": ["spark3"],
        "alias": "nemotron-3-super",
    },
    {
        "name": "super-trtllm",
        "profile": "nemotron-3-super-120b-a12b-nvfp4-trtllm",
        "sparks": ["spark4"],
        "alias": "nemotron-3-super-trtllm",
    },
]


@dataclass(frozen=True)
class Entry:
    id: str
    category: str
    rule: str
    key: str
    change: Change
    file: str = ALL
    base: str = "example"
    password: str | None = None
    exit: int = 1


# --- building an inventory --------------------------------------------------------------------


def read_vars(path: Path) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def write_vars(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000))


def setv(name: str, value: Any, file: str = ALL) -> Change:
    def apply(inv: Path) -> None:
        data = read_vars(inv / file)
        data[name] = value
        write_vars(inv / file, data)

    return apply


def delv(*names: str, file: str = ALL) -> Change:
    def apply(inv: Path) -> None:
        data = read_vars(inv / file)
        for name in names:
            data.pop(name, None)
        write_vars(inv / file, data)

    return apply


def fabric(**changes: Any) -> Change:
    def apply(inv: Path) -> None:
        data = read_vars(inv / ALL)
        data["fabric"] = {**data["fabric"], **changes}
        write_vars(inv / ALL, data)

    return apply


def deployments(entries: list[Any]) -> Change:
    def apply(inv: Path) -> None:
        data = read_vars(inv / ALL)
        data.pop("serving_profile", None)
        data.pop("serving_spark", None)
        data["serving_deployments"] = entries
        write_vars(inv / ALL, data)

    return apply


def mixed(index: int = 0, **changes: Any) -> Change:
    """The 2+1+1 with one deployment changed (a value of None deletes the key)."""
    entries = copy.deepcopy(MIXED)
    for key, value in changes.items():
        if value is None:
            entries[index].pop(key, None)
        else:
            entries[index][key] = value
    return deployments(entries)


def append(file: str, text: str) -> Change:
    def apply(inv: Path) -> None:
        path = inv / file
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n" + text)

    return apply


def write(file: str, data: bytes | str) -> Change:
    def apply(inv: Path) -> None:
        path = inv / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)

    return apply


def hosts(fn: Callable[[dict[str, Any]], None]) -> Change:
    def apply(inv: Path) -> None:
        data = yaml.safe_load((inv / "hosts.yml").read_text())
        fn(data)
        (inv / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))

    return apply


def group(data: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = data["all"]["children"]["k3s_cluster"]["children"][name]
    return found


def chain(*changes: Change) -> Change:
    def apply(inv: Path) -> None:
        for change in changes:
            change(inv)

    return apply


def vault_text(plain: str, password: str = PASSWORD) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    secret = VaultSecret(password.encode())
    return str(VaultLib([("default", secret)]).encrypt(plain, secret).decode())


def vault_file(file: str, plain: str, password: str = PASSWORD) -> Change:
    """``file`` encrypted with ansible-vault (group_vars/all.yml moves into group_vars/all/)."""

    def apply(inv: Path) -> None:
        main = inv / ALL
        if main.exists() and file.startswith("group_vars/all/"):
            (inv / "group_vars" / "all").mkdir(exist_ok=True)
            main.rename(inv / "group_vars" / "all" / "main.yml")
        write(file, vault_text(plain, password))(inv)

    return apply


def inline_vault(name: str, plain: str, password: str = PASSWORD) -> Change:
    lines = vault_text(plain, password).splitlines()
    return append(ALL, f"{name}: !vault |\n" + "".join(f"  {line}\n" for line in lines))


OWNED = {
    "serving_fetch_image": f"ghcr.io/owner/sparkrack:1.0@{DIGEST}",
    "serving_watchdog_image": f"ghcr.io/owner/sparkrack:1.0@{DIGEST}",
    "vault_gateway_key": "gateway-example",
}
"""What the example leaves to its owner (``sparkrack check`` refuses it as shipped)."""


def owned(inv: Path) -> None:
    """The example's own lines changed in place (its text and comments stay as shipped)."""
    text = (inv / ALL).read_text()
    for key, value in OWNED.items():
        line = re.compile(rf"^{key}:.*$", re.M)
        text, found = line.subn(f"{key}: {value}", text)
        if not found:
            text += f"{key}: {value}\n"
    (inv / ALL).write_text(text)


def build(entry: Entry, directory: Path) -> Path:
    """The entry's inventory under ``directory``: the example as its owner filled it in."""
    inv = directory / "inv"
    inv.mkdir(parents=True)
    for item in ("hosts.yml", ALL):
        (inv / item).parent.mkdir(parents=True, exist_ok=True)
        (inv / item).write_bytes((EXAMPLE / item).read_bytes())
    owned(inv)
    if entry.base == "mixed":
        deployments(copy.deepcopy(MIXED))(inv)
    entry.change(inv)
    return inv


def many_files(count: int) -> Change:
    def apply(inv: Path) -> None:
        folder = inv / "host_vars"
        folder.mkdir(exist_ok=True)
        for i in range(count):
            (folder / f"h{i}.yml").write_text(f"x_{i}: {i}\n")

    return apply


def fifo(file: str) -> Change:
    def apply(inv: Path) -> None:
        (inv / file).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(inv / file)

    return apply


def symlink(file: str, target: str) -> Change:
    def apply(inv: Path) -> None:
        (inv / file).parent.mkdir(parents=True, exist_ok=True)
        (inv / file).symlink_to(target)

    return apply


def linked_group_vars(extra: str) -> Change:
    """group_vars as a link to a folder beside the inventory (molecule links it so), whose
    all.yml gets ``extra``."""

    def apply(inv: Path) -> None:
        elsewhere = inv.parent / "elsewhere"
        (inv / "group_vars").rename(elsewhere)
        (inv / "group_vars").symlink_to(elsewhere, target_is_directory=True)
        with (elsewhere / "all.yml").open("a", encoding="utf-8") as handle:
            handle.write(extra)

    return apply


def deep_dirs(depth: int) -> Change:
    def apply(inv: Path) -> None:
        folder = inv / "group_vars"
        for i in range(depth):
            folder = folder / f"d{i}"
        folder.mkdir(parents=True)
        (folder / "x.yml").write_text("x: 1\n")

    return apply


# --- the corpus -------------------------------------------------------------------------------

SCHEMA = "inventory-schema"
YAML11 = "inventory-yaml"
DEPLOY = "deployments"
FABRIC = "fabric"
NAMES = "k8s-name"
VAULT = "inventory-vault"


def S(entry_id: str, name: str, value: Any, rule: str = SCHEMA, **kw: Any) -> Entry:
    """A serving_* (or other sparkrack) variable set to a hostile value in group_vars/all."""
    return Entry(entry_id, "serving", rule, kw.pop("key", name), setv(name, value), **kw)


SERVING: list[Entry] = [
    S("api-port-text", "serving_api_port", "abc"),
    S("api-port-too-high", "serving_api_port", 99999),
    S("api-port-zero", "serving_api_port", 0),
    S("api-port-negative", "serving_api_port", -1),
    S("api-port-bool", "serving_api_port", True),
    S("api-port-float", "serving_api_port", 30000.5),
    S("api-port-leading-zero-text", "serving_api_port", "030000"),
    S("api-port-huge-digits", "serving_api_port", "9" * 400),
    S("dist-port-list", "serving_dist_port", [1, 2]),
    S("dist-port-equals-api-port", "serving_dist_port", 30000),
    S("fetch-port-kubelet", "serving_fetch_port", 10250),
    S("fetch-port-nodeport-range", "serving_fetch_port", 31000),
    S("fetch-port-k3s-api", "serving_fetch_port", 6443),
    S("fetch-port-range-past-65535", "serving_fetch_port", 65000),
    S("fetch-port-range-over-kubelet", "serving_fetch_port", 9500),
    S("trusted-images-as-text", "serving_trusted_images", "scitrera/"),
    S("trusted-images-with-space", "serving_trusted_images", ["scitrera/x y"]),
    S("remote-code-repo-climbs", "serving_remote_code_repos", ["../../etc"]),
    S("gateway-clients-not-a-network", "serving_gateway_clients", ["everyone"]),
    S("gateway-clients-host-bits", "serving_gateway_clients", ["10.0.0.1/8"]),
    S("gateway-node-port-ssh", "serving_gateway_node_port", 22),
    S("gateway-node-port-as-text", "serving_gateway_node_port", "30400; true"),
    S("gateway-node-port-without-clients", "serving_gateway_node_port", 30400),
    S("image-archive-not-a-path", "serving_image_archive", ["build/sparkrack-image.tar"]),
    S("image-archive-not-an-image", "serving_image_archive", "/etc/hostname"),
    S("allow-undigested-maybe", "serving_allow_undigested_privileged", "maybe"),
    S("rdma-access-unknown", "serving_rdma_access", "hostdev"),
    S("rdma-resource-shell", "serving_rdma_resource", "rdma/x;rm -rf /"),
    S("monitoring-unknown-key", "monitoring", {"enabled": True, "grafana_password": "x"}),
    S("namespace-upper-underscore", "serving_namespace", "Bad_NS"),
    S("namespace-too-long", "serving_namespace", "a" * 64),
    S("namespace-leading-dash", "serving_namespace", "-ns"),
    S("namespace-trailing-newline", "serving_namespace", "sparkrack\n"),
    S("namespace-escape-sequence", "serving_namespace", "ns\x1b[2J"),
    S("namespace-number", "serving_namespace", 123),
    S("namespace-template-lookup", "serving_namespace", "{{ lookup('pipe', 'id') }}"),
    S("namespace-kube-system", "serving_namespace", "kube-system"),
    S("namespace-default", "serving_namespace", "default"),
    S("namespace-kube-node-lease", "serving_namespace", "kube-node-lease"),
    S("namespace-monitoring", "serving_namespace", "monitoring"),
    S("evidence-dir-under-home", "serving_watchdog_evidence_dir", "/home/owner/evidence"),
    S("evidence-dir-under-root", "serving_watchdog_evidence_dir", "/root/evidence"),
    S("evidence-dir-tilde", "serving_watchdog_evidence_dir", "~/evidence"),
    S("hf-cache-under-home", "serving_hf_cache", "/home/owner/.cache/huggingface"),
    S("hf-cache-relative", "serving_hf_cache", "var/lib/hf"),
    S("hf-cache-root", "serving_hf_cache", "/"),
    S("hf-cache-etc", "serving_hf_cache", "/etc/sparkrack"),
    S("hf-cache-k3s-state", "serving_hf_cache", "/var/lib/rancher/k3s"),
    S("hf-cache-dot-dot", "serving_hf_cache", "/var/lib/sparkrack/../../etc"),
    S("hf-cache-space", "serving_hf_cache", "/data/hf cache"),
    S("hf-cache-var-lib", "serving_hf_cache", "/var/lib"),
    S("hf-cache-proc", "serving_hf_cache", "/proc/1/root"),
    S("jit-cache-equals-hf-cache", "serving_jit_cache", "/var/lib/sparkrack/huggingface"),
    S("jit-cache-inside-hf-cache", "serving_jit_cache", "/var/lib/sparkrack/huggingface/jit"),
    S("jit-cache-kubelet", "serving_jit_cache", "/var/lib/kubelet/pods"),
    S("shm-size-words", "serving_shm_size", "lots"),
    S("shm-size-zero", "serving_shm_size", "0"),
    S("shm-size-over-memory", "serving_shm_size", "512Gi"),
    S("shm-size-space", "serving_shm_size", "32 GiB"),
    S("shm-size-number", "serving_shm_size", 32),
    S("hf-token-secret-name", "serving_hf_token_secret", "Bad_Secret"),
    S("fetch-secret-equals-hf-secret", "serving_fetch_secret", "sparkrack-hf-token"),
    S("gateway-secret-too-long", "serving_gateway_key_secret", "x" * 300),
    S("startup-timeout-zero", "serving_startup_timeout", 0),
    S("startup-timeout-huge", "serving_startup_timeout", 10**9),
    S("liveness-timeout-words", "serving_liveness_timeout", "soon"),
    S("memwait-timeout-negative", "serving_memwait_timeout", -5),
    S("fetch-timeout-float", "serving_fetch_timeout", 1.5),
    S("prepull-maybe", "serving_prepull", "maybe"),
    S("prepull-timeout-list", "serving_prepull_timeout", [3600]),
    S("serving-typo", "serving_namepsace", "sparkrack"),
    S("serving-unknown", "serving_gpus", 4),
    S("serving-fact-name", "serving_rendered", {"manifests": []}),
    S("plan-injected", "sparkrack_plan", {"nodes": {}}),
    S("contract-injected", "sparkrack_contract", {"api_service": "evil"}),
    S("sparkrack-unknown", "sparkrack_debug", True),
    Entry(
        "namespace-only-for-sparks",
        "serving",
        SCHEMA,
        "serving_namespace",
        chain(
            delv("serving_namespace"), setv("serving_namespace", "other", "group_vars/sparks.yml")
        ),
        file="group_vars/sparks.yml",
    ),
    Entry(
        "namespace-only-for-localhost",
        "serving",
        SCHEMA,
        "serving_namespace",
        setv("serving_namespace", "kube-system", "host_vars/localhost.yml"),
        file="host_vars/localhost.yml",
    ),
    Entry(
        "unknown-variable-only-for-localhost",
        "serving",
        SCHEMA,
        "serving_namepsace",
        setv("serving_namepsace", "team-a", "host_vars/localhost.yml"),
        file="host_vars/localhost.yml",
    ),
    Entry(
        "gid-index-over-a-group-folder",
        "serving",
        SCHEMA,
        "roce_gid_index",
        chain(
            setv("roce_gid_index", 3, "group_vars/sparks/main.yml"),
            setv("roce_gid_index", 300, "host_vars/spark2.yml"),
        ),
        file="host_vars/spark2.yml",
    ),
    Entry(
        "api-port-only-on-one-spark",
        "serving",
        SCHEMA,
        "serving_api_port",
        setv("serving_api_port", 30001, "host_vars/spark2.yml"),
        file="host_vars/spark2.yml",
    ),
]


def D(entry_id: str, rule: str, key: str, change: Change, **kw: Any) -> Entry:
    return Entry(entry_id, "deployments", rule, key, change, base="mixed", **kw)


LISTED = "serving_deployments"
DEPLOYMENTS: list[Entry] = [
    D("name-40-characters", DEPLOY, f"{LISTED}.0.name", mixed(name="g" * 40)),
    D("name-upper-case", DEPLOY, f"{LISTED}.0.name", mixed(name="Gemma")),
    D("name-underscore", DEPLOY, f"{LISTED}.0.name", mixed(name="gemma_4")),
    D("name-leading-dash", DEPLOY, f"{LISTED}.0.name", mixed(name="-gemma")),
    D("name-trailing-newline", DEPLOY, f"{LISTED}.0.name", mixed(name="gemma\n")),
    D("name-number", DEPLOY, f"{LISTED}.0.name", mixed(name=4)),
    D("name-missing", DEPLOY, f"{LISTED}.0", mixed(name=None)),
    D("name-openai-is-the-gateway", NAMES, "Service/sparkrack-openai", mixed(name="openai")),
    D(
        "name-beside-name-api",
        NAMES,
        "Service/sparkrack-gemma-api",
        mixed(1, name="gemma-api"),
    ),
    D("names-twice", DEPLOY, f"{LISTED}.name", mixed(1, name="gemma")),
    D("aliases-twice", DEPLOY, f"{LISTED}.alias", mixed(1, alias="gemma-4-31b")),
    D("alias-space", DEPLOY, f"{LISTED}.0.alias", mixed(alias="gemma 4")),
    D("alias-var-expansion", DEPLOY, f"{LISTED}.0.alias", mixed(alias="$(HF_TOKEN)")),
    D("alias-too-long", DEPLOY, f"{LISTED}.0.alias", mixed(alias="a" * 200)),
    D("profile-absolute-path", DEPLOY, f"{LISTED}[0].profile", mixed(profile="/etc/passwd")),
    D(
        "profile-dot-dot",
        DEPLOY,
        f"{LISTED}[0].profile",
        mixed(profile="model_profiles/../../../etc/hostname"),
    ),
    D("profile-home", DEPLOY, f"{LISTED}[0].profile", mixed(profile="~/.kube/config")),
    D("profile-unknown", "profile-not-found", f"{LISTED}[0].profile", mixed(profile="gemma-5")),
    D("profile-control-character", DEPLOY, f"{LISTED}.0.profile", mixed(profile="gemma\x07")),
    D("sparks-empty", DEPLOY, f"{LISTED}.0.sparks", mixed(sparks=[])),
    D("sparks-unknown", DEPLOY, f"{LISTED}[0].sparks", mixed(sparks=["spark1", "spark9"])),
    D("sparks-control-plane", DEPLOY, f"{LISTED}[1].sparks", mixed(1, sparks=["cp1"])),
    D("sparks-twice", DEPLOY, f"{LISTED}.0.sparks", mixed(sparks=["spark1", "spark1"])),
    D("sparks-a-string", DEPLOY, f"{LISTED}.0.sparks", mixed(sparks="spark1")),
    D("vf-not-in-use", DEPLOY, f"{LISTED}[0].vf", mixed(vf=3)),
    D("vf-negative", DEPLOY, f"{LISTED}.0.vf", mixed(vf=-1)),
    D("vf-bool", DEPLOY, f"{LISTED}.0.vf", mixed(vf=True)),
    D("vf-on-one-spark-engine", DEPLOY, f"{LISTED}[1].vf", mixed(1, vf=0)),
    D(
        "topology-tp-3",
        "topology-nodes",
        f"{LISTED}[0].topology.tp",
        mixed(topology={"tp": 3}),
    ),
    D("topology-unknown-key", DEPLOY, f"{LISTED}.0.topology.dp", mixed(topology={"dp": 2})),
    D("topology-tp-text", DEPLOY, f"{LISTED}.0.topology.tp", mixed(topology={"tp": "2"})),
    D("topology-tp-float", DEPLOY, f"{LISTED}.0.topology.tp", mixed(topology={"tp": 2.0})),
    D("unknown-key", DEPLOY, f"{LISTED}.0.colour", mixed(colour="red")),
    D(
        "over-commit",
        "deployments-memory",
        LISTED,
        mixed(1, sparks=["spark1"]),
    ),
    D("vllm-on-two-sparks", DEPLOY, f"{LISTED}[1].sparks", mixed(1, sparks=["spark3", "spark4"])),
    D(
        "shared-spark-one-vf",
        DEPLOY,
        f"{LISTED}.vf",
        chain(
            fabric(vfs_in_use=[0, 1]),
            deployments(
                [
                    {**MIXED[0], "profile": "gemma-4-31b-it", "name": n, "alias": n}
                    for n in ("a", "b")
                ]
            ),
        ),
    ),
    D("not-a-list", DEPLOY, LISTED, deployments("gemma")),  # type: ignore[arg-type]
    D("entry-not-a-mapping", DEPLOY, f"{LISTED}.0", deployments(["gemma"])),
    D("sixty-five-deployments", DEPLOY, LISTED, deployments([MIXED[1]] * 65)),
    D("no-fetch-image", "fetch-image", "serving_fetch_image", delv("serving_fetch_image")),
    D(
        "profile-beside-deployments",
        DEPLOY,
        "serving_profile",
        setv("serving_profile", "glm-4.7-nvfp4"),
    ),
    D("spark-beside-deployments", DEPLOY, "serving_spark", setv("serving_spark", "spark2")),
    Entry(
        "serving-spark-unknown",
        "deployments",
        DEPLOY,
        "serving_spark",
        chain(
            setv("serving_profile", "nemotron-3-super-120b-a12b-nvfp4-vllm"),
            setv("serving_spark", "spark9"),
        ),
    ),
    Entry(
        "serving-spark-control-plane",
        "deployments",
        DEPLOY,
        "serving_spark",
        chain(
            setv("serving_profile", "nemotron-3-super-120b-a12b-nvfp4-vllm"),
            setv("serving_spark", "cp1"),
        ),
    ),
    Entry(
        "serving-profile-absolute",
        "deployments",
        DEPLOY,
        "serving_profile",
        setv("serving_profile", "/etc/passwd"),
    ),
    Entry(
        "serving-profile-unknown",
        "deployments",
        "profile-not-found",
        "serving_profile",
        setv("serving_profile", "llama-99"),
    ),
]


UNPULLABLE = "image-unreachable"


def I(entry_id: str, value: Any, rule: str = SCHEMA, **kw: Any) -> Entry:  # noqa: E743
    """serving_fetch_image set to a hostile value."""
    return Entry(
        entry_id, "images", rule, "serving_fetch_image", setv("serving_fetch_image", value), **kw
    )


IMAGES: list[Entry] = [
    I("fetch-image-option", "--entrypoint=/bin/sh"),
    I("fetch-image-option-after-space", "registry.example.com/fetch:1.0 --privileged"),
    I("fetch-image-short-digest", "registry.example.com/fetch@sha256:abc"),
    I("fetch-image-sha512", f"registry.example.com/fetch@sha512:{'0' * 128}"),
    I("fetch-image-digest-63", "registry.example.com/fetch:1.0@sha256:" + "0" * 63),
    I("fetch-image-number", 123),
    I("fetch-image-list", ["registry.example.com/fetch:1.0"]),
    I("fetch-image-var-expansion", "$(HF_TOKEN)"),
    I("fetch-image-upper-case", "Registry.example.com/Fetch:1.0"),
    I("fetch-image-name-256", "r/" + "a" * 254 + ":1"),
    I("fetch-image-tag-129", "registry.example.com/fetch:" + "t" * 129),
    I("fetch-image-trailing-newline", "registry.example.com/fetch:1.0\n"),
    I("fetch-image-template", "{{ fetch_image }}"),
    I("fetch-image-space-in-tag", "registry.example.com/fetch:ta g"),
    I("fetch-image-bool", True),
    I("fetch-image-latest", "registry.example.com/fetch:latest", "fetch-image"),
    I("fetch-image-latest-upper", "registry.example.com/fetch:Latest", "fetch-image"),
    I("fetch-image-nightly-upper", "registry.example.com/fetch:1.0-NIGHTLY", "fetch-image"),
    I("fetch-image-no-tag", "registry.example.com/fetch", "fetch-image"),
    I("fetch-image-port-no-tag", "localhost:5000/fetch", "fetch-image"),
    I("fetch-image-empty", "", "fetch-image"),
    I("fetch-image-placeholder-registry", f"registry.example.com/fetch:1.0@{DIGEST}", UNPULLABLE),
    I("fetch-image-invalid-tld", "registry.invalid:5000/fetch:1.0", UNPULLABLE),
    I("fetch-image-letter-o-tag", "ghcr.io/owner/fetch:1.O", UNPULLABLE),
    Entry(
        "watchdog-image-placeholder",
        "images",
        UNPULLABLE,
        "serving_watchdog_image",
        setv("serving_watchdog_image", "registry.example.com/sparkrack/watchdog:1.0"),
    ),
    Entry(
        "no-gateway-key",
        "images",
        "inventory-secret",
        "vault_gateway_key",
        delv("vault_gateway_key"),
    ),
]


def F(entry_id: str, key: str, **changes: Any) -> Entry:
    return Entry(entry_id, "fabric", FABRIC, key, fabric(**changes))


FABRICS: list[Entry] = [
    F("subnet-k3s-pods", "fabric.subnet", subnet="10.42.0.0/24"),
    F("subnet-k3s-services", "fabric.subnet", subnet="10.43.5.0/24"),
    F("subnet-covers-k3s", "fabric.subnet", subnet="10.0.0.0/8"),
    F("subnet-loopback", "fabric.subnet", subnet="127.0.0.0/24"),
    F("subnet-multicast", "fabric.subnet", subnet="224.0.0.0/24"),
    F("subnet-link-local", "fabric.subnet", subnet="169.254.1.0/24"),
    F("subnet-reserved", "fabric.subnet", subnet="240.0.0.0/24"),
    F("subnet-this-network", "fabric.subnet", subnet="0.0.0.0/24"),
    F("subnet-host-bits", "fabric.subnet", subnet="10.77.0.1/24"),
    F("subnet-words", "fabric.subnet", subnet="abc"),
    F("subnet-number", "fabric.subnet", subnet=12345),
    F("subnet-ipv6", "fabric.subnet", subnet="fd00::/64"),
    F("vf-count-million", "fabric.vf_count", vf_count=1_000_000),
    F("vf-count-128", "fabric.vf_count", vf_count=128),
    F("vf-count-zero", "fabric.vf_count", vf_count=0),
    F("vf-count-text", "fabric.vf_count", vf_count="4"),
    F("vfs-in-use-200", "fabric.vfs_in_use", vfs_in_use=[0] * 200),
    F("vfs-in-use-beyond", "fabric.vfs_in_use", vfs_in_use=[0, 4]),
    F("port-trailing-newline", "fabric.ports", ports=["enp1s0f0np0\n"]),
    F("port-space", "fabric.ports", ports=["enp1s0f0np0 up"]),
    F("port-escape", "fabric.ports", ports=["enp1s0\x1b[2J"]),
    F("ports-five", "fabric.ports", ports=[f"enp{i}s0f0np0" for i in range(5)]),
    F("port-name-too-long", "fabric.ports", ports=["enp1s0f0np0abcdefgh"]),
    F("ports-empty", "fabric.ports", ports=[]),
    F("rail-not-a-port", "fabric.rails", rails=["enP2p1s0f0np0"]),
    F("mtu-1500", "fabric.mtu", mtu=1500),
    F("mtu-huge", "fabric.mtu", mtu=100_000),
    F("block-1000", "fabric.block", block=1000),
    F("mac-prefix-multicast", "fabric.mac_prefix", mac_prefix="03:00:00"),
    F("gid-index-negative", "fabric.gid_index", gid_index=-1),
    F("fabric-unknown-key", "fabric.vlan", vlan=100),
    Entry("fabric-not-a-mapping", "fabric", FABRIC, "fabric", setv("fabric", "10.77.0.0/24")),
    Entry(
        "spark-index-zero",
        "fabric",
        FABRIC,
        "spark1.spark_index",
        hosts(lambda d: group(d, "sparks")["hosts"]["spark1"].update(spark_index=0)),
        file="hosts.yml",
    ),
    Entry(
        "spark-index-twice",
        "fabric",
        FABRIC,
        "spark2.spark_index",
        hosts(lambda d: group(d, "sparks")["hosts"]["spark2"].update(spark_index=1)),
        file="hosts.yml",
    ),
    Entry(
        "management-address-twice",
        "fabric",
        FABRIC,
        "spark2.node_ip",
        hosts(lambda d: group(d, "sparks")["hosts"]["spark2"].update(ansible_host="192.168.1.11")),
        file="hosts.yml",
    ),
]

YAML_TRICKS: list[Entry] = [
    Entry(
        "octal-vf-count",
        "yaml",
        YAML11,
        "fabric.vf_count",
        lambda inv: _sub(inv, "vf_count: 4", "vf_count: 04"),
    ),
    Entry(
        "sexagesimal-startup-timeout",
        "yaml",
        YAML11,
        "serving_startup_timeout",
        append(ALL, "serving_startup_timeout: 1:30\n"),
    ),
    Entry(
        "underscore-memwait",
        "yaml",
        YAML11,
        "serving_memwait_timeout",
        append(ALL, "serving_memwait_timeout: 1_000\n"),
    ),
    Entry(
        "binary-mtu",
        "yaml",
        YAML11,
        "fabric.mtu",
        lambda inv: _sub(inv, "mtu: 9000", "mtu: 0b10001100101000"),
    ),
    Entry(
        "sexagesimal-mac-prefix",
        "yaml",
        YAML11,
        "fabric.mac_prefix",
        lambda inv: _sub(inv, "  gid_index: null", "  gid_index: null\n  mac_prefix: 12:34:56"),
    ),
    Entry(
        "octal-spark-index",
        "yaml",
        YAML11,
        "spark_index",
        lambda inv: (inv / "hosts.yml").write_text(
            (inv / "hosts.yml").read_text().replace("spark_index: 2", "spark_index: 010")
        ),
        file="hosts.yml",
    ),
    Entry(
        "date-namespace",
        "yaml",
        SCHEMA,
        "serving_namespace",
        lambda inv: _sub(inv, "serving_namespace: sparkrack", "serving_namespace: 2026-01-01"),
    ),
    Entry(
        "yes-namespace",
        "yaml",
        SCHEMA,
        "serving_namespace",
        lambda inv: _sub(inv, "serving_namespace: sparkrack", "serving_namespace: yes"),
    ),
    Entry(
        "on-fetch-image",
        "yaml",
        SCHEMA,
        "serving_fetch_image",
        lambda inv: _sub(
            inv,
            f"serving_fetch_image: {OWNED['serving_fetch_image']}",
            "serving_fetch_image: on",
        ),
    ),
    Entry(
        "duplicate-key",
        "yaml",
        "yaml-duplicate-key",
        "serving_namespace",
        append(ALL, "serving_namespace: other\n"),
    ),
    Entry("alias-bomb", "yaml", "yaml-alias", "(yaml)", append(ALL, f"x_bomb: {bomb()}\n")),
    Entry("alias-recursive", "yaml", "yaml-alias", "(yaml)", append(ALL, "x_loop: &r [1, *r]\n")),
    Entry(
        "nesting-5000",
        "yaml",
        "yaml-depth",
        "(yaml)",
        append(ALL, "x_deep: " + "[" * 5000 + "]" * 5000 + "\n"),
    ),
    Entry("file-600-kb", "yaml", "yaml-size", "(yaml)", append(ALL, "#" + "x" * 600_000 + "\n")),
    Entry(
        "utf16",
        "yaml",
        "yaml-encoding",
        "(yaml)",
        lambda inv: (inv / ALL).write_bytes((inv / ALL).read_text().encode("utf-16")),
    ),
    Entry(
        "latin1",
        "yaml",
        "yaml-encoding",
        "(yaml)",
        lambda inv: (inv / ALL).write_bytes((inv / ALL).read_bytes() + b"x_name: caf\xe9\n"),
    ),
    Entry(
        "nul-byte",
        "yaml",
        "yaml-encoding",
        "(yaml)",
        lambda inv: (inv / ALL).write_bytes((inv / ALL).read_bytes() + b"x: \x00\n"),
    ),
    Entry(
        "nan-mtu",
        "yaml",
        "yaml-non-finite",
        "fabric.mtu",
        lambda inv: _sub(inv, "mtu: 9000", "mtu: .nan"),
    ),
    Entry(
        "tab-indent", "yaml", "yaml", "(yaml)", lambda inv: _sub(inv, "  mtu: 9000", "\tmtu: 9000")
    ),
    Entry("two-documents", "yaml", "yaml", "(yaml)", append(ALL, "---\nx: 1\n")),
    Entry(
        "python-tag",
        "yaml",
        "yaml",
        "x_cmd",
        append(ALL, "x_cmd: !!python/object/apply:os.system ['id']\n"),
    ),
    Entry(
        "unclosed-flow",
        "yaml",
        "yaml",
        "(yaml)",
        write("group_vars/sparks.yml", "serving_namespace: [oops\n"),
        file="group_vars/sparks.yml",
    ),
    Entry("complex-key", "yaml", "yaml-key", "(yaml)", append(ALL, "? [a, b]\n: 1\n")),
    Entry(
        "yaml11-bool-keys-twice",
        "yaml",
        "yaml-duplicate-key",
        "x_flags",
        append(ALL, "x_flags:\n  yes: 1\n  true: 2\n"),
    ),
    Entry(
        "host-twice",
        "yaml",
        "yaml-duplicate-key",
        "spark1",
        lambda inv: (inv / "hosts.yml").write_text(
            (inv / "hosts.yml")
            .read_text()
            .replace(
                "            spark2:\n",
                "            spark1:\n              ansible_host: 192.168.1.99\n            spark2:\n",
                1,
            )
        ),
        file="hosts.yml",
    ),
    Entry(
        "host-range-100000",
        "yaml",
        "inventory",
        "(hosts)",
        lambda inv: (inv / "hosts.yml").write_text(
            (inv / "hosts.yml")
            .read_text()
            .replace("            spark4:\n", "            extra[1:100000]:\n            spark4:\n")
        ),
        file="hosts.yml",
    ),
    Entry(
        "fifo-in-group-vars",
        "yaml",
        "inventory",
        "(file)",
        fifo("group_vars/sparks.yml"),
        file="group_vars/sparks.yml",
    ),
    Entry(
        "symlink-to-dev-zero",
        "yaml",
        "inventory",
        "(file)",
        symlink("group_vars/sparks.yml", "/dev/zero"),
        file="group_vars/sparks.yml",
    ),
    Entry("three-hundred-files", "yaml", "inventory", "(inventory)", many_files(300), file=""),
    Entry(
        "folders-ten-deep",
        "yaml",
        "inventory",
        "(inventory)",
        deep_dirs(10),
        file="group_vars/d0/d1/d2/d3/d4/d5/d6",
    ),
    Entry("huge-integer", "yaml", "yaml", "x_big", append(ALL, "x_big: " + "9" * 5000 + "\n")),
    Entry(
        "linked-group-vars-duplicate-key",
        "yaml",
        "yaml-duplicate-key",
        "serving_namespace",
        linked_group_vars("serving_namespace: other\n"),
    ),
    Entry(
        "folder-linked-to-itself",
        "yaml",
        "inventory",
        "(inventory)",
        symlink("group_vars/loop", "."),
        file="group_vars/loop/loop/loop/loop/loop/loop/loop",
    ),
]


def _sub(inv: Path, old: str, new: str, file: str = ALL) -> None:
    text = (inv / file).read_text()
    assert old in text, f"{old!r} not in {file}"
    (inv / file).write_text(text.replace(old, new, 1))


def V(entry_id: str, rule: str, key: str, change: Change, **kw: Any) -> Entry:
    return Entry(entry_id, "vault", rule, key, change, **kw)


VAULT_FILE = "group_vars/all/vault.yml"
SECRETS_TEXT = "vault_hf_token: hf_abc\nvault_gateway_key: gw-key\n"
VAULTS: list[Entry] = [
    V(
        "vault-file-beside-all-yml",
        "inventory-layout",
        "(layout)",
        write(VAULT_FILE, vault_text(SECRETS_TEXT)),
        password=PASSWORD,
    ),
    V(
        "vault-file-no-password",
        VAULT,
        "(vault)",
        vault_file(VAULT_FILE, SECRETS_TEXT),
        file=VAULT_FILE,
    ),
    V(
        "vault-file-wrong-password",
        VAULT,
        "(vault)",
        vault_file(VAULT_FILE, SECRETS_TEXT),
        file=VAULT_FILE,
        password="wrong",
    ),
    V(
        "inline-vault-no-password",
        VAULT,
        "vault_hf_token",
        inline_vault("vault_hf_token", "hf_abc"),
    ),
    V(
        "inline-vault-wrong-password",
        VAULT,
        "vault_hf_token",
        inline_vault("vault_hf_token", "hf_abc"),
        password="wrong",
    ),
    V(
        "vault-file-alias-bomb",
        "yaml-alias",
        "(yaml)",
        vault_file(VAULT_FILE, f"x: {bomb()}\n"),
        file=VAULT_FILE,
        password=PASSWORD,
    ),
    V(
        "vault-file-bad-yaml",
        "yaml",
        "(yaml)",
        vault_file(VAULT_FILE, "vault_hf_token: [x\n"),
        file=VAULT_FILE,
        password=PASSWORD,
    ),
    V(
        "vault-token-with-newline",
        SCHEMA,
        "vault_hf_token",
        vault_file(VAULT_FILE, 'vault_hf_token: "hf_abc\\nX-Injected: 1"\n'),
        file=VAULT_FILE,
        password=PASSWORD,
    ),
    V(
        "vault-key-with-space",
        SCHEMA,
        "vault_gateway_key",
        chain(delv("vault_gateway_key"), vault_file(VAULT_FILE, "vault_gateway_key: two words\n")),
        file=VAULT_FILE,
        password=PASSWORD,
    ),
    V("plain-token-empty", SCHEMA, "vault_hf_token", setv("vault_hf_token", "")),
    V("plain-token-number", SCHEMA, "vault_hf_token", setv("vault_hf_token", 12345)),
    V("plain-token-list", SCHEMA, "vault_gateway_key", setv("vault_gateway_key", ["a", "b"])),
    V("plain-token-octal", YAML11, "vault_hf_token", append(ALL, "vault_hf_token: 0123\n")),
    V(
        "plain-token-null",
        SCHEMA,
        "vault_gateway_key",
        chain(delv("vault_gateway_key"), append(ALL, "vault_gateway_key:\n")),
    ),
]


def R(entry_id: str, rule: str, key: str, change: Change, **kw: Any) -> Entry:
    return Entry(entry_id, "roles", rule, key, change, **kw)


ROLES: list[Entry] = [
    R("role-var-typo", SCHEMA, "roce_pfc_priorty", setv("roce_pfc_priorty", 3)),
    R("role-var-wrong-type", SCHEMA, "roce_pfc_priority", setv("roce_pfc_priority", "high")),
    R("role-var-list-expected", SCHEMA, "k3s_server_taints", setv("k3s_server_taints", "x")),
    R(
        "k3s-taint-malformed",
        "k3s-options",
        "k3s_agent_taints",
        setv("k3s_agent_taints", ["bad taint"]),
    ),
    R(
        "k3s-label-reserved",
        "k3s-options",
        "k3s_server_labels",
        setv("k3s_server_labels", {"sparkrack.io/role": "x"}),
    ),
    R("driver-lock-text", SCHEMA, "nvidia_driver_lock", setv("nvidia_driver_lock", "580")),
    R("earlyoom-words", SCHEMA, "spark_base_earlyoom", setv("spark_base_earlyoom", "yes please")),
    R("k3s-api-ready-set", SCHEMA, "k3s_api_ready", setv("k3s_api_ready", True)),
    R(
        "addons-zero-gpus",
        "cluster-addons",
        "cluster_addons.gpus_per_spark",
        setv("cluster_addons", {"gpus_per_spark": 0}),
    ),
    R(
        "addons-unknown",
        "cluster-addons",
        "cluster_addons.colour",
        setv("cluster_addons", {"colour": "red"}),
    ),
    R(
        "hardware-maybe",
        SCHEMA,
        "spark_hardware",
        setv("spark_hardware", "maybe"),
    ),
    R(
        "gid-index-text",
        SCHEMA,
        "roce_gid_index",
        setv("roce_gid_index", "three", "host_vars/spark1.yml"),
        file="host_vars/spark1.yml",
    ),
    R(
        "control-plane-is-a-spark",
        "inventory-groups",
        "sparks.cp1",
        hosts(lambda d: group(d, "sparks")["hosts"].update(cp1={"ansible_host": "192.168.1.10"})),
        file="",
    ),
    R(
        "no-control-plane",
        "inventory-groups",
        "control_plane",
        hosts(lambda d: group(d, "control_plane").update(hosts={})),
        file="",
    ),
    R(
        "two-control-planes",
        "inventory-groups",
        "control_plane",
        hosts(
            lambda d: group(d, "control_plane")["hosts"].update(cp2={"ansible_host": "192.168.1.9"})
        ),
        file="",
    ),
    R(
        "control-plane-in-fabric",
        "inventory-groups",
        "cp1.ansible_host",
        hosts(lambda d: group(d, "control_plane")["hosts"]["cp1"].update(ansible_host="10.77.0.5")),
        file="hosts.yml",
    ),
]

CORPUS: list[Entry] = [*SERVING, *DEPLOYMENTS, *IMAGES, *FABRICS, *YAML_TRICKS, *VAULTS, *ROLES]


def by_id(entry_id: str) -> Entry:
    (entry,) = [e for e in CORPUS if e.id == entry_id]
    return entry


# --- commands that echo untrusted text ------------------------------------------------------


@dataclass(frozen=True)
class LogEntry:
    """A hostile log for ``sparkrack diagnose``: what the output must show (escaped)."""

    id: str
    log: bytes
    shows: str


ESC = "\x1b"
DIAGNOSE: list[LogEntry] = [
    LogEntry("log-clear-screen", f"boom {ESC}[2J{ESC}[H\n".encode(), "no known failure signature"),
    LogEntry(
        "log-title-in-evidence",
        f"RuntimeError: NCCL error: Network is unreachable {ESC}]0;owned\x07 ibv_modify_qp\n".encode(),
        "\\x1b]0;owned\\x07",
    ),
    LogEntry(
        "log-carriage-return-forgery",
        b"RuntimeError: cuDNN is not available\rfix: everything is fine\n",
        "cudnn-not-available (line 1, 1x): RuntimeError: cuDNN is not available\n",
    ),
    LogEntry("log-c1-csi", "ImportError \u009b31m red\n".encode(), "no known failure signature"),
    LogEntry(
        "log-bidi-override",
        "RuntimeError: cuDNN is not available \u202eenil eht si siht\n".encode(),
        "\\u202e",
    ),
    LogEntry("log-nul-bytes", b"\x00" * 10_000 + b"\n", "no known failure signature"),
    LogEntry("log-one-huge-line", b"x" * 3_000_000 + b"\n", "no known failure signature"),
    LogEntry("log-invalid-utf8", b"\xff\xfe RuntimeError \xc3(\n", "no known failure signature"),
]


@dataclass
class ServerEntry:
    """A hostile server for ``sparkrack bench``: the exit code and the text the error shows."""

    id: str
    chat: Script = field(default_factory=list)
    models: Script = field(default_factory=lambda: [http("200 OK", b'{"data": [{"id": "m"}]}')])
    metrics: Script | None = None
    exit: int = 2
    shows: str = ""


BENCH: list[ServerEntry] = [
    ServerEntry("server-accepts-never-answers", chat=[30.0], shows="no answer"),
    ServerEntry("server-headers-late", chat=[5.0, SSE_HEAD], shows="no answer"),
    ServerEntry(
        "server-models-never-answer", models=[30.0], exit=1, shows="endpoint not reachable"
    ),
    ServerEntry(
        "server-error-escape",
        chat=stream(*good_chunks(1), b'data: {"error": "\\u001b[2Jgone"}\n\n'),
        shows="server error event: \\x1b[2Jgone",
    ),
    ServerEntry(
        "server-http-error-escape",
        chat=[http("500 Oops", b"\x1b]0;owned\x07\r\nfake line", "text/plain")],
        shows="HTTP 500: \\x1b]0;owned\\x07 fake line",
    ),
    ServerEntry(
        "server-stalls-after-headers",
        chat=[SSE_HEAD, chunk("a "), 30.0],
        shows="stalled: no generated text for 2 s",
    ),
]
