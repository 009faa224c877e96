"""SM121 source patches for the serving container.

The runtime part (``engine.py``, ``catalog.py``, ``launcher.py`` in this package) is stdlib-only and
self-contained: the renderer ships those three files in a ConfigMap mounted at ``/opt/sparkrack``,
and the serving container's ``command`` (``container_entrypoint``) runs the launcher, which applies
the catalog to the image's site-packages and then ``os.execvp``'s the server argv (the container
``args``).

API for the renderer: ``PATCH_IDS``, ``configmap_files()``, ``container_entrypoint()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sparkrack.errors import Problem, SparkrackError
from sparkrack.patches.catalog import PATCHES
from sparkrack.patches.engine import (
    ALREADY,
    APPLIED,
    DRIFT,
    NOT_APPLICABLE,
    WOULD_APPLY,
    Patch,
    PatchReport,
    run_catalog,
    validate_catalog,
)

__all__ = [
    "ALREADY",
    "APPLIED",
    "CONFIGMAP_FILES",
    "DRIFT",
    "MOUNT_PATH",
    "NOT_APPLICABLE",
    "PATCHES",
    "PATCH_IDS",
    "WOULD_APPLY",
    "Patch",
    "PatchReport",
    "configmap_files",
    "container_entrypoint",
    "run_catalog",
]

MOUNT_PATH = "/opt/sparkrack"
# ConfigMap key (= file name under MOUNT_PATH) -> module of this package shipped verbatim.
CONFIGMAP_FILES: tuple[str, ...] = ("engine.py", "catalog.py", "launcher.py")

PATCH_IDS: tuple[str, ...] = tuple(p.id for p in PATCHES)

_HERE = Path(__file__).resolve().parent


def configmap_files() -> dict[str, str]:
    """File name -> text of the stdlib-only engine, catalog and launcher (ConfigMap data)."""
    problems = validate_catalog(PATCHES)
    if problems:  # a broken catalog must never reach a pod
        raise SparkrackError(
            [
                Problem("sparkrack/patches/catalog.py", "PATCHES", msg, rule="patch-catalog")
                for msg in problems
            ]
        )
    return {name: (_HERE / name).read_text(encoding="utf-8") for name in CONFIGMAP_FILES}


def container_entrypoint(
    required: list[str], model_arch: str, *, mount: str = MOUNT_PATH
) -> list[str]:
    """The serving container's ``command``; the server argv follows as the container ``args``.

    ``required``: patch ids whose DRIFT must stop the pod (unknown ids are refused here, before
    anything is rendered). ``model_arch``: the model's architecture class (profile model_info).
    """
    unknown = [r for r in required if r not in PATCH_IDS]
    if unknown:
        raise SparkrackError(
            Problem(
                "model profile",
                "patches",
                f"unknown patch id(s) {', '.join(unknown)}",
                fix=f"use ids from: {', '.join(PATCH_IDS)}",
                rule="patch-unknown-id",
            )
        )
    command = ["python3", "-I", f"{mount.rstrip('/')}/launcher.py"]
    for patch_id in required:
        command += ["--require", patch_id]
    if model_arch:
        command += ["--model-arch", model_arch]
    return [*command, "--"]


def handed_keys(command: Sequence[str]) -> dict[str, str]:
    """Variable -> option of each key a container ``command`` has the launcher hand the server in
    its interpreter (its ``--key-env VAR=FLAG`` words; the server argv is the container's
    ``args``): what the server's argv holds past the rendered args."""
    words = list(command)
    pairs = [words[i + 1] for i in range(len(words) - 1) if words[i] == "--key-env"]
    return dict(pair.split("=", 1) for pair in pairs)
