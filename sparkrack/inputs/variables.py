"""The inventory's schema: every variable sparkrack reads, and the namespaces it closes.

An inventory carries Ansible's own variables (``ansible_*``) and its owner's; those stay open.
These namespaces are sparkrack's, so a name in them that nothing reads is a mistake (a typo
that would be ignored silently) and is refused with the closest known name:

* ``serving_*``: :data:`VARIABLES` and the serving role's options;
* ``sparkrack_*``: only ``sparkrack_kubeconfig`` and ``sparkrack_summary_file`` may be set (the plan and the contract are
  computed by the preflight play; an inventory that sets them would replace them);
* ``<role>_*`` and ``<role>`` for every role in ``roles/``: the options of its
  ``meta/argument_specs.yml``, each checked against its declared type and choices;
* ``fabric`` (its keys: :mod:`sparkrack.fabric.layout`), ``spark_hardware``, ``spark_index``.

Every value sparkrack renders (a :class:`Variable` with a :class:`~.forms.Form`) must be
written as it is, not as a Jinja template: ``sparkrack check`` checks it before a play runs
and never evaluates a template (a lookup would run on the machine that checks). Secrets
(``vault_*``) may be templates, are never shown, and are reported when not encrypted.
Cluster-wide variables must be seen alike by every Spark and by the control machine, where
the serve play runs (``group_vars/all``): a value in ``group_vars/sparks`` only would be
checked here and never read there.

Adding a variable is one :class:`Variable` row; ``docs/reference/inventory.md`` is written from the
table (``python -m sparkrack.inputs.variables``) and a test keeps the two equal.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sparkrack import contract
from sparkrack.errors import Problem, shown
from sparkrack.inputs import forms, safeyaml
from sparkrack.inputs.inventory import Inventory, Where
from sparkrack.k3s.network import HOST_PORTS, NODE_PORT_RANGE
from sparkrack.planner.memory import GB, GB10_MEMORY_GB

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


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "serving_profile",
        forms.NAME_TEXT,
        "the one model: a profile of model_profiles/ (name, path or HF id)",
    ),
    Variable(
        "serving_deployments",
        forms.Form("a list of deployments (docs/guide/several-models.md)", lambda v: None),
        "several models: a list of {name, profile, sparks, vf, topology, alias} (docs/guide/several-models.md)",
    ),
    Variable(
        "serving_profile_file",
        forms.NAME_TEXT,
        "a profile file for one run (-e, sparkrack matrix); replaces the two above",
    ),
    Variable(
        "serving_spark",
        forms.NAME_TEXT,
        "the Spark of a one-Spark engine given by serving_profile (null: the rank-0 Spark)",
    ),
    Variable(
        "serving_namespace", forms.dns_label(), "namespace of every serving object and the NADs"
    ),
    Variable("serving_api_port", forms.PORT, "OpenAI API port of every deployment's head"),
    Variable("serving_dist_port", forms.PORT, "torch.distributed rendezvous port of the head"),
    Variable("serving_hf_cache", forms.HOST_DIR, "the Hugging Face cache on every Spark"),
    Variable("serving_jit_cache", forms.HOST_DIR, "the kernel caches on every Spark, per image"),
    Variable(
        "serving_shm_size",
        forms.memory_size(GB10_MEMORY_GB * GB, f"a Spark's {GB10_MEMORY_GB:g} GB"),
        "/dev/shm of every rank",
    ),
    Variable(
        "serving_hf_token_secret", forms.SUBDOMAIN, "the Secret with the HF token (key token)"
    ),
    Variable(
        "serving_gateway_key_secret",
        forms.SUBDOMAIN,
        "the Secret with the gateway's master key (key key)",
    ),
    Variable("serving_fetch_secret", forms.SUBDOMAIN, "the Secret with the rsync password"),
    Variable("serving_fetch_port", FETCH_PORT, "the receivers' rsync port on the fabric PFs"),
    Variable(
        "serving_fetch_image",
        forms.IMAGE,
        "the weight copy's image (python3 + rsync), pinned by digest",
    ),
    Variable(
        "serving_startup_timeout",
        forms.seconds(1, WEEK_S),
        "startup-probe budget: weight load and graph capture",
    ),
    Variable(
        "serving_liveness_timeout",
        forms.seconds(1, WEEK_S),
        "seconds a stuck group lives before liveness restarts it",
    ),
    Variable(
        "serving_fetch_timeout",
        forms.seconds(1, WEEK_S),
        "seconds the download and copy of one model may take",
    ),
    Variable(
        "serving_memwait_timeout",
        forms.seconds(1, WEEK_S),
        "seconds a rank waits for its memory to be free",
    ),
    Variable(
        "serving_memguard_floor",
        forms.memory_size(GB10_MEMORY_GB * GB, f"a Spark's {GB10_MEMORY_GB:g} GB"),
        "the memory guard stops a Spark's largest engine pod when MemAvailable falls below "
        "this (default: the planner's OS headroom)",
    ),
    Variable(
        "serving_memguard_psi_full",
        forms.Form("a percentage from 1 to 100", forms.integer_between(1, 100), example="10"),
        "the memory guard also acts when memory PSI full avg10 reaches this percentage",
    ),
    Variable(
        "serving_rail_mbit_s",
        MBIT_S,
        "what the weight copy reaches on one fabric rail (sparkrack plan -i's switch estimate)",
    ),
    Variable(
        "serving_download_mbit_s",
        MBIT_S,
        "what the head Spark downloads from the Hub at (sparkrack plan -i's switch estimate)",
    ),
    Variable(
        "serving_disk_mbyte_s",
        MBYTE_S,
        "what a Spark's disk reads and writes the weights at (sparkrack plan -i's switch estimate)",
    ),
    Variable(
        "serving_trusted_images",
        forms.IMAGE_PREFIXES,
        "image repository prefixes a profile may name (docs/design/trust.md)",
    ),
    Variable(
        "serving_allow_undigested_privileged",
        forms.SWITCH,
        "let a privileged image (SGLang ranks) be named by tag instead of digest",
    ),
    Variable(
        "serving_remote_code_repos",
        forms.HF_REPOS,
        "the model repos whose code an engine may run: the model (trust_remote_code), a plugin file of it, a draft model",
    ),
    Variable(
        "serving_gateway_clients",
        forms.CIDRS,
        "who may call the gateway (empty: every pod of the cluster)",
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
        "serving_gateway_clients (docs/gateway-lan.md)",
    ),
    Variable(
        "serving_rdma_access",
        forms.Form(
            f"one of: {', '.join(contract.RDMA_ACCESS)}",
            lambda v: None if v in contract.RDMA_ACCESS else f"is {forms.type_name(v)}",
            example=contract.RDMA_ACCESS[0],
        ),
        "how NCCL ranks reach RDMA: privileged, or an RDMA device plugin with IPC_LOCK only",
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
    ),
    Variable(
        "serving_watchdog_image",
        forms.IMAGE,
        "the stall watchdog's image (carries sparkrack), pinned by digest; empty: no watchdog",
    ),
    Variable(
        "serving_watchdog_stall_s",
        forms.seconds(1, 600),
        "seconds without a token after which the watchdog calls a deployment stalled",
    ),
    Variable(
        "serving_watchdog_interval_s",
        forms.seconds(1, 3600),
        "seconds between the watchdog's probes of each deployment",
    ),
    Variable(
        "serving_watchdog_max_restarts",
        forms.Form("a whole number from 0 to 100", forms.integer_between(0, 100), example="3"),
        "group restarts allowed per restart window; past them the deployment is marked failed",
    ),
    Variable(
        "serving_watchdog_restart_window_s",
        forms.seconds(60, WEEK_S),
        "the window (seconds) of the watchdog's restart budget",
    ),
    Variable(
        "serving_watchdog_evidence_dir",
        forms.HOST_DIR,
        "host directory of the evidence bundles on the control-plane node (owned by uid 65532)",
    ),
    Variable("serving_prepull", forms.SWITCH, "pre-pull every image before a switch"),
    Variable(
        "serving_prepull_timeout", forms.seconds(1, WEEK_S), "seconds the pre-pull Jobs may take"
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
CLOSED_PREFIXES = ("serving_", "sparkrack_")
COMPUTED = {
    "sparkrack_plan": "the address plan the preflight play computes",
    "sparkrack_contract": "the names the preflight play exports",
    "k3s_api_ready": "the fact the k3s_api role publishes once the API answered (playbooks/api.yml)",
}
"""Facts a play sets: an inventory that sets them would replace what sparkrack computes."""


# --- the roles' options ----------------------------------------------------------------------


@dataclass(frozen=True)
class RoleOption:
    role: str
    name: str
    type: str
    choices: tuple[Any, ...] = ()
    elements: str = ""
    description: str = ""


def _roles_dir() -> Path:
    beside = Path(__file__).resolve().parents[2] / "roles"
    return beside if beside.is_dir() else Path.cwd() / "roles"


@cache
def role_options(roles: Path | None = None) -> dict[str, dict[str, RoleOption]]:
    """role -> option -> its spec, from every ``roles/*/meta/argument_specs.yml``."""
    out: dict[str, dict[str, RoleOption]] = {}
    for spec in sorted((roles or _roles_dir()).glob("*/meta/argument_specs.yml")):
        role = spec.parent.parent.name
        data = safeyaml.load_file(spec) or {}
        options: dict[str, RoleOption] = {}
        for entry in (data.get("argument_specs") or {}).values():
            for name, opt in (entry.get("options") or {}).items():
                if not (name == role or str(name).startswith(f"{role}_")):
                    continue  # another owner's input the role reads (spark_hardware, the plan)
                options[str(name)] = RoleOption(
                    role,
                    str(name),
                    str(opt.get("type", "raw")),
                    tuple(opt.get("choices") or ()),
                    str(opt.get("elements", "")),
                    " ".join(str(opt.get("description", "")).split()),
                )
        out[role] = options
    return out


SPEC_TYPES: dict[str, tuple[type, ...]] = {  # an argument spec's type -> the Python types
    "str": (str,),
    "path": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "list": (list,),
    "dict": (dict,),
}
_SPEC_WORDS = {"str": "string", "path": "string", "int": "integer", "float": "number"}
_SPEC_WORDS.update({"bool": "boolean", "list": "array", "dict": "object"})


def option_problem(option: RoleOption, value: Any) -> tuple[str, str] | None:
    """(message, fix) when ``value`` does not fit the role option's type and choices."""
    if is_template(value) or option.type == "raw":
        return None
    types = SPEC_TYPES.get(option.type)
    ok = types is None or (isinstance(value, types) and not _bool_as_number(value, option.type))
    if option.type == "bool" and isinstance(value, str):
        ok = value.strip().lower() in forms.SWITCH_WORDS
    if option.type in ("int", "float") and isinstance(value, str):
        ok = value.isdigit()
    if not ok:
        wanted = _SPEC_WORDS.get(option.type, option.type)
        return (
            f"is {forms.type_name(value)}, not {forms.TYPE_WORDS[wanted]}",
            forms.yaml_hint(value, wanted),
        )
    if option.choices and value not in option.choices:
        choices = ", ".join(map(str, option.choices))
        return f"{shown(value)} is not one of {choices}", f"use one of: {choices}"
    return None


def _bool_as_number(value: Any, kind: str) -> bool:
    return kind in ("int", "float") and isinstance(value, bool)


def is_template(value: Any) -> bool:
    """A Jinja expression anywhere in ``value``."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(is_template(k) or is_template(v) for k, v in value.items())
    if isinstance(value, list):
        return any(is_template(v) for v in value)
    return False


# --- the check -------------------------------------------------------------------------------


@dataclass
class Findings:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


def known_names() -> dict[str, str]:
    """Every name of a closed namespace that sparkrack or a role reads -> what it is."""
    names = {v.name: v.doc for v in VARIABLES}
    for options in role_options().values():
        for name, opt in options.items():
            names.setdefault(name, opt.description or f"an option of the {opt.role} role")
    return names


def closed(name: str) -> bool:
    """``name`` is in one of sparkrack's namespaces (module docstring)."""
    if name in BY_NAME or name in COMPUTED or name.startswith(CLOSED_PREFIXES):
        return True
    return any(name == role or name.startswith(f"{role}_") for role in role_options())


def _option(name: str) -> RoleOption | None:
    for options in role_options().values():
        if name in options:
            return options[name]
    return None


def _files(inv: Inventory, name: str) -> Iterator[tuple[str, Any, Where | None]]:
    """(host, value, where) of variable ``name`` for every host that has it, one per place it
    was written (a group_vars value seen by every host is checked once)."""
    seen: set[tuple[str, int]] = set()
    for host, variables in inv.hostvars.items():
        if name not in variables:
            continue
        where = inv.origins.get(host, {}).get(name)
        spot = (where.file, where.line) if where else ("", 0)
        if spot in seen:
            continue
        seen.add(spot)
        yield host, variables[name], where


def check_variables(inv: Inventory, control: Mapping[str, Any] | None = None) -> Findings:
    """Every closed variable of ``inv`` against its form (module docstring); ``control``: the
    variables the control machine sees (default: the inventory's ``localhost``), compared for
    cluster-wide ones."""
    control = inv.control_vars if control is None else control
    found = Findings()
    known = known_names()
    names = sorted({n for variables in inv.hostvars.values() for n in variables})
    for name in names:
        if not closed(name):
            continue
        for host, value, where in _files(inv, name):
            file = where.file if where else str(inv.path)
            found.problems += _one(name, value, file, host, known)
            found.problems += _surprises(inv, name, host)
            if name in BY_NAME and BY_NAME[name].secret:
                found.warnings += _plaintext(inv, name, file, host, value)
    found.problems += _cluster_wide(inv, control)
    found.warnings += runs_code(inv)
    return found


RULE_CODE = "inventory-runs-code"
_SSH_ARGS = (
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_ssh_args",
    "ansible_sftp_extra_args",
    "ansible_scp_extra_args",
)
_EXECUTABLES = ("ansible_shell_executable", "ansible_become_exe", "ansible_become_flags")
_LOOKUP = re.compile(r"\b(lookup|query|q)\s*\(|\bpipe\b")


def runs_code(inv: Inventory) -> list[Problem]:
    """What in the inventory makes ansible-playbook run commands on the control machine (or
    as another program): reported, never run here, so that an inventory from someone else is
    read before a play acts on it. ``check`` evaluates none of it."""
    out: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for host, variables in inv.hostvars.items():
        for name, value in variables.items():
            why = _code_in(name, value, host)
            if why is None:
                continue
            file = inv.source(name, host)
            if (file, name) in seen:
                continue
            seen.add((file, name))
            out.append(
                Problem(
                    file,
                    name,
                    f"{why}: ansible-playbook runs it on this machine when a play uses it",
                    "read it before running a play; remove it unless you wrote it",
                    RULE_CODE,
                )
            )
    return out


def _code_in(name: str, value: Any, host: str) -> str | None:
    text = value if isinstance(value, str) else ""
    if name in _SSH_ARGS and re.search(r"(?i)(proxycommand|localcommand|permitlocalcommand)", text):
        return "an SSH option that runs a local command"
    if name == "ansible_connection" and text == "local" and host != "localhost":
        return f"runs {host}'s tasks on the control machine itself"
    if name in _EXECUTABLES and text:
        return "replaces the program Ansible runs"
    if (
        name.startswith("ansible_")
        and name.endswith("_interpreter")
        and re.search(r"[\s;|&`$]", text)
    ):
        return "an interpreter given as a shell command"
    if is_template(value) and _LOOKUP.search(str(value)):
        return "a template with a lookup"
    return None


def _one(name: str, value: Any, file: str, host: str, known: Mapping[str, str]) -> list[Problem]:
    if name in COMPUTED:
        return [
            Problem(
                file,
                name,
                f"is {COMPUTED[name]}; an inventory may not set it",
                "remove it",
                RULE,
            )
        ]
    variable = BY_NAME.get(name)
    option = _option(name)
    if variable is None and option is None:
        return [
            Problem(
                file, name, "is not a variable sparkrack or its roles read", _fix(name, known), RULE
            )
        ]
    if variable is not None:
        if value in (None, "") and not variable.secret:
            return []  # null or empty: the default (what needs a value says so where it is used)
        if is_template(value):
            if variable.secret:
                return []
            return [
                Problem(
                    file,
                    name,
                    "is a Jinja template: sparkrack checks this value before a play runs and "
                    "never evaluates templates",
                    "write the value itself",
                    RULE,
                )
            ]
        wrong = variable.form.problem(value)
        if wrong:
            message = "is not a valid secret: it " + wrong if variable.secret else wrong
            return [Problem(file, name, message, variable.form.fix, RULE)]
        return []
    assert option is not None
    wrong_option = option_problem(option, value)
    if wrong_option:
        message, fix = wrong_option
        return [Problem(file, name, f"{message} ({option.role} role)", fix, RULE)]
    return []


def _fix(name: str, known: Mapping[str, str]) -> str:
    fix = forms.unknown_key_fix(name, list(known))
    if fix.startswith("did you mean"):
        return fix
    return "remove it, or see docs/reference/inventory.md for the variables sparkrack reads"


def _surprises(inv: Inventory, name: str, host: str) -> list[Problem]:
    out = []
    secret = name in BY_NAME and BY_NAME[name].secret
    for key, surprise in inv.surprises(name, host):
        if secret:  # never shown, not even the digits YAML read
            out.append(
                Problem(
                    inv.source(name, host),
                    key,
                    f"is written unquoted (line {surprise.line}) and YAML reads it as "
                    f"{surprise.what}, not as the secret's text",
                    "quote it",
                    RULE_YAML,
                )
            )
            continue
        value = inv.var(name, host=host)
        for part in key.split(".")[1:]:
            value = value[int(part)] if isinstance(value, list) else value.get(part)
        out.append(
            Problem(
                inv.source(name, host),
                key,
                f"is written {surprise.text} (line {surprise.line}), which YAML reads as "
                f"{forms.type_name(value)}",
                f'quote it ("{surprise.text}") if it is text, or write the value YAML should '
                "not guess",
                RULE_YAML,
            )
        )
    return out


def _plaintext(inv: Inventory, name: str, file: str, host: str, value: Any) -> list[Problem]:
    if file in inv.files.vault_files or (file, name) in inv.files.vault_values:
        return []
    if value is None or is_template(value):
        return []
    return [
        Problem(
            file,
            name,
            "is written in plain text: anyone who can read the inventory has it",
            f"move it to an ansible-vault encrypted file (ansible-vault encrypt {file})",
            RULE_SECRET,
        )
    ]


def _cluster_wide(inv: Inventory, control: Mapping[str, Any] | None) -> list[Problem]:
    """Cluster-wide variables seen alike by every Spark and by the control machine."""
    out = []
    for variable in VARIABLES:
        if not variable.cluster:
            continue
        seen = {h: v[variable.name] for h, v in inv.hostvars.items() if variable.name in v}
        if not seen:
            continue
        first_host = inv.holder(variable.name) or next(iter(seen))
        first = seen.get(first_host)
        for host in inv.sparks:
            if host in seen and seen[host] != first:
                out.append(
                    Problem(
                        inv.source(variable.name, host),
                        f"{host}.{variable.name}",
                        f"differs from {first_host}'s: sparkrack reads it once for the cluster",
                        "set it once, in group_vars/all",
                        RULE,
                    )
                )
        if control is not None and first is not None and control.get(variable.name) != first:
            out.append(
                Problem(
                    inv.source(variable.name),
                    variable.name,
                    "is not what the control machine sees, where the serve play and preflight "
                    "run: it is set for some hosts only",
                    "set it in group_vars/all (or the all group's vars)",
                    RULE,
                )
            )
    return out


# --- docs/reference/inventory.md -----------------------------------------------------------------------


def doc_text() -> str:
    lines = [
        "# Inventory variables sparkrack reads",
        "",
        "Written by `python -m sparkrack.inputs.variables` from `sparkrack/inputs/variables.py`",
        "(a test keeps them equal). `sparkrack check -i INV` refuses a value outside its form,",
        "and an unknown name in a closed namespace: `serving_*`, `sparkrack_*`, `fabric`,",
        "`spark_hardware`/`spark_index`, and every role's `<role>_*` (typed by its",
        "`meta/argument_specs.yml`). Everything else (`ansible_*`, your own) stays yours.",
        "",
        "| variable | accepted form | default | what it does |",
        "|---|---|---|---|",
    ]
    for v in VARIABLES:
        default = contract.SERVING_DEFAULTS.get(v.name)
        shown_default = (
            ""
            if default is None
            else f"`{str(default).lower() if isinstance(default, bool) else default}`"
        )
        lines.append(f"| `{v.name}` | {v.form.words} | {shown_default} | {v.doc} |")
    lines += ["", "Role options (their type from the role's argument spec):", ""]
    for role, options in sorted(role_options().items()):
        names = ", ".join(f"`{n}`" for n in sorted(options))
        lines.append(f"- `{role}`: {names}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(doc_text())
