"""The profile schema: generated from the registry, strict everywhere, accepts every shipped profile."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkrack.serving import (
    PROFILE_DIR,
    SCHEMA_PATH,
    list_profiles,
    load_profile,
    validate_profile,
)
from sparkrack.serving.engines import engine
from sparkrack.serving.profile.schema import build_schema, schema_text
from sparkrack.sources import SOURCES

SHIPPED = [p.stem for p in list_profiles()]
SGLANG_SEEDS = [n for n in SHIPPED if load_profile(n).data["engine"] == "sglang"]


def test_schema_file_is_generated_from_the_registry() -> None:
    assert SCHEMA_PATH.read_text() == schema_text(), (
        "model_profiles/schema.json is stale: python -m sparkrack.serving.profile.schema > model_profiles/schema.json"
    )


def _objects(node: Any, path: str = "$") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            found.append((path, node))
        for key, value in node.items():
            found += _objects(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _objects(value, f"{path}[{i}]")
    return found


def test_every_object_refuses_unknown_keys() -> None:
    objects = _objects(build_schema())
    assert len(objects) >= 10
    for path, obj in objects:
        assert obj.get("additionalProperties") is False, f"{path} accepts unknown keys"


def test_every_registry_knob_is_in_the_schema() -> None:
    props = build_schema()["properties"]
    for knob in engine("sglang").knobs:
        section, _, name = knob.key.partition(".")
        if name and knob.from_profile:
            assert name in props[section]["properties"], knob.key


def test_five_sglang_seed_profiles_ship() -> None:
    assert sorted(SGLANG_SEEDS) == [
        "gemma-4-31b-it",
        "glm-4.7-nvfp4",
        "nemotron-3-super-120b-a12b-nvfp4",
        "nemotron-3-ultra-550b-a55b-nvfp4",
        "qwen3.5-397b-a17b-nvfp4",
    ]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_is_accepted(name: str) -> None:
    profile = load_profile(name)
    assert validate_profile(profile.data, profile.source, nodes=4) == []
    assert profile.data["provenance"]["source"] in SOURCES
    assert (
        (PROFILE_DIR / f"{name}.yml")
        .read_text()
        .startswith("# yaml-language-server: $schema=schema.json")
    )


@pytest.mark.parametrize("name", SHIPPED)
def test_profile_resolves_by_path_stem_and_model_id(name: str) -> None:
    by_stem = load_profile(name)
    assert load_profile(str(PROFILE_DIR / f"{name}.yml")).data == by_stem.data
    by_id = load_profile(by_stem.model.lower())
    assert by_id.model == by_stem.model
    if (
        by_stem.data["engine"] == "sglang"
    ):  # a model id shared by several engines means the sglang one
        assert by_id.name == name


def test_schema_is_valid_json_schema() -> None:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("value", ["000", "seed-003", "no-such-post"])
def test_a_source_that_names_no_document_is_refused(value: str) -> None:
    """provenance.source is a slug of sparkrack/sources.py; a number or an unknown slug is not."""
    profile = load_profile("glm-4.7-nvfp4")
    data = {**profile.data, "provenance": {**profile.data["provenance"], "source": value}}
    problems = validate_profile(data, profile.source, nodes=4)
    assert any(p.key.startswith("provenance") for p in problems), problems
    assert validate_profile(profile.data, profile.source, nodes=4) == []  # the shipped one passes
