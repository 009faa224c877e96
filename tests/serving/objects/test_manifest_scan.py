"""Every rendered serving manifest, shipped profiles and hostile variants: Kubernetes must never
expand a ``$(VAR)`` that came from a profile, and no secret travels as a literal env value."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from sparkrack import contract
from sparkrack.contract import label_value
from sparkrack.serving import (
    Profile,
    context_from_vars,
    list_profiles,
    load_profile,
    render_manifests,
    resolve,
    serving_selector,
    validate_profile,
)
from sparkrack.serving.context import ServingContext, context_from_inventory
from sparkrack.serving.switch.objects import fetch_objects

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|CREDENTIAL", re.IGNORECASE)
DNS_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")


def expandable(word: str) -> bool:
    """True when Kubernetes would expand a ``$(VAR)`` reference in ``word`` (``$$`` escapes)."""
    return "$(" in word.replace("$$", "")


RENDERED_REFERENCES = {
    "--host": f"$({contract.POD_IP_ENV})",
    "--api-key": f"$({contract.ENGINE_KEY_ENV})",
    "--admin-api-key": f"$({contract.ADMIN_KEY_ENV})",
}
"""The references sparkrack itself renders, each only as the value of its own option: the pod's
address and the engine's keys, which Kubernetes expands from the container's env."""


def rendered_reference(words: list[str], i: int) -> bool:
    return i > 0 and RENDERED_REFERENCES.get(words[i - 1]) == words[i]


def scan(docs: list[dict[str, Any]]) -> list[str]:
    """Every expandable word in command/args/env values (but the references sparkrack renders)
    and every literal secret-like env."""
    found = []
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            where = f"{doc['metadata']['name']}/{container['name']}"
            for key in ("command", "args"):
                words = container.get(key, [])
                found += [
                    f"{where} {key}: {w}"
                    for i, w in enumerate(words)
                    if expandable(w) and not rendered_reference(words, i)
                ]
            for env in container.get("env", []):
                if "value" in env and expandable(env["value"]):
                    found.append(f"{where} env {env['name']}: {env['value']}")
                if "value" in env and SECRET_NAME.search(env["name"]):
                    found.append(f"{where} env {env['name']} is a literal secret")
    return found


OPTION = "--option"
"""Stands for an option the profile's engine allows in extra_args (:data:`ALLOWED`)."""
ALLOWED = {"sglang": "--log-level", "vllm": "--uvicorn-log-level"}
HOSTILE: list[tuple[str, dict[str, Any]]] = [
    ("extra_args", {"extra_args": [OPTION, "$(HF_TOKEN)"]}),
    ("extra_args-equals", {"extra_args": [f"{OPTION}=$(HF_TOKEN)"]}),
    ("env-value", {"env": {"SGLANG_SOMETHING": "$(HF_TOKEN)"}}),
    ("json-override", {"sglang.json_model_override_args": {"x": "$(HF_TOKEN)"}}),
    ("double-dollar", {"extra_args": [OPTION, "$$(HF_TOKEN)"]}),
    # The renderer's own references, written by a profile: escaped like any other word.
    ("key-reference", {"extra_args": [OPTION, f"$({contract.ADMIN_KEY_ENV})"]}),
    ("host-reference", {"extra_args": [OPTION, f"$({contract.POD_IP_ENV})"]}),
]


def mutate(data: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    option = ALLOWED.get(str(data.get("engine")), OPTION)
    for key, value in change.items():
        if key == "extra_args":
            value = [w.replace(OPTION, option) for w in value]
        section, _, name = key.partition(".")
        if name:
            out.setdefault(section, {})[name] = value
        else:
            out[key] = value
    return out


@pytest.fixture(scope="module", params=["inventories/example", "inventories/lab"])
def ctx(request: pytest.FixtureRequest) -> ServingContext:
    return context_from_inventory(request.param)


@pytest.mark.parametrize("name", [p.stem for p in list_profiles()])
def test_shipped_manifests_are_clean(name: str, ctx: ServingContext) -> None:
    assert scan(render_manifests(load_profile(name), ctx)) == []


@pytest.mark.parametrize(("case", "change"), HOSTILE, ids=[c for c, _ in HOSTILE])
@pytest.mark.parametrize("name", ["glm-4.7-nvfp4", "nemotron-3-super-120b-a12b-nvfp4-vllm"])
def test_hostile_values_reach_the_process_unexpanded(
    name: str, case: str, change: dict[str, Any], ctx: ServingContext
) -> None:
    base = load_profile(name)
    if case == "json-override" and base.data["engine"] != "sglang":
        pytest.skip("json_model_override_args is an SGLang key")
    data = mutate(base.data, change)
    # A $( word in extra_args is refused by validation (extra-args-word); rendered anyway, it
    # must still reach the process unexpanded: the escape does not rely on the refusal.
    refused = {p.rule for p in validate_profile(data, "hostile.yml", nodes=None)}
    assert refused == ({"extra-args-word"} if "extra_args" in change else set())
    docs = render_manifests(Profile(name, Path("hostile.yml"), data), ctx)
    assert scan(docs) == []
    # What the process receives is exactly what the profile wrote: $$ -> $ undoes the escape.
    container = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]["spec"][
        "containers"
    ][0]
    words = [w.replace("$$", "$") for w in container["args"]]
    env = {e["name"]: e["value"].replace("$$", "$") for e in container["env"] if "value" in e}
    for value in change.values():
        if isinstance(value, list):
            assert all(v in words for v in data["extra_args"])
        elif isinstance(value, dict) and case == "env-value":
            assert all(env[k] == v for k, v in value.items())


def test_scan_finds_an_unescaped_reference() -> None:
    doc = {
        "metadata": {"name": "x"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "args": ["--api-key", "$(HF_TOKEN)"],
                            "env": [{"name": "HF_TOKEN", "value": "hf_x"}],
                        }
                    ]
                }
            }
        },
    }
    assert len(scan([doc])) == 2
    # A rendered reference is accepted only as its own option's value.
    args = ["--host", "$(POD_IP)", "--chat-template", f"$({contract.ENGINE_KEY_ENV})"]
    doc["spec"]["template"]["spec"]["containers"][0]["args"] = args  # type: ignore[index]
    assert scan([doc]) == [
        f"x/c args: $({contract.ENGINE_KEY_ENV})",
        "x/c env HF_TOKEN is a literal secret",
    ]


@pytest.mark.parametrize("flag", ["--api-key", "--api-key=sk-x", "--admin-api-key"])
@pytest.mark.parametrize("name", ["glm-4.7-nvfp4", "nemotron-3-super-120b-a12b-nvfp4-vllm"])
def test_a_profile_cannot_set_the_engine_key(name: str, flag: str) -> None:
    data = mutate(load_profile(name).data, {"extra_args": [flag, "sk-x"]})
    if flag == "--admin-api-key" and data["engine"] == "vllm":
        pytest.skip("vLLM has no admin key option")
    assert [p.rule for p in validate_profile(data, "hostile.yml", nodes=None)] == [
        "extra-args-owned"
    ]


# The one container that talks to the Hub; every other runs offline and gets no token at all.
ONLINE = ("download",)


def test_hf_token_is_only_a_secret_reference(ctx: ServingContext) -> None:
    for name in [p.stem for p in list_profiles()]:
        profile = load_profile(name)
        for doc in [*fetch_objects(resolve(profile, ctx)), *render_manifests(profile, ctx)]:
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
                tokens = [e for e in c.get("env", []) if e["name"] == "HF_TOKEN"]
                if c["name"] not in ONLINE:
                    assert not tokens, f"{name}: {c['name']} runs offline and needs no HF token"
                    continue
                assert tokens, f"{name}: {c['name']} has no HF_TOKEN reference"
                assert all("valueFrom" in e and "value" not in e for e in tokens)


@pytest.mark.parametrize("length", [62, 63, 64, 80, 200])
def test_long_profile_names_give_valid_labels_and_matching_selectors(length: int) -> None:
    base = load_profile("glm-4.7-nvfp4")
    name = ("glm-" + "x" * length)[: length - 1] + "-"  # a cut may land on a dash
    profile = Profile(name, Path(f"{name}.yml"), base.data)
    ctx = context_from_vars(context_from_inventory("inventories/example").plan, {})
    docs = render_manifests(profile, ctx)
    selector = dict(part.split("=", 1) for part in serving_selector(profile).split(","))
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        for value in labels.values():
            assert DNS_LABEL.match(value), f"invalid label value {value!r}"
        if doc["kind"] != "Namespace":
            assert all(labels.get(k) == v for k, v in selector.items()), doc["metadata"]["name"]
        assert len(doc["metadata"]["name"]) <= 63


def test_label_value_never_ends_on_a_separator() -> None:
    assert label_value("a" * 62 + "-b") == "a" * 62
    assert label_value("-x-") == "x"
    assert len(label_value("y" * 100)) == 63
