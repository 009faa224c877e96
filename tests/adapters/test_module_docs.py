"""Each of sparkrack's Ansible modules documents what it takes and returns in YAML that parses
(``ansible-doc`` and ansible-lint read it), and its documented options are its argument spec."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

MODULES = Path(__file__).resolve().parents[2] / "sparkrack" / "adapters" / "modules"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented(module: ModuleType) -> set[str]:
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["module"] == module.__name__
    yaml.safe_load(module.RETURN)
    return set(doc.get("options") or {})


@pytest.mark.parametrize("path", sorted(MODULES.glob("sparkrack_*.py")), ids=lambda p: p.stem)
def test_the_docs_parse_and_name_every_option(path: Path) -> None:
    module = load(path)
    assert documented(module) == set(module.ARGUMENT_SPEC)


def test_negative_control_an_unquoted_colon_does_not_parse() -> None:
    module = load(MODULES / "sparkrack_k8s_labelled.py")
    quoted = '"C(absent) only. C(Kind: number) for each kind with objects removed."'
    assert quoted in module.RETURN
    module.RETURN = module.RETURN.replace(quoted, quoted.strip('"'))
    with pytest.raises(yaml.YAMLError):
        documented(module)
