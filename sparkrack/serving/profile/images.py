"""What sparkrack knows about the serving images the seeds ran (used by validation).

A profile names its image; the rules need facts about it: which engine release it carries (flag
availability, version-scoped traps, the release the upstream engine check runs), whether
flashinfer can use cuDNN in it (the ``nvidia-cudnn-cu12`` wheel), and which upstream changes it
carries beyond its release. An image not listed here states those facts in the profile's
``image_info`` block (``image_info: {sglang: 0.5.13, cudnn: false}``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ImageFacts:
    engine: str
    version: str
    """Engine release the image carries, or the nearest upstream release (major.minor.patch)."""
    cudnn: bool | None
    """flashinfer's cuDNN path usable (True), known missing (False), unknown (None)."""
    source: str
    extras: tuple[str, ...] = ()
    """Upstream changes the image carries beyond its release (PR numbers as ``#NNNNN``)."""

    @property
    def sglang(self) -> str:
        """The SGLang release (SGLang images only)."""
        return self.version


IMAGES: dict[str, dict[str, ImageFacts]] = {
    "sglang": {
        "xomoxcc/dgx-spark-sglang:0.5.13-dev-nemotronh-mtp-sm121": ImageFacts(
            engine="sglang",
            version="0.5.13",
            cudnn=False,
            source="seed 000 §1/§5/§7 (fi_cudnn: 'cuDNN is not available')",
            extras=("#24955", "#28102", "#27184", "#27998", "#21138"),
        ),
        "scitrera/dgx-spark-sglang:0.5.12": ImageFacts(
            engine="sglang",
            version="0.5.12",
            cudnn=False,
            source=(
                "seed 002 (image; cuDNN startup crash of the Super sibling on the same tag); "
                "vroomfondel/dgxarley roles/k8s_dgx/model_profiles/"
                "nvidia-nvidia-nemotron-3-ultra-550b-a55b-nvfp4.yml ('cuDNN wheel missing')"
            ),
        ),
        "scitrera/dgx-spark-sglang:0.5.10": ImageFacts(
            engine="sglang",
            version="0.5.10",
            cudnn=True,
            source="seed 003 (EP=4 matrix: fi_cudnn rows 33/34/36 stable)",
        ),
        "xomoxcc/dgx-spark-sglang:0.5.11-gemma4-sm121": ImageFacts(
            engine="sglang",
            version="0.5.11",
            cudnn=None,
            source="seed 001 (v0.5.11 + PR #24436 cherry-pick)",
            extras=("#24436",),
        ),
    },
    "vllm": {
        "vllm/vllm-openai:cu130-nightly": ImageFacts(
            engine="vllm",
            version="0.19.0",
            cudnn=None,
            source=(
                "seed 004 (MTP + NVFP4 needs the nightly after release 0.17.1; its speculative "
                "config passes moe_backend); 0.19.0 is the first PyPI release whose "
                "speculative config has moe_backend"
            ),
        ),
    },
    "trtllm": {
        "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc9": ImageFacts(
            engine="trtllm",
            version="1.3.0rc9",
            cudnn=None,
            source="seed 004 (TensorRT-LLM image)",
        ),
    },
}
"""engine name -> image reference (without digest) -> what sparkrack knows about it."""

# A tag that names a moving target: what runs can change without the profile changing.
MOVING_TAG = re.compile(r":(?:latest|[^:/@]*nightly[^:/@]*)$")


def is_moving_tag(image: str) -> bool:
    """True for ``:latest`` and ``*nightly*`` tags; a digest (``@sha256:…``) never moves."""
    return "@" not in image and bool(MOVING_TAG.search(image))


DIGEST = re.compile(r"@sha256:([a-f0-9]{64})$")


def without_digest(image: str) -> str:
    """``repo[:tag]`` of a reference (``repo:tag@sha256:…`` -> ``repo:tag``)."""
    return image.split("@", 1)[0]


def digest_of(image: str) -> str | None:
    """The ``sha256:…`` digest a reference pins, or None."""
    found = DIGEST.search(image)
    return f"sha256:{found.group(1)}" if found else None


def pin_state(image: str) -> str:
    """How a reference pins what runs: ``digest``, ``moving tag`` or ``tag``."""
    if digest_of(image):
        return "digest"
    return "moving tag" if is_moving_tag(image) else "tag"


def image_slug(image: str) -> str:
    """A directory name for an image: its digest when it pins one, else a readable slug of the
    reference plus a hash of it (two references never share a directory)."""
    digest = digest_of(image)
    if digest:
        return digest.replace(":", "-")
    readable = re.sub(r"[^a-z0-9.]+", "-", image.lower()).strip("-")[:60]
    return f"{readable}-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def image_facts(data: dict[str, Any]) -> ImageFacts | None:
    """Facts about a profile's image: the table above, else the profile's ``image_info``."""
    name = str(data.get("engine", "sglang"))
    image = without_digest(str(data.get("image", "")))
    info = data.get("image_info")
    if isinstance(info, dict) and isinstance(info.get(name), str):
        return ImageFacts(
            engine=name,
            version=str(info[name]),
            cudnn=info.get("cudnn") if isinstance(info.get("cudnn"), bool) else None,
            source="profile image_info",
            extras=tuple(str(e) for e in info.get("extras", ()) if isinstance(e, str)),
        )
    return IMAGES.get(name, {}).get(image)


def version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
    return tuple(parts)
