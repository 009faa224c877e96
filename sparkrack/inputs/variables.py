"""The inventory's schema: every variable sparkrack reads, and the namespaces it closes.

An inventory carries Ansible's own variables (``ansible_*``) and its owner's; those stay open.
These namespaces are sparkrack's, so a name in them that nothing reads is a mistake (a typo
that would be ignored silently) and is refused with the closest known name:

* ``serving_*``: :data:`~.variable_table.VARIABLES` and the serving role's options;
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

Adding a variable is one :class:`~.variable_table.Variable` row
(:mod:`sparkrack.inputs.variable_table`); ``docs/reference/inventory.md`` is written from the
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

from sparkrack.errors import Problem, shown
from sparkrack.inputs import forms, safeyaml
from sparkrack.inputs.inventory import Inventory, Where
from sparkrack.inputs.variable_table import (
    BY_NAME,
    CLOSED_PREFIXES,
    COMPUTED,
    RULE,
    RULE_SECRET,
    RULE_YAML,
    SERVING_DEFAULTS,
    VARIABLES,
)

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


CONTROL_HOST = "localhost"
"""The control machine, where the serve play and preflight's local plays run."""


def views(inv: Inventory) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Where]]]:
    """(host, its variables, where each was written) for every host of ``inv`` and for the
    control machine: ansible-core gives the implicit ``localhost`` ``group_vars/all`` and
    ``host_vars/localhost``, so a value written only there is read by the serve play too."""
    yield from ((h, v, inv.origins.get(h, {})) for h, v in inv.hostvars.items())
    if inv.control_vars is not None and CONTROL_HOST not in inv.hostvars:
        yield CONTROL_HOST, inv.control_vars, inv.control_origins


def _files(inv: Inventory, name: str) -> Iterator[tuple[str, Any, Where | None]]:
    """(host, value, where) of variable ``name`` for every host that has it, the control
    machine included, one per place it was written (a group_vars value seen by every host is
    checked once)."""
    seen: set[tuple[str, int]] = set()
    for host, variables, origins in views(inv):
        if name not in variables:
            continue
        where = origins.get(name)
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
    names = sorted({n for _, variables, _ in views(inv) for n in variables})
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
    for host, variables, origins in views(inv):
        for name, value in variables.items():
            why = _code_in(name, value, host)
            if why is None:
                continue
            where = origins.get(name)
            file = where.file if where else str(inv.path)
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
            if control is not None and control.get(variable.name) is not None:
                out.append(_control_only(inv, variable.name))
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
            where = inv.control_origins.get(variable.name)
            out.append(
                Problem(
                    where.file if where else inv.source(variable.name),
                    variable.name,
                    "is not what the control machine sees, where the serve play and preflight "
                    "run: it is set for some hosts only",
                    "set it in group_vars/all (or the all group's vars)",
                    RULE,
                )
            )
    return out


def _control_only(inv: Inventory, name: str) -> Problem:
    where = inv.control_origins.get(name)
    return Problem(
        where.file if where else str(inv.path),
        name,
        f"is set for the control machine ({CONTROL_HOST}) only: the serve play reads it there "
        "while the Sparks' roles and the checks of the other hosts take the default",
        "set it in group_vars/all (or the all group's vars) and remove it from "
        f"host_vars/{CONTROL_HOST}",
        RULE,
    )


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
        default = SERVING_DEFAULTS.get(v.name)
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
