"""Every flag/env the registry emits exists in the REAL SGLang releases the images carry.

Reads ``sglang/srt/server_args.py`` and ``sglang/srt/environ.py`` out of the PyPI wheels
0.5.10–0.5.13 (downloaded once into .cache/wheels by the patch tests' fixture) and parses the
``add_argument`` calls with ``ast`` — nothing is imported, so torch is not needed.
"""

from __future__ import annotations

import ast
import os
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from patch_fixtures import wheel_path

from sparkrack.serving.enginecheck import upstream
from sparkrack.serving.engines import engine
from sparkrack.serving.profile.images import version_tuple
from sparkrack.serving.profile.knobs import RuntimeKnob

pytestmark = pytest.mark.tools  # real engine wheels

VERSIONS = ["0.5.10", "0.5.11", "0.5.12", "0.5.13"]


@cache
def _source(version: str, member: str) -> str:
    with zipfile.ZipFile(wheel_path("sglang", version)) as zf:
        return zf.read(member).decode()


@cache
def server_flags(version: str) -> dict[str, Any]:
    """option string -> its ``choices`` (a list, or None) in that release's ServerArgs."""
    tree = ast.parse(_source(version, "sglang/srt/server_args.py"))
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id.endswith("_CHOICES"):
                try:
                    constants[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    flags: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            options = [
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            choices: Any = None
            for kw in node.keywords:
                if kw.arg == "choices":
                    if isinstance(kw.value, ast.Name):
                        choices = constants.get(kw.value.id)
                    else:
                        try:
                            choices = ast.literal_eval(kw.value)
                        except ValueError:
                            choices = None
            for option in options:
                if option.startswith("--"):
                    flags[option] = choices
    return flags


@pytest.mark.parametrize("version", VERSIONS)
def test_every_registry_flag_exists(version: str) -> None:
    flags = server_flags(version)
    assert len(flags) > 300, "parsed too few flags: the parser no longer matches server_args.py"
    spec = engine("sglang")
    for knob in spec.knobs:
        if knob.flag is None or version_tuple(version) < version_tuple(knob.since):
            continue
        assert knob.flag in flags, f"{knob.key}: {knob.flag} not in sglang {version} ServerArgs"
    runtime = [knob.flag for knob in spec.knobs if isinstance(knob, RuntimeKnob)]
    assert {"--nnodes", "--node-rank", "--dist-init-addr", "--host", "--port"} <= set(runtime)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_registry_choice_is_accepted(version: str) -> None:
    flags = server_flags(version)
    for knob in engine("sglang").knobs:
        if knob.flag is None or not knob.choices:
            continue
        allowed = flags[knob.flag]
        if allowed is None:  # free-form in this release (e.g. --speculative-algorithm in 0.5.13)
            continue
        missing = [c for c in knob.choices if c not in allowed]
        assert not missing, f"{knob.flag} {missing} not accepted by sglang {version}: {allowed}"


@pytest.mark.parametrize("version", VERSIONS)
def test_env_knobs_exist(version: str) -> None:
    environ = _source(version, "sglang/srt/environ.py")
    for knob in engine("sglang").knobs:
        if knob.env:
            assert f"{knob.env} = EnvBool(" in environ, f"{knob.env} missing in sglang {version}"


@pytest.mark.parametrize("version", VERSIONS)
def test_seed_pseudo_flag_is_not_a_flag(version: str) -> None:
    # Why disable_deep_gemm is an env knob: the flag src:ultra-post prints does not exist.
    assert "--disable-deep-gemm" not in server_flags(version)


def test_catalog_images_carry_checked_versions() -> None:
    for image, facts in engine("sglang").images.items():
        assert facts.version in VERSIONS, f"{image}: SGLang {facts.version} was not checked"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_torch_of_each_release_is_its_wheels_pin(version: str) -> None:
    """The PyTorch the image table gives each SGLang release (it spells the rank pods' flight
    recorder) is the ``torch==X`` that release's wheel requires."""
    from sparkrack.serving.engines.sglang_table import IMAGES, TORCH

    with zipfile.ZipFile(wheel_path("sglang", version)) as zf:
        metadata = zf.read(f"sglang-{version}.dist-info/METADATA").decode()
    pins = [
        line.split("==", 1)[1].split(";")[0].strip()
        for line in metadata.splitlines()
        if line.replace(" ", "").startswith("Requires-Dist:torch==")
    ]
    assert pins == [TORCH[version]]
    assert {f.torch for f in IMAGES.values() if f.version == version} <= {TORCH[version]}


@pytest.mark.parametrize("version", upstream.supported_versions("vllm"))
def test_the_torch_of_each_vllm_release_is_its_wheels_pin(version: str) -> None:
    """The PyTorch the vLLM image table gives each release the engine check pins (it spells the
    flight recorder of the ranks across Sparks) is the ``torch==X`` that release's wheel
    requires; where the engine check's environment is built, its installed METADATA agrees."""
    from sparkrack.serving.engines.vllm import IMAGES, TORCH

    with zipfile.ZipFile(wheel_path("vllm", version)) as zf:
        metadata = zf.read(f"vllm-{version}.dist-info/METADATA").decode()
    assert torch_pins(metadata) == [TORCH[version]]
    os.environ.setdefault(
        "SPARKRACK_CACHE_DIR", str(Path(__file__).resolve().parents[3] / ".cache")
    )
    installed = upstream.cache_dir() / "enginecheck" / f"vllm-{version}" / "engine"
    for meta in installed.glob(f"vllm-{version}.dist-info/METADATA"):
        assert torch_pins(meta.read_text()) == [TORCH[version]]
    assert {f.torch for f in IMAGES.values() if f.version == version} <= {TORCH[version]}
    assert set(TORCH) == set(upstream.supported_versions("vllm"))


def torch_pins(metadata: str) -> list[str]:
    return [
        line.split("==", 1)[1].split(";")[0].strip()
        for line in metadata.splitlines()
        if line.replace(" ", "").startswith("Requires-Dist:torch==")
    ]
