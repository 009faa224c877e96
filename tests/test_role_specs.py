"""Every role's meta/argument_specs.yml describes its defaults/main.yml exactly.

Rules, checked for every role and every entry point of its argument spec:

- Keys: every variable in defaults/main.yml is an option of at least one entry point, and every
  option that is not ``required: true`` has a value in defaults/main.yml (Ansible takes a role
  variable's default from defaults/main.yml only; a spec default is documentation). An option
  with a value in defaults/main.yml is never ``required: true`` (it can never be missing).
- Defaults: a literal default in defaults/main.yml equals the option's ``default:`` (same type
  and value, nested too). A null default matches an absent ``default:``. A Jinja expression
  (a string holding ``{{`` or ``{%``) is computed at run time, so its option has NO ``default:``
  (a copy of the template text would say nothing true about the value).
- Sub-options: when a dict default's option lists ``options:``, every key of the default is
  one of them, and a sub-option's ``default:`` equals the default's value for that key.
- Types: every option declares ``type``; a literal default has that type (a list default goes
  with ``type: list`` and its items with ``elements``, a dict with ``dict``, a bool with
  ``bool``, an int with ``int`` or ``float``, a string with ``str`` or ``path``).

Each checker also runs on a planted disagreement in a temporary copy of a role.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.errors import Problem
from sparkrack.inputs.variables import SPEC_TYPES

ROOT = Path(__file__).resolve().parent.parent
ROLES = ROOT / "roles"
ROLE_NAMES = sorted(p.parent.parent.name for p in ROLES.glob("*/meta/argument_specs.yml"))

# Spec type -> Python types a literal default of that spec type may have (the inventory check's
# table: an inventory value of a role option is held to the same types).
TYPES: dict[str, tuple[type, ...]] = SPEC_TYPES


def is_template(value: object) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def same(a: object, b: object) -> bool:
    """Equal in value AND type, recursively (``True == 1`` and ``1 == 1.0`` are not the same)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def has_type(value: object, spec_type: str) -> bool:
    if spec_type == "raw":
        return True
    allowed = TYPES.get(spec_type, ())
    if isinstance(value, bool) and bool not in allowed:
        return False
    return isinstance(value, allowed)


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text()) or {}
    assert isinstance(data, dict), f"{path}: not a mapping"
    return data


def check_role(role_dir: Path) -> list[Problem]:
    """Every disagreement between the role's argument spec and its defaults."""
    role = role_dir.name
    spec_file = f"roles/{role}/meta/argument_specs.yml"
    defaults_file = f"roles/{role}/defaults/main.yml"
    defaults = load(role_dir / "defaults" / "main.yml")
    entry_points: dict[str, Any] = load(role_dir / "meta" / "argument_specs.yml")["argument_specs"]
    problems: list[Problem] = []
    documented: set[str] = set()

    for entry, spec in entry_points.items():
        options: dict[str, Any] = spec.get("options") or {}
        documented.update(options)
        for name, option in options.items():
            key = f"{entry}.options.{name}"
            required = option.get("required") is True
            spec_type = option.get("type")
            if spec_type is None:
                problems.append(
                    Problem(spec_file, key, "no type", f"add `type:` ({', '.join(TYPES)} or raw)")
                )
            if name not in defaults:
                if not required:
                    problems.append(
                        Problem(
                            spec_file,
                            key,
                            f"optional, but {defaults_file} has no default for it",
                            f"add `{name}:` to {defaults_file}, or mark the option `required: true`",
                        )
                    )
                continue
            value = defaults[name]
            if required:
                problems.append(
                    Problem(
                        spec_file,
                        key,
                        f"`required: true`, but {defaults_file} gives it a default",
                        f"drop `required: true` and document `default:` as in {defaults_file}",
                    )
                )
            if is_template(value):
                if "default" in option:
                    problems.append(
                        Problem(
                            spec_file,
                            key,
                            f"`default:` set, but {defaults_file} computes the value with Jinja"
                            f" ({value!r})",
                            "remove `default:` and say in `description:` what it defaults to",
                        )
                    )
                continue
            documented_default = option.get("default")
            if not same(documented_default, value):
                problems.append(
                    Problem(
                        spec_file,
                        key,
                        f"`default: {documented_default!r}` but {defaults_file} has {value!r}",
                        f"set `default:` to the value in {defaults_file}"
                        + (" (or remove `default:`)" if value is None else ""),
                    )
                )
            if value is not None and spec_type is not None and not has_type(value, spec_type):
                problems.append(
                    Problem(
                        spec_file,
                        key,
                        f"`type: {spec_type}` but the default in {defaults_file} is a "
                        f"{type(value).__name__} ({value!r})",
                        "make `type:` describe the default",
                    )
                )
            suboptions: dict[str, Any] = option.get("options") or {}
            if isinstance(value, dict) and suboptions:
                for sub in sorted(set(value) - set(suboptions)):
                    problems.append(
                        Problem(
                            spec_file,
                            f"{key}.{sub}",
                            f"in the default in {defaults_file}, but not in the option's `options:`",
                            "document it as a sub-option",
                        )
                    )
                for sub, sub_option in suboptions.items():
                    if (
                        sub in value
                        and "default" in sub_option
                        and not same(sub_option["default"], value[sub])
                    ):
                        problems.append(
                            Problem(
                                spec_file,
                                f"{key}.options.{sub}",
                                f"`default: {sub_option['default']!r}` but {defaults_file} has "
                                f"{value[sub]!r}",
                                f"set `default:` to the value in {defaults_file}",
                            )
                        )
            elements = option.get("elements")
            if isinstance(value, list) and elements is not None:
                wrong = [item for item in value if not has_type(item, elements)]
                if wrong:
                    problems.append(
                        Problem(
                            spec_file,
                            key,
                            f"`elements: {elements}` but the default in {defaults_file} holds "
                            f"{wrong!r}",
                            "make `elements:` describe the default's items",
                        )
                    )

    for name in sorted(set(defaults) - documented):
        problems.append(
            Problem(
                defaults_file,
                name,
                f"no option documents it in {spec_file}",
                "add it to the `options:` of the entry point(s) that use it, with type and default",
            )
        )
    return problems


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_argument_specs_describe_defaults(role: str) -> None:
    problems = check_role(ROLES / role)
    assert not problems, "\n".join(str(p) for p in problems)


def test_every_role_has_an_argument_spec() -> None:
    roles = sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir())
    assert roles == ROLE_NAMES
    assert len(ROLE_NAMES) >= 10


# --- negative controls: a planted disagreement in a temporary copy of a role -----------------


@pytest.fixture
def spark_base(tmp_path: Path) -> Path:
    copy = tmp_path / "spark_base"
    shutil.copytree(ROLES / "spark_base", copy)
    assert check_role(copy) == []
    return copy


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def messages(role_dir: Path) -> str:
    return "\n".join(str(p) for p in check_role(role_dir))


def test_catches_a_default_without_an_option(spark_base: Path) -> None:
    append(spark_base / "defaults" / "main.yml", "spark_base_extra: 1\n")
    found = messages(spark_base)
    assert "defaults/main.yml: spark_base_extra: no option documents it" in found


def test_catches_an_option_without_a_default(spark_base: Path) -> None:
    edit(spark_base / "defaults" / "main.yml", "spark_base_apt_cache_valid_time: 86400\n", "")
    found = messages(spark_base)
    assert "main.options.spark_base_apt_cache_valid_time: optional, but" in found


def test_catches_a_different_default(spark_base: Path) -> None:
    edit(
        spark_base / "defaults" / "main.yml", "net.core.rmem_max: 268435456", "net.core.rmem_max: 1"
    )
    found = messages(spark_base)
    assert "main.options.spark_base_sysctl: `default: {" in found
    assert "set `default:` to the value in roles/spark_base/defaults/main.yml" in found


def test_catches_a_string_documented_as_an_int(spark_base: Path) -> None:
    edit(spark_base / "defaults" / "main.yml", "valid_time: 86400", 'valid_time: "86400"')
    found = messages(spark_base)
    assert "`default: 86400` but roles/spark_base/defaults/main.yml has '86400'" in found
    assert "`type: int` but the default in roles/spark_base/defaults/main.yml is a str" in found


def test_catches_a_wrong_type(spark_base: Path) -> None:
    spec = spark_base / "meta" / "argument_specs.yml"
    edit(
        spec, "spark_base_packages:\n        type: list", "spark_base_packages:\n        type: dict"
    )
    found = messages(spark_base)
    assert "main.options.spark_base_packages: `type: dict` but the default" in found


def test_catches_wrong_elements(spark_base: Path) -> None:
    edit(spark_base / "defaults" / "main.yml", "  - numactl\n", "  - 7\n")
    assert "holds [7]" in messages(spark_base)


def test_catches_a_bool_documented_as_an_int(spark_base: Path) -> None:
    edit(spark_base / "defaults" / "main.yml", "valid_time: 86400", "valid_time: true")
    edit(spark_base / "meta" / "argument_specs.yml", "default: 86400", "default: true")
    assert "`type: int` but the default" in messages(spark_base)


def test_catches_a_default_on_a_required_option(spark_base: Path) -> None:
    append(spark_base / "defaults" / "main.yml", "spark_hardware: real\n")
    assert "spark_hardware: `required: true`, but" in messages(spark_base)


def test_catches_a_copied_template_and_a_missing_type(spark_base: Path) -> None:
    edit(
        spark_base / "defaults" / "main.yml",
        "spark_base_sysctl_file: /etc/sysctl.d/90-sparkrack-rdma.conf",
        "spark_base_sysctl_file: \"{{ '/etc/sysctl.d/90-sparkrack-rdma.conf' }}\"",
    )
    edit(
        spark_base / "meta" / "argument_specs.yml",
        "        type: path\n",
        "",
    )
    found = messages(spark_base)
    assert "spark_base_sysctl_file: `default:` set, but" in found
    assert "spark_base_sysctl_file: no type" in found


def test_catches_a_sub_option_that_disagrees(tmp_path: Path) -> None:
    copy = tmp_path / "nvidia_driver"
    shutil.copytree(ROLES / "nvidia_driver", copy)
    assert check_role(copy) == []
    edit(copy / "defaults" / "main.yml", "  hold: []", "  hold: [nvidia-driver-580]\n  pin: true")
    spec = copy / "meta" / "argument_specs.yml"
    edit(spec, "          hold: []", "          hold: [nvidia-driver-580]\n          pin: true")
    found = messages(copy)
    assert "nvidia_driver_lock.options.hold: `default: []` but" in found
    assert "nvidia_driver_lock.pin: in the default" in found
