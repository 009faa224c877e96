"""Read an Ansible inventory directory the way ansible-playbook does, after checking its files.

The CLI (``sparkrack check -i DIR``) must see the same variables as the playbooks, so the
variables come from ansible-core's own InventoryManager/VariableManager and its vault, never
from YAML parsed by hand. An inventory may come from a stranger, so before ansible-core reads a
byte every file it would read is checked the way profiles are (:func:`scan_files`): its size,
encoding, nesting, aliases and duplicate keys (:mod:`sparkrack.inputs.safeyaml`), host ranges
that would expand to thousands of hosts, files that are not regular files, and vault-encrypted
content without a password. Only ansible-core's ``yaml`` and ``ini`` inventory plugins run:
an executable file or a ``plugin:`` file in the directory is never run or contacted.

Every value keeps where it was written (:class:`Where`: the file and line ansible-core's
origin tags record), so a refusal names the ``group_vars``/``host_vars`` file the value came
from; and what YAML 1.1 converted without saying so (``010`` is 8) is kept per file
(:meth:`Inventory.surprises`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import ipaddress
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrack.errors import Problem, SparkrackError, UsageError, printable
from sparkrack.fabric.addressplan import FabricPlan, in_fabric, nodes_from_hostvars, rail_subnets
from sparkrack.fabric.layout import compute_plan
from sparkrack.inputs import safeyaml

SPARK_GROUP = "sparks"
CONTROL_PLANE_GROUP = "control_plane"
HARDWARE = ("real", "simulated")
ADDRESS_VARS = ("ansible_host", "k3s_node_ip", "mgmt_ip")
"""Host variables that carry a host's management address."""
VAULT_HEADER = b"$ANSIBLE_VAULT;"
VAULT_ENV = "ANSIBLE_VAULT_PASSWORD_FILE"
ANSIBLE_TAGS = frozenset({"!vault", "!unsafe", "!vault-encrypted"})
"""YAML tags ansible-core reads in inventory files (``!vault`` values are decrypted lazily)."""
VARS_DIRS = ("group_vars", "host_vars")
YAML_SUFFIXES = (".yml", ".yaml", ".json")
IGNORED_SUFFIXES = (".orig", ".ini~", ".bak", ".cfg", ".retry", ".pyc", ".pyo", ".md", ".rst")
MAX_FILES = 256
"""Files an inventory directory may hold (a cluster's needs a handful)."""
MAX_DEPTH = 8
MAX_HOSTS = 256
"""Hosts an inventory may define, host ranges expanded (sparkrack's plan numbers at most 255)."""
RULE = "inventory"
RULE_VAULT = "inventory-vault"
RULE_GROUPS = "inventory-groups"
RULE_LAYOUT = "inventory-layout"
_RANGE = re.compile(r"\[([0-9]+|[a-z]):([0-9]+|[a-z])(?::([0-9]+))?\]")


@dataclass(frozen=True)
class Where:
    """Where a value was written: a file and the line of its key (0 when unknown)."""

    file: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass
class Files:
    """What :func:`scan_files` found: each YAML file's scan and the vault-encrypted content."""

    scans: dict[str, safeyaml.Scan] = field(default_factory=dict)
    vault_files: list[str] = field(default_factory=list)
    """Whole files encrypted with ansible-vault."""
    vault_values: list[tuple[str, str]] = field(default_factory=list)
    """(file, dotted key) of every ``!vault`` value."""


def group_problems(
    groups: Mapping[str, Sequence[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    source: str = "inventory",
) -> list[Problem]:
    """What the inventory's groups must satisfy before a plan is computed (preflight and
    ``sparkrack addresses`` both ask): Sparks, exactly one control plane that is not also a
    Spark, ``spark_hardware``, and no control-plane address inside ``fabric.subnet``."""
    problems: list[Problem] = []
    sparks = list(groups.get(SPARK_GROUP) or [])
    control = list(groups.get(CONTROL_PLANE_GROUP) or [])
    if not sparks:
        problems.append(
            Problem(
                source,
                SPARK_GROUP,
                "the inventory has no 'sparks' group or it is empty",
                "list the DGX Sparks under 'sparks' (see inventories/example/hosts.yml)",
            )
        )
    if len(control) != 1:
        problems.append(
            Problem(
                source,
                CONTROL_PLANE_GROUP,
                f"has {len(control)} host(s) ({', '.join(control) or 'none'}); exactly one is needed",
                "put the one x86 K3s server under 'control_plane' (see inventories/example/hosts.yml)",
            )
        )
    for host in sorted(set(control) & set(sparks)):
        problems.append(
            Problem(
                source,
                f"{SPARK_GROUP}.{host}",
                f"{host} is the control plane and is listed as a Spark too: the x86 K3s server "
                "has no GB10 and no fabric port",
                f"remove {host} from the 'sparks' group",
            )
        )
    for host in sparks + [h for h in control if h not in sparks]:
        hardware = hostvars.get(host, {}).get("spark_hardware")
        if hardware not in HARDWARE:
            problems.append(
                Problem(
                    source,
                    f"{host}.spark_hardware",
                    f"is {hardware!r}, not one of {', '.join(HARDWARE)}",
                    "set spark_hardware: real (DGX Sparks) or simulated (the lab) in group_vars",
                )
            )
    fabric = next((hostvars.get(h, {}).get("fabric") for h in sparks + control), None)
    subnet_raw = fabric.get("subnet") if isinstance(fabric, Mapping) else None
    rails = fabric.get("rails") if isinstance(fabric, Mapping) else None
    try:
        nets = rail_subnets(
            ipaddress.IPv4Network(str(subnet_raw)),
            len(rails) if isinstance(rails, list) and rails else 1,
        )
    except ValueError:
        nets = []  # compute_plan names a bad subnet or too many rails
    for host in control if subnet_raw else []:
        for var in ADDRESS_VARS:
            address = str(hostvars.get(host, {}).get(var))
            # A DNS name or unset is nothing to compare.
            inside = in_fabric(address, nets)
            if inside is not None:
                problems.append(
                    Problem(
                        source,
                        f"{host}.{var}",
                        f"control-plane address {address} lies inside the fabric subnet {inside}",
                        "reach the control plane over the management network; the QSFP fabric "
                        "links the Sparks only",
                    )
                )
    return [dataclasses.replace(p, rule=RULE_GROUPS) for p in problems]


@dataclass(frozen=True)
class Inventory:
    path: Path
    groups: dict[str, list[str]]
    hostvars: dict[str, dict[str, Any]]
    origins: dict[str, dict[str, Where]] = field(default_factory=dict)
    """host -> dotted key -> where that key was written (variables ansible-core set: absent)."""
    files: Files = field(default_factory=Files)
    control_vars: dict[str, Any] | None = None
    """The variables the control machine (``localhost``) sees: the serve play's view."""
    control_origins: dict[str, Where] = field(default_factory=dict)  # as origins, for localhost

    @property
    def sparks(self) -> list[str]:
        return list(self.groups.get(SPARK_GROUP, []))

    @property
    def control_plane(self) -> list[str]:
        return list(self.groups.get(CONTROL_PLANE_GROUP, []))

    def holder(self, name: str, host: str | None = None) -> str | None:
        """The host whose value of ``name`` :meth:`var` returns."""
        hosts = [host] if host else self.sparks or list(self.hostvars)
        for h in hosts:
            if name in self.hostvars.get(h, {}):
                return h
        return None

    def var(self, name: str, default: Any = None, host: str | None = None) -> Any:
        """A variable as a Spark (or ``host``) sees it; group_vars/all apply to every host."""
        holder = self.holder(name, host)
        return default if holder is None else self.hostvars[holder][name]

    def where(self, key: str, host: str | None = None) -> Where | None:
        """Where the dotted ``key`` (``fabric.subnet``) that :meth:`var` reads was written."""
        holder = self.holder(key.split(".", 1)[0], host)
        return None if holder is None else self.origins.get(holder, {}).get(key)

    def source(self, key: str, host: str | None = None) -> str:
        """The file a refusal of ``key`` names: where it was written, else the inventory."""
        found = self.where(key, host) or self.where(key.split(".", 1)[0], host)
        return found.file if found else str(self.path)

    def surprises(
        self, name: str, host: str | None = None
    ) -> Iterator[tuple[str, safeyaml.Surprise]]:
        """(dotted key, surprise) for every value under variable ``name`` that YAML 1.1
        converted silently, in the file the variable came from."""
        where = self.where(name, host)
        scan = self.files.scans.get(where.file) if where else None
        if where is None or scan is None:
            return
        for surprise in scan.under((where.line, where.column)):
            yield (f"{name}.{surprise.path}" if surprise.path else name), surprise

    def plan(self) -> FabricPlan:
        """The address plan, after the same group checks preflight makes (all problems at once)."""
        problems = group_problems(self.groups, self.hostvars, str(self.path))
        try:
            plan = self._plan()
        except SparkrackError as exc:
            raise SparkrackError(self._host_files(problems + list(exc.problems))) from None
        if problems:
            raise SparkrackError(self._host_files(problems))
        return plan

    def _host_files(self, problems: list[Problem]) -> list[Problem]:
        """A problem keyed ``<host>.<variable>`` names the file that variable was written in
        (``node_ip`` is whichever address variable the host sets)."""
        out = []
        for p in problems:
            host, _, name = p.key.partition(".")
            if host in self.hostvars and name:
                if name == "node_ip":
                    name = next((v for v in ADDRESS_VARS if self.where(v, host)), name)
                if self.where(name, host):
                    p = dataclasses.replace(p, file=self.source(name, host))
            out.append(p)
        return out

    def _plan(self) -> FabricPlan:
        fabric = self.var("fabric")
        if fabric is None:
            raise SparkrackError(
                Problem(
                    str(self.path),
                    "fabric",
                    "is not set",
                    "define the fabric block in group_vars/all.yml",
                )
            )
        return compute_plan(
            fabric,
            nodes_from_hostvars(self.sparks, self.hostvars),
            source=self.source("fabric"),
        )


# --- the files, before ansible-core reads them ----------------------------------------------


def _problem(path: Path | str, key: str, message: str, fix: str, rule: str = RULE) -> Problem:
    return Problem(str(path), key, message, fix, rule)


def _candidates(root: Path) -> Iterator[Path]:
    """Every file ansible-core may read for inventory ``root`` (a file or a directory)."""
    if not root.is_dir():
        yield root
        return
    # Symlinked folders are followed as ansible-core follows them (molecule links group_vars);
    # MAX_DEPTH and MAX_FILES bound a link cycle.
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        here = Path(dirpath)
        depth = len(here.relative_to(root).parts)
        if depth >= MAX_DEPTH:
            raise SparkrackError(
                _problem(here, "(inventory)", "is nested too deep", "flatten the inventory")
            )
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith(".") and not name.endswith(("~", *IGNORED_SUFFIXES)):
                yield here / name


def _in_vars_dir(root: Path, path: Path) -> bool:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False
    return bool(parts) and parts[0] in VARS_DIRS


def _read(path: Path) -> bytes:
    """The bytes of a regular file (a FIFO or a device would block or never end)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise SparkrackError(
            _problem(path, "(file)", f"cannot be read: {exc.strerror}", "check the path")
        ) from None
    if not stat.S_ISREG(mode):
        raise SparkrackError(
            _problem(path, "(file)", "is not a regular file", "remove it from the inventory")
        )
    with open(path, "rb") as handle:
        return handle.read(safeyaml.DEFAULT_LIMITS.max_bytes + 1)


def _host_ranges(text: str, path: Path) -> int:
    """Hosts the ``name[1:9]`` patterns of a hosts file expand to."""
    total = 0
    for line in text.splitlines():
        count = 1
        for found in _RANGE.finditer(line):
            start, end, step = found.group(1), found.group(2), int(found.group(3) or 1)
            if start.isdigit() != end.isdigit() or step < 1:
                continue
            low, high = (int(start), int(end)) if start.isdigit() else (ord(start), ord(end))
            count *= max(0, (high - low) // step + 1)
        if count > 1:
            total += count
            if total > MAX_HOSTS:
                raise SparkrackError(
                    _problem(
                        path,
                        "(hosts)",
                        f"its host ranges expand to more than {MAX_HOSTS} hosts",
                        "list the hosts of the cluster (one control plane and the Sparks)",
                    )
                )
    return total


def shadowed_files(root: Path) -> list[Problem]:
    """Variable files ansible-core never reads because another path of the same group or host
    comes first: for a name it takes the first of ``name`` (a folder, read whole), ``name.yml``,
    ``name.yaml``, ``name.json`` that exists and ignores the rest, without a word. The usual
    trap: ``group_vars/all/vault.yml`` created next to ``group_vars/all.yml`` hides all.yml."""
    problems = []
    for vars_dir in VARS_DIRS:
        folder = root / vars_dir
        if not folder.is_dir():
            continue
        names = {
            p.name.removesuffix(p.suffix) if p.suffix in YAML_SUFFIXES else p.name
            for p in folder.iterdir()
        }
        for name in sorted(names):
            present = [folder / (name + ext) for ext in ("", *YAML_SUFFIXES)]
            present = [p for p in present if p.exists()]
            if len(present) < 2:
                continue
            read, ignored = present[0], present[1:]
            for path in ignored:
                if read.is_dir():
                    fix = (
                        f"move {path.name} into {read.name}/ (e.g. {read.name}/main.yml) and keep "
                        f"only the folder: Ansible reads every file in {vars_dir}/{read.name}/"
                    )
                else:
                    fix = f"merge {path.name} into {read.name} and delete {path.name}"
                problems.append(
                    _problem(
                        path,
                        "(layout)",
                        f"is never read: Ansible reads {vars_dir}/{read.name}"
                        f"{'/' if read.is_dir() else ''} for {name} and ignores {path.name}, so "
                        "every variable in it is missing",
                        fix,
                        RULE_LAYOUT,
                    )
                )
    return problems


def scan_files(root: Path, vault: Any = None) -> Files:
    """Check every file of inventory ``root`` before ansible-core reads it (module docstring);
    ``vault`` (ansible-core's ``VaultLib`` with the password) opens encrypted files, so their
    content is checked too. Raises :class:`SparkrackError` with every problem found."""
    found = Files()
    problems: list[Problem] = shadowed_files(root)
    paths: list[Path] = []
    for path in _candidates(root):
        paths.append(path)
        if len(paths) > MAX_FILES:  # stops a folder of links to itself early, too
            raise SparkrackError(
                _problem(
                    root, "(inventory)", f"holds more than {MAX_FILES} files", "check the path"
                )
            )
    for path in paths:
        try:
            data = _read(path)
            if data.lstrip().startswith(VAULT_HEADER):
                found.vault_files.append(str(path))
                if vault is None:
                    continue
                data = _decrypt(vault, data, path)
            text = safeyaml.decode(data, str(path))
            if len(data) > safeyaml.DEFAULT_LIMITS.max_bytes:
                raise SparkrackError(
                    _problem(
                        path, "(yaml)", "is larger than 512 KiB", "check the path", "yaml-size"
                    )
                )
            if not _in_vars_dir(root, path):
                _host_ranges(text, path)
            if path.suffix in YAML_SUFFIXES or (_in_vars_dir(root, path) and not path.suffix):
                scan = safeyaml.scan(text, str(path), tags=ANSIBLE_TAGS)
                found.scans[str(path)] = scan
                found.vault_values += [(str(path), t.path) for t in scan.tagged]
        except SparkrackError as exc:
            problems += exc.problems
    if problems:
        raise SparkrackError(problems)
    return found


def _decrypt(vault: Any, data: bytes, path: Path) -> bytes:
    from ansible.errors import AnsibleError

    try:
        plain: bytes = vault.decrypt(data)
    except AnsibleError:
        raise SparkrackError(
            _problem(
                path,
                "(vault)",
                "cannot be decrypted with the vault password given",
                f"give the password this file was encrypted with ({VAULT_ENV} or "
                "--vault-password-file)",
                RULE_VAULT,
            )
        ) from None
    return plain


def vault_problems(files: Files) -> list[Problem]:
    """Encrypted content and no password to open it: one refusal per file."""
    fix = (
        f"give the vault password: --vault-password-file FILE, or {VAULT_ENV}=FILE in the "
        "environment (the file holds the password)"
    )
    problems = [
        _problem(f, "(vault)", "is ansible-vault encrypted and no vault password was given", fix)
        for f in files.vault_files
    ]
    for file, key in files.vault_values:
        problems.append(
            _problem(file, key, "is an ansible-vault value and no vault password was given", fix)
        )
    return [
        Problem(p.file, p.key, p.message, p.fix, RULE_VAULT)
        for p in sorted(problems, key=lambda p: (p.file, p.key))
    ]


def password_file(given: str | None = None) -> str | None:
    """The vault password file: ``given`` (``--vault-password-file``), else
    ``ANSIBLE_VAULT_PASSWORD_FILE``, else ansible.cfg's ``vault_password_file``."""
    if given:
        return given
    if os.environ.get(VAULT_ENV):
        return os.environ[VAULT_ENV]
    from ansible import constants as C

    configured = getattr(C, "DEFAULT_VAULT_PASSWORD_FILE", None)
    return str(configured) if configured else None


def _vault(loader: Any, given: str | None) -> Any:
    """ansible-core's vault with the password from :func:`password_file` (None: no password)."""
    from ansible.cli import CLI
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import VaultLib

    path = password_file(given)
    if path is None:
        return None
    if not Path(path).is_file():
        raise UsageError(
            _problem(
                path,
                "vault password file",
                "does not exist",
                "name the file that holds the vault password",
                RULE_VAULT,
            )
        )
    try:
        # Not the process-wide vault context ansible-playbook sets once: each load has its own.
        secrets = CLI.setup_vault_secrets(
            loader,
            vault_ids=[],
            vault_password_files=[path],
            auto_prompt=False,
            initialize_context=False,
        )
    except AnsibleError as exc:
        raise SparkrackError(
            _problem(
                path,
                "vault password file",
                f"cannot be used: {first_line(exc)}",
                "make it a file holding the password (or a script printing it)",
                RULE_VAULT,
            )
        ) from None
    loader.set_vault_secrets(secrets)
    return VaultLib(secrets)


def first_line(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return printable(str(message).strip().splitlines()[0] if str(message).strip() else repr(exc))


# --- ansible-core reads the inventory --------------------------------------------------------


def load_inventory(path: str | Path, vault_password_file: str | None = None) -> Inventory:
    """The inventory at ``path`` as ansible-playbook sees it, after :func:`scan_files`.

    The vault password comes from ``vault_password_file``, else :data:`VAULT_ENV`; encrypted
    content without one is refused naming its file (:func:`vault_problems`)."""
    from ansible import constants as C
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    inv_path = Path(path)
    if not inv_path.exists():
        raise UsageError(
            Problem(
                str(inv_path), "inventory", "does not exist", "pass --inventory inventories/<name>"
            )
        )
    loader = DataLoader()
    vault = _vault(loader, vault_password_file)
    files = scan_files(inv_path, vault)
    if vault is None and (files.vault_files or files.vault_values):
        raise SparkrackError(vault_problems(files))
    enabled = C.INVENTORY_ENABLED
    try:
        C.INVENTORY_ENABLED = ["yaml", "ini"]  # never a script, never a plugin that connects
        # Absolute: ansible-core caches var files by the path it was given, whatever the cwd.
        manager = InventoryManager(loader=loader, sources=[str(inv_path.resolve())])
        variables = VariableManager(loader=loader, inventory=manager)
        hosts = manager.get_hosts()
        if len(hosts) > MAX_HOSTS:
            raise SparkrackError(
                _problem(inv_path, "(hosts)", f"defines {len(hosts)} hosts", "list the cluster's")
            )
        groups = {
            str(name): [str(h.name) for h in group.get_hosts()]
            for name, group in manager.groups.items()
        }
        hostvars: dict[str, dict[str, Any]] = {}
        origins: dict[str, dict[str, Where]] = {}
        for host in hosts:
            raw = variables.get_vars(host=host, include_hostvars=False)
            hostvars[str(host.name)], origins[str(host.name)] = plain_vars(raw, inv_path, vault)
        local = manager.get_host("localhost")
        control = variables.get_vars(host=local, include_hostvars=False) if local else {}
        control_vars, control_origins = plain_vars(control, inv_path, vault)
    except AnsibleError as exc:
        raise SparkrackError(ansible_problem(exc, inv_path)) from None
    finally:
        C.INVENTORY_ENABLED = enabled
    return Inventory(inv_path, groups, hostvars, origins, files, control_vars, control_origins)


def inventory_of(
    groups: Mapping[str, Sequence[str]],
    raw_hostvars: Mapping[str, Mapping[str, Any]],
    sources: Sequence[str],
    control: Mapping[str, Any] | None = None,
) -> Inventory:
    """The inventory a running play loaded (``groups`` and each host's untemplated variables,
    ansible-core's ``hostvars.raw_get``), with the same origins and file scans as
    :func:`load_inventory` (the play's vault already opened its secrets)."""
    root = Path(sources[0]) if sources else Path("inventory")
    files = Files()
    if root.exists():
        vault_free = scan_files(root, vault=_OPENED)
        files = vault_free
    hostvars: dict[str, dict[str, Any]] = {}
    origins: dict[str, dict[str, Where]] = {}
    for host, raw in raw_hostvars.items():
        hostvars[str(host)], origins[str(host)] = plain_vars(raw, root)
    clean = {str(g): [str(h) for h in hs] for g, hs in groups.items()}
    control_vars, control_origins = (None, {}) if control is None else plain_vars(control, root)
    return Inventory(root, clean, hostvars, origins, files, control_vars, control_origins)


class _Opened:
    """Stands for a vault the play opened: encrypted files are skipped, not refused."""

    def decrypt(self, data: bytes) -> bytes:
        return b""


_OPENED = _Opened()


def ansible_problem(exc: Exception, inventory: Path) -> Problem:
    """An ansible-core error as a refusal: the file and line it names, its first line."""
    obj = getattr(exc, "obj", None)
    where = _origin(obj, inventory) if obj is not None else None
    file = where.file if where is not None else str(inventory)
    line = f" (line {where.line})" if where is not None and where.line else ""
    message = first_line(exc)
    fix = "fix the file at that line"
    if "vault" in message.lower():
        fix = f"give the right vault password ({VAULT_ENV} or --vault-password-file)"
    return Problem(file, "(inventory)", f"ansible-core refuses it{line}: {message}", fix, RULE)


def _origin(value: Any, root: Path) -> Where | None:
    """Where ansible-core says ``value`` was written, the path spelled like ``root``."""
    from ansible._internal._datatag._tags import Origin

    tag = Origin.get_tag(value)
    if tag is None or not tag.path:
        return None
    path = Path(str(tag.path))
    with contextlib.suppress(ValueError):
        path = root / path.relative_to(root.resolve())
    return Where(str(path), int(tag.line_num or 0), int(tag.col_num or 0))


def plain_vars(
    raw: Mapping[Any, Any], root: Path, vault: Any = None
) -> tuple[dict[str, Any], dict[str, Where]]:
    """(plain values, dotted key -> where written) of one host's variables; ``!vault`` values
    are opened with ``vault`` (None: the vault of the running play)."""
    origins: dict[str, Where] = {}
    out = {str(k): _plain(v, str(k), origins, k, root, vault) for k, v in raw.items()}
    return out, origins


def _plain(
    value: Any, path: str, origins: dict[str, Where], key: Any, root: Path, vault: Any
) -> Any:
    # A merged mapping keeps the key of the first file that set it: the value names the winner.
    named, written = _origin(key, root), _origin(value, root)
    where = written if named is None or (written and written.file != named.file) else named
    if where is not None:
        origins[path] = where
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{path}.{k}", origins, k, root, vault) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{path}.{i}", origins, v, root, vault) for i, v in enumerate(value)]
    if vault is not None and type(value).__name__ == "EncryptedString":
        return _opened(value, vault, where or Where(str(root)), path)
    return plain(value)


def _opened(value: Any, vault: Any, where: Where, key: str) -> str:
    """The text of a ``!vault`` value, decrypted with ``vault``."""
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import VaultHelper

    try:
        text: bytes = vault.decrypt(VaultHelper.get_ciphertext(value, with_tags=False))
    except AnsibleError:
        raise SparkrackError(
            _problem(
                where.file,
                key,
                "cannot be decrypted with the vault password given",
                f"give the password it was encrypted with ({VAULT_ENV} or --vault-password-file)",
                RULE_VAULT,
            )
        ) from None
    return text.decode("utf-8", "replace")


def plain(value: Any) -> Any:
    """Strip ansible's tagged/unsafe wrappers so values are plain Python data (a ``!vault``
    value is decrypted here, with the vault the loader was given)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    for kind in (bool, int, float, str):  # bool first: a bool is an int too
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, datetime.datetime):
        return datetime.datetime.fromisoformat(value.isoformat())
    if isinstance(value, datetime.date):
        return datetime.date(value.year, value.month, value.day)
    if type(value).__name__ == "EncryptedString":
        return str(value)[:]  # the decrypted text, as a plain str
    return value
