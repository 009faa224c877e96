"""Image references and the facts sparkrack knows about a serving image (used by validation).

A profile names its image; the rules need facts about it: which engine release it carries (flag
availability, version-scoped traps, the release the upstream engine check runs), whether
flashinfer can use cuDNN in it (the ``nvidia-cudnn-cu12`` wheel), and which upstream changes it
carries beyond its release. Each engine lists the images the seeds ran with their facts
(``Engine.images``); an image not listed there states them in the profile's ``image_info`` block
(``image_info: {<engine>: 0.5.13, cudnn: false, torch: 2.11.0}``, :func:`stated_facts`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkrack.inputs.imageref import digest_of


@dataclass(frozen=True)
class ImageFacts:
    version: str
    """Engine release the image carries, or the nearest upstream release (major.minor.patch)."""
    cudnn: bool | None
    """flashinfer's cuDNN path usable (True), known missing (False), unknown (None)."""
    source: str
    extras: tuple[str, ...] = ()
    """Upstream changes the image carries beyond its release (PR numbers as ``#NNNNN``)."""
    torch: str | None = None
    """PyTorch release in the image (``2.11.0``), None when not known: it decides the spelling
    of the flight-recorder variables (:func:`sparkrack.fabric.ncclenv.flight_recorder_env`)."""


def image_slug(image: str) -> str:
    """A directory name for an image: its digest when it pins one, else a readable slug of the
    reference plus a hash of it (two references never share a directory)."""
    digest = digest_of(image)
    if digest:
        return digest.replace(":", "-")
    readable = re.sub(r"[^a-z0-9.]+", "-", image.lower()).strip("-")[:60]
    return f"{readable}-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def stated_facts(data: Mapping[str, Any], engine: str) -> ImageFacts | None:
    """The facts a profile states about its image in ``image_info`` (its ``<engine>`` release,
    ``cudnn``, ``extras``), or None when it states no release of ``engine``."""
    info = data.get("image_info")
    if not isinstance(info, Mapping) or not isinstance(info.get(engine), str):
        return None
    return ImageFacts(
        version=str(info[engine]),
        cudnn=info.get("cudnn") if isinstance(info.get("cudnn"), bool) else None,
        source="profile image_info",
        extras=tuple(str(e) for e in info.get("extras", ()) if isinstance(e, str)),
        torch=str(info["torch"]) if isinstance(info.get("torch"), str) else None,
    )


def version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
    return tuple(parts)
