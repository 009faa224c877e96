"""What code a deployment may run: the inventory decides, never the profile.

A profile is shared data from strangers; it names an image, a model repo and whether the engine
runs the repo's own Python (``<engine>.trust_remote_code``). The inventory, which the owner
writes, lists the image repositories it trusts (``serving_trusted_images``), whether a privileged
image may run from a tag instead of a digest (``serving_allow_undigested_privileged``) and the
model repos whose code may run (``serving_remote_code_repos``). A profile is refused, with its
file, key and fix, before anything renders when it steps outside that list; its own
``image_info`` (facts the rules believe) only ever describes an image the inventory trusts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sparkrack.errors import Problem
from sparkrack.inputs.forms import switch_on
from sparkrack.inputs.imageref import without_digest
from sparkrack.serving.profile.knobs import Knob, lookup
from sparkrack.serving.profile.model import Profile


class Engine(Protocol):
    """What the trust check asks of a profile's engine
    (:class:`sparkrack.serving.engines.base.Engine` answers)."""

    name: str
    uses_fabric: bool
    knobs: tuple[Knob, ...]

    def knob(self, key: str) -> object | None: ...


TRUST_VARS: Mapping[str, Any] = {
    "serving_trusted_images": [],
    "serving_allow_undigested_privileged": False,
    "serving_remote_code_repos": [],
}
"""The inventory's trust settings and their defaults: nothing trusted."""
RULE_IMAGE = "untrusted-image"
RULE_DIGEST = "privileged-image-digest"
RULE_REMOTE_CODE = "untrusted-remote-code"


@dataclass(frozen=True)
class Trust:
    """The inventory's trust settings."""

    images: tuple[str, ...] = ()
    """Image repository prefixes (``registry/path`` or a ``path/`` component boundary)."""
    allow_undigested_privileged: bool = False
    remote_code_repos: tuple[str, ...] = ()
    """Hugging Face repo ids whose own code an engine may run."""

    def trusts_image(self, image: str) -> bool:
        """The image's repository (without tag or digest) is a listed prefix or lies under one,
        at a ``/`` boundary: ``scitrera/`` trusts ``scitrera/x``, never ``scitrera-evil/x``."""
        repo = repository(image)
        return any(
            repo == p.rstrip("/") or repo.startswith(p.rstrip("/") + "/") for p in self.images if p
        )


def repository(image: str) -> str:
    """``registry/path[:tag][@digest]`` -> ``registry/path``."""
    ref = without_digest(image)
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    return ref[:colon] if colon > slash else ref


def trust_of(variables: Mapping[str, Any]) -> Trust:
    """The trust settings of inventory variables (defaults where unset)."""
    v = {**TRUST_VARS, **{k: val for k, val in variables.items() if val is not None}}
    return Trust(
        images=tuple(str(p) for p in _listed(v["serving_trusted_images"])),
        allow_undigested_privileged=switch_on(v["serving_allow_undigested_privileged"]),
        remote_code_repos=tuple(str(r) for r in _listed(v["serving_remote_code_repos"])),
    )


def _listed(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else [value] if value else []


def remote_code(profile: Profile, engine: Engine) -> bool:
    """The profile asks the engine to run the model repo's own code."""
    key = f"{engine.name}.trust_remote_code"
    return engine.knob(key) is not None and lookup(profile.data, key) is True


@dataclass(frozen=True)
class CodeSource:
    """One place a profile makes its engine load code from: the key that asks, the repo whose
    code runs, and what runs."""

    key: str
    repo: str
    what: str


def code_sources(profile: Profile, engine: Engine) -> list[CodeSource]:
    """Every repo whose code the profile makes the engine run: the model's own code
    (``trust_remote_code``), a file of the model repo the engine imports (a reasoning-parser
    plugin), another repo loaded with the model's ``trust_remote_code`` (a draft model). The
    engine's knob table says which keys load code (:attr:`Knob.code`)."""
    model = profile.model
    trusting = remote_code(profile, engine)
    out: list[CodeSource] = []
    if trusting:
        out.append(
            CodeSource(
                f"{engine.name}.trust_remote_code", model, f"runs the Python code of {model}"
            )
        )
    for knob in engine.knobs:
        value = lookup(profile.data, knob.key) if knob.code else None
        if knob.code_field and isinstance(value, Mapping):
            value = value.get(knob.code_field)
        if value is None or value == "":
            continue
        key = f"{knob.key}.{knob.code_field}" if knob.code_field else knob.key
        if knob.code == "model-file":
            out.append(CodeSource(key, model, f"imports {value} from {model} as Python code"))
        elif knob.code == "repo" and trusting and str(value) != model:
            out.append(
                CodeSource(
                    key,
                    str(value),
                    f"loads {value} with trust_remote_code, which runs its Python code",
                )
            )
    return out


def trust_problems(profile: Profile, engine: Engine, trust: Trust) -> list[Problem]:
    """Where the profile names code the inventory does not trust (empty: none)."""
    source, image = str(profile.source), profile.image
    out: list[Problem] = []
    if not trust.trusts_image(image):
        listed = ", ".join(trust.images) or "none"
        stated = (
            " (its image_info is not believed either)" if profile.data.get("image_info") else ""
        )
        out.append(
            Problem(
                source,
                "image",
                f"{image} is not from a repository the inventory trusts (serving_trusted_images: "
                f"{listed}){stated}",
                f"use an image under a trusted prefix, or add {repository(image)} to "
                "serving_trusted_images in the inventory once you trust its publisher",
                RULE_IMAGE,
            )
        )
    elif engine.uses_fabric and "@sha256:" not in image and not trust.allow_undigested_privileged:
        out.append(
            Problem(
                source,
                "image",
                f"{image} runs privileged ({engine.name} ranks) but is named by a tag, which its "
                "publisher can move",
                f"pin it by digest ({without_digest(image)}@sha256:<digest>), or set "
                "serving_allow_undigested_privileged: true in the inventory",
                RULE_DIGEST,
            )
        )
    for code in code_sources(profile, engine):
        if code.repo in trust.remote_code_repos:
            continue
        out.append(
            Problem(
                source,
                code.key,
                f"{code.what}, a repo the inventory does not list (serving_remote_code_repos)",
                f"remove {code.key}, or add {code.repo} to serving_remote_code_repos in the "
                "inventory once you have read its code",
                RULE_REMOTE_CODE,
            )
        )
    return out


def trust_facts(profile: Profile, engine: Engine) -> dict[str, str]:
    """What the serving plan shows first: the code that will run."""
    revision = profile.revision or "main (not pinned: resolved by the fetch step)"
    sources = code_sources(profile, engine)
    return {
        "image": profile.image,
        "model": f"{profile.model}@{revision}",
        "remote_code": "yes (" + "; ".join(s.what for s in sources) + ")" if sources else "no",
    }
