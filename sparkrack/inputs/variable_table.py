"""The table of every variable sparkrack reads with a form of its own: one :class:`Variable`
row per name (its form, its doc, where it must be set), and the facts a play computes.

The check that holds an inventory to this table, the roles' options and ``docs/reference/inventory.md``
live in :mod:`sparkrack.inputs.variables`; adding a variable is one row here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkrack import contract
from sparkrack.contract import HOST_PORTS, NODE_PORT_RANGE
from sparkrack.errors import shown
from sparkrack.inputs import forms
from sparkrack.planner.memory import DEFAULT_OS_HEADROOM_GB, GB, GB10_MEMORY_GB

RULE = "inventory-schema"
RULE_YAML = "inventory-yaml"
RULE_SECRET = "inventory-secret"
WEEK_S = 7 * 24 * 3600
"""The longest timeout accepted: a step that takes longer than a week has hung."""


def _fetch_port(value: Any) -> str | None:
    wrong = forms.PORT.problem(value)
    if wrong:
        return wrong
    port = int(value)  # a whole number: the port form said so
    last = port + contract.FETCH_PORT_SPAN - 1
    if last > 65535:
        return f"is {port}: the receivers use ports {port}-{last}, past 65535"
    low, high = NODE_PORT_RANGE
    if port <= high and low <= last:
        return (
            f"is {port}: the receivers use ports {port}-{last}, which overlap K3s' NodePort "
            f"range {low}-{high} on the Spark's host network"
        )
    taken = [p for p in HOST_PORTS if port <= p <= last]
    if taken:
        return f"is {port}: the receivers use ports {port}-{last}; {HOST_PORTS[taken[0]]} listens on {taken[0]}"
    return None


MBIT_S = forms.Form(
    "a rate in Mbit/s: a whole number from 1 to 1600000 (100 Gbit/s is 100000)",
    forms.integer_between(1, 1_600_000),
    example="100000",
)
MBYTE_S = forms.Form(
    "a rate in MB/s: a whole number from 1 to 200000",
    forms.integer_between(1, 200_000),
    example="3000",
)

FETCH_PORT = forms.Form(
    "the first of 1000 free TCP ports of the Spark's host network (at most 64536; the range "
    "outside K3s' NodePort range and the kubelet's and K3s' own ports)",
    _fetch_port,
    example="8873",
)


def _secret(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"is {'empty' if value is None else 'not text'}"
    if not value:
        return "is empty"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return "contains a space, a newline or a control character (it is sent in an HTTP header)"
    return None


def _monitoring(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"is {forms.type_name(value)}, not a mapping"
    unknown = sorted(str(k) for k in value if k != "enabled")
    if unknown:
        return f"has {', '.join(unknown)}, which nothing reads (only enabled)"
    return forms.SWITCH.problem(value.get("enabled", False))


def _control_file(value: Any) -> str | None:
    wrong = forms.NAME_TEXT.problem(value)
    if wrong:
        return wrong
    if not str(value).startswith("/"):
        return f"{shown(value)} is not an absolute path"
    return None


CONTROL_FILE = forms.Form(
    "an absolute path of a file on the control machine",
    _control_file,
    example="/tmp/sparkrack-summary.json",
)

SECRET = forms.Form("the secret as one word, without spaces or newlines", _secret)

SYSTEM_NAMESPACES = (
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    contract.MONITORING_NAMESPACE,
)
"""Namespaces the serving objects may not share: Kubernetes' own, and the monitoring stack's.
The serve play labels its namespace privileged and gives the watchdog a Role there, so either
would reach the cluster's own components."""


def _serving_namespace(value: Any) -> str | None:
    wrong = forms.dns_label().problem(value)
    if wrong:
        return wrong
    if value in SYSTEM_NAMESPACES:
        return (
            f"is {value}, a namespace of the cluster's own: the serve play would label it "
            "privileged and grant the watchdog a Role among its pods"
        )
    agents = contract.agents_namespace(value)
    if len(agents) > AGENTS_NAME_MAX or agents in SYSTEM_NAMESPACES:
        return (
            f"gives the agents' namespace {agents!r}, which is no namespace of its own of at "
            f"most {AGENTS_NAME_MAX} characters"
        )
    return None


AGENTS_NAME_MAX = 63
"""A namespace name is a DNS label: the agents' namespace, the serving namespace's name with
:data:`sparkrack.contract.AGENTS_SUFFIX`, must fit too."""
SERVING_NAMESPACE = forms.Form(
    forms.dns_label().words
    + f" of at most {AGENTS_NAME_MAX - len(contract.AGENTS_SUFFIX)} characters"
    + ", naming a namespace of its own (not "
    + ", ".join(SYSTEM_NAMESPACES)
    + ")",
    _serving_namespace,
    example="sparkrack",
)


@dataclass(frozen=True)
class Variable:
    """One inventory variable sparkrack reads: its accepted form and what it does."""

    name: str
    form: forms.Form
    doc: str
    cluster: bool = True
    """One value for the whole cluster (read once, by the Sparks and the control machine)."""
    secret: bool = False
    """Never shown; may be a template (a lookup); reported when written in plain text."""
    default: Any = None
    """A ``serving_*`` variable's value when the inventory leaves it unset: the serving role's
    default (``roles/serving/defaults/main.yml`` is written from it) and the render's."""
    spec: str = ""
    """A ``serving_*`` variable's argument-spec type, ``type`` or ``list/<elements>``; empty:
    taken from the default's (a text, a whole number, a switch or a list of texts)."""
    setting: bool = True
    """A ``serving_*`` variable the render reads from the inventory (the serve role passes it in
    ``serving_settings``); False for the four that choose the deployments."""

    @property
    def spec_type(self) -> tuple[str, str]:
        """(type, elements) of the serving role's argument spec for this variable."""
        if self.spec:
            kind, _, elements = self.spec.partition("/")
            return kind, elements
        for python, kind in ((bool, "bool"), (int, "int"), (str, "str")):
            if isinstance(self.default, python):
                return kind, ""
        if isinstance(self.default, list):
            return "list", "str"
        raise ValueError(f"{self.name}: no spec and a default of no known type: give spec")


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "serving_profile",
        forms.NAME_TEXT,
        "the one model: a profile of model_profiles/ (name, path or HF id)",
        default="",
        setting=False,
    ),
    Variable(
        "serving_deployments",
        forms.Form("a list of deployments (docs/guide/several-models.md)", lambda v: None),
        "several models: a list of {name, profile, sparks, vf, topology, alias} "
        "(docs/guide/several-models.md)",
        default=[],
        spec="list/dict",
        setting=False,
    ),
    Variable(
        "serving_profile_file",
        forms.NAME_TEXT,
        "a profile file for one run (-e, sparkrack matrix); replaces the two above",
        default="",
        setting=False,
    ),
    Variable(
        "serving_spark",
        forms.NAME_TEXT,
        "the Spark of a one-Spark engine given by serving_profile (null: the rank-0 Spark)",
        default=None,
        spec="str",
        setting=False,
    ),
    Variable(
        "serving_namespace",
        SERVING_NAMESPACE,
        "namespace of every serving object and the NADs",
        default="sparkrack",
    ),
    Variable(
        "serving_api_port", forms.PORT, "OpenAI API port of every deployment's head", default=30000
    ),
    Variable(
        "serving_dist_port",
        forms.PORT,
        "torch.distributed rendezvous port of the head",
        default=20000,
    ),
    Variable(
        "serving_hf_cache",
        forms.HOST_DIR,
        "the Hugging Face cache on every Spark",
        default="/var/lib/sparkrack/huggingface",
    ),
    Variable(
        "serving_jit_cache",
        forms.HOST_DIR,
        "the kernel caches on every Spark, per image",
        default="/var/lib/sparkrack/jit",
    ),
    Variable(
        "serving_shm_size",
        forms.memory_size(GB10_MEMORY_GB * GB, f"a Spark's {GB10_MEMORY_GB:g} GB"),
        "/dev/shm of every rank",
        default="32Gi",
    ),
    Variable(
        "serving_hf_token_secret",
        forms.SUBDOMAIN,
        "the Secret with the HF token (key token)",
        default="sparkrack-hf-token",
    ),
    Variable(
        "serving_gateway_key_secret",
        forms.SUBDOMAIN,
        "the Secret with the gateway's master key (key key)",
        default="sparkrack-gateway-key",
    ),
    Variable(
        "serving_fetch_secret",
        forms.SUBDOMAIN,
        "the Secret with the rsync password",
        default="sparkrack-fetch-rsync",
    ),
    Variable(
        "serving_fetch_port",
        FETCH_PORT,
        "the receivers' rsync port on the fabric PFs",
        default=8873,
    ),
    Variable(
        "serving_fetch_image",
        forms.IMAGE,
        "the weight copy's image (python3 + rsync), pinned by digest",
        default="",
    ),
    Variable(
        "serving_startup_timeout",
        forms.seconds(1, WEEK_S),
        "startup-probe budget: weight load and graph capture",
        default=1800,
    ),
    Variable(
        "serving_liveness_timeout",
        forms.seconds(1, WEEK_S),
        "seconds a stuck group lives before liveness restarts it",
        default=120,
    ),
    Variable(
        "serving_fetch_timeout",
        forms.seconds(1, WEEK_S),
        "seconds the download and copy of one model may take",
        default=14400,
    ),
    Variable(
        "serving_memwait_timeout",
        forms.seconds(1, WEEK_S),
        "seconds a rank waits for its memory to be free",
        default=600,
    ),
    Variable(
        "serving_memguard_floor",
        forms.memory_size(GB10_MEMORY_GB * GB, f"a Spark's {GB10_MEMORY_GB:g} GB"),
        "the memory guard stops a Spark's largest engine pod when MemFree falls below "
        "this (default: the planner's OS headroom)",
        default=f"{DEFAULT_OS_HEADROOM_GB:g}G",
    ),
    Variable(
        "serving_memguard_psi_full",
        forms.Form("a percentage from 1 to 100", forms.integer_between(1, 100), example="10"),
        "the memory guard also acts when memory PSI full avg10 reaches this percentage",
        default=10,
    ),
    Variable(
        "serving_rail_mbit_s",
        MBIT_S,
        "what the weight copy reaches on one fabric rail (sparkrack plan -i's switch estimate)",
        default=100000,
    ),
    Variable(
        "serving_download_mbit_s",
        MBIT_S,
        "what the head Spark downloads from the Hub at (sparkrack plan -i's switch estimate)",
        default=1000,
    ),
    Variable(
        "serving_disk_mbyte_s",
        MBYTE_S,
        "what a Spark's disk reads and writes the weights at (sparkrack plan -i's switch estimate)",
        default=3000,
    ),
    Variable(
        "serving_trusted_images",
        forms.IMAGE_PREFIXES,
        "image repository prefixes a profile may name (docs/design/trust.md)",
        default=[],
    ),
    Variable(
        "serving_allow_undigested_privileged",
        forms.SWITCH,
        "let a privileged image (SGLang ranks) be named by tag instead of digest",
        default=False,
    ),
    Variable(
        "serving_remote_code_repos",
        forms.HF_REPOS,
        "the model repos whose code an engine may run: the model (trust_remote_code), a plugin "
        "file of it, a draft model",
        default=[],
    ),
    Variable(
        "serving_gateway_clients",
        forms.CIDRS,
        "who may call the gateway (empty: every pod of the cluster)",
        default=[],
    ),
    Variable(
        "serving_image_archive",
        forms.Form(
            "a path on the control machine to the archive `make image` wrote",
            lambda v: None if isinstance(v, str) and v.strip() else f"is {forms.type_name(v)}",
            example="build/sparkrack-image.tar",
        ),
        "the sparkrack image the serve play imports into every node's containerd; the fetch, "
        "watchdog and memory-guard containers name it by digest unless serving_fetch_image or "
        "serving_watchdog_image name an image of your registry",
        default="",
    ),
    Variable(
        "serving_gateway_node_port",
        forms.Form(
            "a NodePort: a whole number from 30000 to 32767",
            forms.integer_between(30000, 32767),
            example="30400",
        ),
        "opens the gateway (the OpenAI endpoint, key required) on the control-plane node's LAN "
        "address at this port; unset: reachable from the cluster's pods only. Needs "
        "serving_gateway_clients (docs/guide/gateway-lan.md)",
        default=None,
        spec="int",
    ),
    Variable(
        "serving_rdma_access",
        forms.Form(
            f"one of: {', '.join(contract.RDMA_ACCESS)}",
            lambda v: None if v in contract.RDMA_ACCESS else f"is {forms.type_name(v)}",
            example=contract.RDMA_ACCESS[0],
        ),
        "how NCCL ranks reach RDMA: privileged, or an RDMA device plugin with IPC_LOCK only",
        default="privileged",
    ),
    Variable(
        "serving_rdma_resource",
        forms.Form(
            "an extended resource name (domain/name)",
            forms.matching(
                r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", 253
            ),
            example="rdma/hca_shared_devices_a",
        ),
        "the RDMA device plugin's resource each rank asks for (serving_rdma_access: device-plugin)",
        default="rdma/hca_shared_devices_a",
    ),
    Variable(
        "serving_watchdog_image",
        forms.IMAGE,
        "the stall watchdog's image (carries sparkrack), pinned by digest; empty: no watchdog",
        default="",
    ),
    Variable(
        "serving_watchdog_stall_s",
        forms.seconds(1, 600),
        "seconds without a token after which the watchdog calls a deployment stalled",
        default=10,
    ),
    Variable(
        "serving_watchdog_interval_s",
        forms.seconds(1, 3600),
        "seconds between the watchdog's probes of each deployment",
        default=10,
    ),
    Variable(
        "serving_watchdog_max_restarts",
        forms.Form("a whole number from 0 to 100", forms.integer_between(0, 100), example="3"),
        "group restarts allowed per restart window; past them the deployment is marked failed",
        default=3,
    ),
    Variable(
        "serving_watchdog_restart_window_s",
        forms.seconds(60, WEEK_S),
        "the window (seconds) of the watchdog's restart budget",
        default=1800,
    ),
    Variable(
        "serving_watchdog_evidence_dir",
        forms.HOST_DIR,
        "host directory of the evidence bundles on the control-plane node (owned by uid 65532)",
        default="/var/lib/sparkrack/evidence",
    ),
    Variable(
        "serving_prepull", forms.SWITCH, "pre-pull every image before a switch", default=False
    ),
    Variable(
        "serving_prepull_timeout",
        forms.seconds(1, WEEK_S),
        "seconds the pre-pull Jobs may take",
        default=3600,
    ),
    Variable(
        "vault_hf_token",
        SECRET,
        "the HF token for gated models, in an ansible-vault file",
        secret=True,
    ),
    Variable(
        "vault_gateway_key",
        SECRET,
        "the gateway's master key, in an ansible-vault file",
        secret=True,
    ),
    Variable(
        "vault_grafana_admin_password",
        SECRET,
        "Grafana's admin password, in an ansible-vault file (needed when monitoring is on)",
        secret=True,
    ),
    Variable("sparkrack_kubeconfig", forms.NAME_TEXT, "the kubeconfig every role uses"),
    Variable(
        "sparkrack_summary_file",
        CONTROL_FILE,
        "where site.yml's last play writes the per-node summary as JSON on the control machine "
        "(-e; make lab passes it)",
    ),
    Variable(
        "spark_hardware",
        forms.Form(
            "real or simulated",
            lambda v: None if v in ("real", "simulated") else f"is {forms.type_name(v)}",
        ),
        "real on DGX Sparks, simulated in the lab",
        cluster=False,
    ),
    Variable(
        "spark_index",
        forms.Form("a whole number from 1 up (the address plan checks it)", lambda v: None),
        "the Spark's place in the address plan and its rank order",
        cluster=False,
    ),
    Variable(
        "fabric",
        forms.Form("the fabric block (docs/guide/fabric.md)", lambda v: None),
        "the QSFP fabric: the one input of the address plan (sparkrack/fabric/layout.py)",
    ),
    Variable(
        "monitoring",
        forms.Form(
            "the monitoring block: {enabled: true} or {enabled: false}",
            _monitoring,
            example="{enabled: true}",
        ),
        "the optional monitoring stack (playbooks/monitoring.yml; docs/guide/observe.md)",
    ),
    Variable(
        "cluster_addons",
        forms.Form("the add-on options (sparkrack/k8s/options.py)", lambda v: None),
        "options of the cluster add-ons: Multus, NADs, device plugin",
    ),
    Variable(
        "roce_gid_index",
        forms.Form("a GID table index from 0 up", forms.integer_between(0, 255)),
        "a Spark's RoCE GID index override for `sparkrack render` and `check` (the serve play "
        "takes fabric.gid_index only); each rank otherwise reads its own from sysfs at start",
        cluster=False,
    ),
)
"""Every variable sparkrack reads with a form of its own (roles' options are typed by their
argument specs); the rows for issue-specific variables are added here, with their doc."""

BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}
SERVING: tuple[Variable, ...] = tuple(v for v in VARIABLES if v.name.startswith("serving_"))
"""The inventory's ``serving_*`` variables: every one an option of the serving role."""
SETTINGS: tuple[str, ...] = tuple(v.name for v in SERVING if v.setting)
"""The inventory settings a render reads: the serve role passes each one (``serving_settings``
in ``roles/serving/tasks/main.yml``), the CLI reads them from the inventory."""


def serving_defaults(rows: tuple[Variable, ...] = VARIABLES) -> dict[str, Any]:
    """The render's defaults: each setting's default that is a value (not empty, not null)."""
    return {
        v.name: v.default
        for v in rows
        if v.name.startswith("serving_") and v.setting and v.default not in (None, "", [])
    }


SERVING_DEFAULTS: dict[str, Any] = serving_defaults()
"""What a render uses for a setting the inventory leaves unset; the contract fact exports it
(``sparkrack_contract.serving_defaults``) to the roles that read a serving name."""


def contract_fact(home: str | None = None) -> dict[str, Any]:
    """The ``sparkrack_contract`` fact preflight sets: every name of
    :func:`sparkrack.contract.contract_fact`, the render's defaults (the serving role's defaults
    read them) and the names of the settings the serve role passes to the render."""
    return {
        **contract.contract_fact(home),
        "serving_defaults": dict(SERVING_DEFAULTS),
        "serving_settings": list(SETTINGS),
    }


CLOSED_PREFIXES = ("serving_", "sparkrack_")
COMPUTED = {
    "sparkrack_plan": "the address plan the preflight play computes",
    "sparkrack_contract": "the names the preflight play exports",
    "k3s_api_ready": "the fact the k3s_api role publishes once the API answered (playbooks/api.yml)",
}
"""Facts a play sets: an inventory that sets them would replace what sparkrack computes."""
