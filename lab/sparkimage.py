"""The sparkrack image in the lab: image/Containerfile built over the lab's node image.

The node image comes from Debian packages through mmdebstrap + ``docker import``
(``lab.ensure_image``, whose tag the caller passes in); this builds the owner's Containerfile on
top of it with the wheel of this checkout, so the lab's sparkrack image is the owner's recipe
with no registry and no PyPI. Every caller holds ``/tmp/sparkrack-lab.lock`` (the lab's lock)
around Docker. ``lab.py``'s converge builds it and saves the OCI archive the serve play imports
into each node's containerd.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "image"
CONTEXT = ROOT / "build" / "lab-image"
REPO = "sparkrack-image"


class ImageError(RuntimeError):
    """A docker or pip step of the image failed; the message names the step and its stderr."""


def _run(*argv: str, timeout: float = 900) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ImageError(
            f"{' '.join(argv[:3])} -> {done.returncode}: {done.stderr.strip()[-2000:]}"
        )
    return done.stdout


def context() -> Path:
    """The build context: the checkout's wheel and the recipe's two files."""
    shutil.rmtree(CONTEXT, ignore_errors=True)
    CONTEXT.mkdir(parents=True)
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(CONTEXT), str(ROOT))  # fmt: skip
    for name in ("Containerfile", "packages.txt"):
        shutil.copy(RECIPE / name, CONTEXT / name)
    return CONTEXT


def tag_of(base: str, ctx: Path) -> str:
    """The tag names the base and every file of the context (a wheel by the files inside, not
    its zip's timestamps): a changed checkout, a new tag; the same one, the cached image."""
    digest = hashlib.sha256(base.encode())
    for path in sorted(ctx.iterdir()):
        digest.update(path.name.encode() + b"\0")
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as wheel:
                for name in sorted(wheel.namelist()):
                    digest.update(name.encode() + b"\0" + wheel.read(name))
        else:
            digest.update(path.read_bytes())
    return f"{REPO}:{digest.hexdigest()[:12]}"


def build(base: str, log: Callable[[str], None] = print) -> tuple[str, str]:
    """(tag, image ID) of the sparkrack image over the lab's node image ``base``."""
    ctx = context()
    tag = tag_of(base, ctx)
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
        log(f"building {tag} from image/Containerfile over {base}")
        _run("docker", "build", "--build-arg", f"BASE={base}", "-f", str(ctx / "Containerfile"),
             "-t", tag, str(ctx))  # fmt: skip
        # Older builds are superseded; Docker keeps any a container still uses.
        for old in _run(
            "docker", "image", "ls", REPO, "--format", "{{.Repository}}:{{.Tag}}"
        ).split():
            if old != tag:
                subprocess.run(["docker", "image", "rm", old], capture_output=True, check=False)
    image_id = _run("docker", "image", "inspect", "--format", "{{.Id}}", tag).strip()
    return tag, image_id


def save(tag: str, path: Path) -> str:
    """The image as the OCI archive the play imports into containerd (``make image``'s steps:
    ``docker save``, then :func:`image_archive.to_oci`); its reference by digest."""
    from sparkrack.serving import image_archive

    docker_tar = CONTEXT / "docker.tar"
    _run("docker", "save", "-o", str(docker_tar), tag)
    name = f"sparkrack.invalid/sparkrack:lab-{tag.rsplit(':', 1)[1]}"
    return image_archive.to_oci(docker_tar, path, name).reference
