"""What sparkrack knows about the serving images the seeds ran (used by validation).

A profile names its image; the rules need two facts about it: which SGLang release it carries
(flag availability, version-scoped traps) and whether flashinfer can use cuDNN in it (the
``nvidia-cudnn-cu12`` wheel). An image not listed here must state those facts in the profile's
``image_info`` block.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageFacts:
    sglang: str
    """SGLang release the image carries (major.minor.patch)."""
    cudnn: bool | None
    """flashinfer's cuDNN path usable (True), known missing (False), unknown (None)."""
    source: str
    extras: tuple[str, ...] = ()
    """Upstream changes the image carries beyond its release (PR numbers as ``#NNNNN``)."""


IMAGES: dict[str, ImageFacts] = {
    "xomoxcc/dgx-spark-sglang:0.5.13-dev-nemotronh-mtp-sm121": ImageFacts(
        sglang="0.5.13",
        cudnn=False,
        source="seed 000 §1/§5/§7 (fi_cudnn: 'cuDNN is not available')",
        extras=("#24955", "#28102", "#27184", "#27998", "#21138"),
    ),
    "scitrera/dgx-spark-sglang:0.5.12": ImageFacts(
        sglang="0.5.12",
        cudnn=False,
        source=(
            "seed 002 (image; cuDNN startup crash of the Super sibling on the same tag); "
            "vroomfondel/dgxarley roles/k8s_dgx/model_profiles/"
            "nvidia-nvidia-nemotron-3-ultra-550b-a55b-nvfp4.yml ('cuDNN wheel missing')"
        ),
    ),
    "scitrera/dgx-spark-sglang:0.5.10": ImageFacts(
        sglang="0.5.10",
        cudnn=True,
        source="seed 003 (EP=4 matrix: fi_cudnn rows 33/34/36 stable)",
    ),
    "xomoxcc/dgx-spark-sglang:0.5.11-gemma4-sm121": ImageFacts(
        sglang="0.5.11",
        cudnn=None,
        source="seed 001 (v0.5.11 + PR #24436 cherry-pick)",
        extras=("#24436",),
    ),
}


def version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)
