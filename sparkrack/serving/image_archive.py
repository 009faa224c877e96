"""The sparkrack image as an archive each node's containerd imports, and its reference by digest.

``make image`` builds image/Containerfile, saves the image (``docker save``: the Docker archive
format) and :func:`to_oci` rewrites that archive as an OCI image layout (``index.json``,
``oci-layout``, ``blobs/sha256/...``) whose manifest sparkrack writes itself, so its digest is
known before any node imports it: :func:`read` gives ``name@sha256:<manifest digest>``, the
reference the fetch, watchdog and memory-guard containers name. containerd keeps an imported OCI
manifest byte for byte, so the digest a node holds after ``ctr images import`` (or K3s' airgap
image directory) is the same one.

:func:`read` checks every blob against its digest and size, as containerd's import does, and
refuses an archive that is not one (:class:`~sparkrack.errors.SparkrackError` naming the file).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sparkrack.errors import Problem, SparkrackError

OCI_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG: Final = "application/vnd.oci.image.config.v1+json"
OCI_LAYER: Final = "application/vnd.oci.image.layer.v1.tar"
OCI_INDEX: Final = "application/vnd.oci.image.index.v1+json"
NAME_ANNOTATION: Final = "io.containerd.image.name"
REF_ANNOTATION: Final = "org.opencontainers.image.ref.name"
KEY: Final = "serving_image_archive"
RULE: Final = "image-archive"
NAME = re.compile(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
"""``repository:tag`` the archive names its image (lower case repository, one tag)."""


@dataclass(frozen=True)
class Archive:
    name: str
    """``repository:tag`` as containerd names the imported image."""
    digest: str
    """``sha256:...`` of the image's manifest."""

    @property
    def reference(self) -> str:
        """What a pod names: the repository pinned by the manifest's digest."""
        return f"{self.name.rsplit(':', 1)[0]}@{self.digest}"


def _refuse(path: Path | str, why: str) -> SparkrackError:
    return SparkrackError(
        Problem(
            str(path),
            KEY,
            why,
            "rebuild it with `make image` (it writes build/sparkrack-image.tar) and name that file",
            RULE,
        )
    )


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _member(tar: tarfile.TarFile, name: str, path: Path | str) -> bytes:
    try:
        handle = tar.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        raise _refuse(path, f"has no {name}")
    return handle.read()


def to_oci(docker_archive: Path, out: Path, name: str) -> Archive:
    """Rewrite a ``docker save`` archive of one image as an OCI image layout named ``name``
    (``repository:tag``) at ``out``."""
    if not NAME.match(name):
        raise _refuse(out, f"cannot name its image {name!r}: repository:tag in lower case")
    with tarfile.open(docker_archive) as src:
        manifest = json.loads(_member(src, "manifest.json", docker_archive))
        if not isinstance(manifest, list) or len(manifest) != 1:
            raise _refuse(docker_archive, "does not hold exactly one image")
        (image,) = manifest
        config = _member(src, image["Config"], docker_archive)
        layers = [_member(src, layer, docker_archive) for layer in image["Layers"]]
    blobs = {_digest(config): config, **{_digest(layer): layer for layer in layers}}
    oci_manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": _digest(config), "size": len(config)},
            "layers": [
                {"mediaType": OCI_LAYER, "digest": _digest(layer), "size": len(layer)}
                for layer in layers
            ],
        }
    )
    digest = _digest(oci_manifest)
    blobs[digest] = oci_manifest
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest,
                    "size": len(oci_manifest),
                    "annotations": {
                        NAME_ANNOTATION: name,
                        REF_ANNOTATION: name.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w") as dst:
        files = {
            "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
            "index.json": index,
            **{f"blobs/sha256/{d.split(':', 1)[1]}": data for d, data in sorted(blobs.items())},
        }
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            dst.addfile(info, io.BytesIO(data))
    return Archive(name, digest)


def read(path: Path | str) -> Archive:
    """The image an OCI archive holds, every blob checked against its digest and size."""
    try:
        with tarfile.open(path) as tar:
            return _read(tar, path)
    except (OSError, tarfile.TarError) as exc:
        raise _refuse(path, f"is not a readable tar archive ({type(exc).__name__})") from None


def _read(tar: tarfile.TarFile, path: Path | str) -> Archive:
    def blob(descriptor: dict[str, Any]) -> bytes:
        digest = str(descriptor.get("digest", ""))
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise _refuse(path, f"names a blob by {digest!r}, not a sha256 digest")
        data = _member(tar, f"blobs/sha256/{digest.split(':', 1)[1]}", path)
        if _digest(data) != digest or len(data) != descriptor.get("size"):
            raise _refuse(path, f"has a blob that does not match its digest {digest}")
        return data

    try:
        index = json.loads(_member(tar, "index.json", path))
        (entry,) = index["manifests"]
        name = str(entry.get("annotations", {}).get(NAME_ANNOTATION, ""))
        manifest = json.loads(blob(entry))
        for descriptor in [manifest["config"], *manifest["layers"]]:
            blob(descriptor)
    except (ValueError, KeyError, TypeError) as exc:
        raise _refuse(path, f"is not an OCI image layout of one image ({exc})") from None
    if not NAME.match(name):
        raise _refuse(path, f"names its image {name!r}, not repository:tag")
    return Archive(name, str(entry["digest"]))


def main(argv: list[str]) -> int:
    """``python -m sparkrack.serving.image_archive DOCKER_TAR OUT NAME``: write the OCI archive
    and print its reference (``make image``)."""
    docker_archive, out, name = argv
    print(to_oci(Path(docker_archive), Path(out), name).reference)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
