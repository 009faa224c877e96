"""Offline validation of every manifest sparkrack renders, before anything is applied.

Core Kubernetes kinds are checked against the strict OpenAPI-derived schemas shipped in the
``kubernetes-validate`` package (unknown fields are errors). Custom resources are checked against
the CRD schemas shipped in ``sparkrack/data/crd-schemas/<group>_<version>_<Kind>.json``; a
NetworkAttachmentDefinition's ``spec.config`` must also parse as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from sparkrack.errors import Problem
from sparkrack.k8s.names import name_problems

# K3s v1.35.3+k3s1 is what the seeds' clusters run.
KUBERNETES_VERSION = "1.35.0"
CRD_SCHEMA_DIR = Path(__file__).resolve().parent.parent / "data" / "crd-schemas"


@cache
def _crd_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    group, _, version = api_version.rpartition("/")
    path = CRD_SCHEMA_DIR / f"{group}_{version}_{kind}.json"
    if not path.exists():
        return None
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


@cache
def _kubernetes_validate() -> Any:
    """The ``kubernetes_validate`` module, its schema reader memoized: unchanged, it parses a
    kind's JSON schema and the shared ``_definitions.json`` (several MB) again for every
    manifest, which was a third of a render's time. The schemas are the package's files,
    read-only; the parsed documents are only read (``referencing`` resources)."""
    import kubernetes_validate
    import kubernetes_validate.utils as utils

    if not hasattr(utils.schema_contents, "cache_info"):
        utils.schema_contents = cache(utils.schema_contents)
    return kubernetes_validate


def _name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind', '?')}/{meta.get('name', '?')}"


def validate_manifest(doc: dict[str, Any], source: str = "manifest") -> list[Problem]:
    """Return the problems of one manifest (empty list = valid)."""
    kubernetes_validate = _kubernetes_validate()
    api_version = str(doc.get("apiVersion", ""))
    kind = str(doc.get("kind", ""))
    crd = _crd_schema(api_version, kind)
    problems: list[Problem] = []
    if crd is not None:
        for err in jsonschema.Draft7Validator(crd).iter_errors(doc):
            path = ".".join(str(p) for p in err.absolute_path) or "(root)"
            problems.append(
                Problem(
                    source,
                    f"{_name(doc)}:{path}",
                    err.message,
                    f"fix the renderer of {kind}",
                    "k8s-schema",
                )
            )
        if kind == "NetworkAttachmentDefinition":
            config = (doc.get("spec") or {}).get("config", "")
            try:
                json.loads(config)
            except (TypeError, ValueError) as exc:
                problems.append(
                    Problem(
                        source,
                        f"{_name(doc)}:spec.config",
                        f"is not valid JSON ({exc})",
                        "render the CNI config with json.dumps",
                        "k8s-schema",
                    )
                )
        return problems
    if "/" in api_version and not api_version.startswith(
        (
            "apps/",
            "batch/",
            "rbac.authorization.k8s.io/",
            "policy/",
            "networking.k8s.io/",
            "scheduling.k8s.io/",
            "node.k8s.io/",
            "apiextensions.k8s.io/",
            "admissionregistration.k8s.io/",
        )
    ):
        return [
            Problem(
                source,
                _name(doc),
                f"no schema for {api_version} {kind}",
                f"add {CRD_SCHEMA_DIR.name}/<group>_<version>_{kind}.json",
                "k8s-schema",
            )
        ]
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path) or "(root)"
        problems.append(
            Problem(
                source,
                f"{_name(doc)}:{path}",
                exc.message,
                f"fix the renderer of {kind}",
                "k8s-schema",
            )
        )
    except kubernetes_validate.SchemaNotFoundError:
        problems.append(
            Problem(
                source,
                _name(doc),
                f"no Kubernetes schema for {api_version} {kind}",
                "check apiVersion/kind",
                "k8s-schema",
            )
        )
    return problems


def validate_manifests(docs: Iterable[dict[str, Any]], source: str = "manifest") -> list[Problem]:
    """Every problem of a set of manifests: each against its schema, then the names, labels,
    images and ports the API server checks beyond the schemas (:mod:`sparkrack.k8s.names`)."""
    listed = list(docs)
    problems: list[Problem] = []
    for doc in listed:
        problems.extend(validate_manifest(doc, source))
    return problems + name_problems(listed, source)
