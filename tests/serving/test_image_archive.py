"""The image archive the nodes import (sparkrack.serving.image_archive): a ``docker save``
archive rewritten as an OCI layout whose manifest digest is known before any import, and a
reader that refuses what containerd's import refuses (a blob that does not match its digest)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from sparkrack.errors import SparkrackError
from sparkrack.serving.image_archive import NAME_ANNOTATION, read, to_oci

NAME = "sparkrack.invalid/sparkrack:0.1.0"


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _docker_save(path: Path) -> Path:
    layers = [b"layer one" * 100, b"layer two" * 50]
    diff_ids = [f"sha256:{hashlib.sha256(layer).hexdigest()}" for layer in layers]
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    return _tar(
        path,
        {
            "manifest.json": json.dumps(
                [
                    {
                        "Config": "abc.json",
                        "RepoTags": ["x:1"],
                        "Layers": ["1/layer.tar", "2/layer.tar"],
                    }
                ]
            ).encode(),
            "abc.json": config,
            "1/layer.tar": layers[0],
            "2/layer.tar": layers[1],
        },
    )


def _files(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_the_reference_is_the_digest_of_the_manifest_in_the_archive(tmp_path: Path) -> None:
    made = to_oci(_docker_save(tmp_path / "d.tar"), tmp_path / "oci.tar", NAME)
    files = _files(tmp_path / "oci.tar")
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    manifest = files[f"blobs/sha256/{made.digest.split(':')[1]}"]
    assert made.digest == f"sha256:{hashlib.sha256(manifest).hexdigest()}" == entry["digest"]
    assert entry["annotations"][NAME_ANNOTATION] == NAME
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    # Each layer keeps its bytes: its digest is the config's diff_id (what containerd unpacks).
    config = json.loads(files[f"blobs/sha256/{json.loads(manifest)['config']['digest'][7:]}"])
    assert [d["digest"] for d in json.loads(manifest)["layers"]] == config["rootfs"]["diff_ids"]
    assert read(tmp_path / "oci.tar") == made
    assert made.reference == f"sparkrack.invalid/sparkrack@{made.digest}"
    # The same image gives the same archive: the reference does not depend on when it was made.
    again = to_oci(tmp_path / "d.tar", tmp_path / "again.tar", NAME)
    assert again == made and _files(tmp_path / "again.tar") == files


def test_a_blob_that_does_not_match_its_digest_is_refused(tmp_path: Path) -> None:
    made = to_oci(_docker_save(tmp_path / "d.tar"), tmp_path / "oci.tar", NAME)
    files = _files(tmp_path / "oci.tar")
    manifest = json.loads(files[f"blobs/sha256/{made.digest[7:]}"])
    layer = f"blobs/sha256/{manifest['layers'][1]['digest'][7:]}"
    files[layer] = files[layer][:-1] + b"X"
    with pytest.raises(SparkrackError, match="does not match its digest") as refused:
        read(_tar(tmp_path / "bad.tar", files))
    assert "serving_image_archive" in str(refused.value) and "make image" in str(refused.value)


@pytest.mark.parametrize(
    "files",
    [
        {"hello.txt": b"not an image"},
        {"index.json": b"{}"},
        {"index.json": json.dumps({"manifests": [{"digest": "md5:00"}]}).encode()},
    ],
)
def test_what_is_not_an_image_layout_is_refused(tmp_path: Path, files: dict[str, bytes]) -> None:
    with pytest.raises(SparkrackError, match="serving_image_archive"):
        read(_tar(tmp_path / "x.tar", files))
    with pytest.raises(SparkrackError, match="not a readable tar"):
        read(tmp_path / "missing.tar")


def test_a_name_without_a_tag_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SparkrackError, match="repository:tag"):
        to_oci(_docker_save(tmp_path / "d.tar"), tmp_path / "oci.tar", "Sparkrack")


def _images(tmp_path: Path, **extra: object) -> set[str]:
    import yaml

    from sparkrack.serving.deployments.bundle import from_inventory, render_serving

    root = Path(__file__).resolve().parents[2]
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text((root / "inventories/example/hosts.yml").read_text())
    base = yaml.safe_load((root / "inventories/example/group_vars/all.yml").read_text())
    base.update(extra)
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(base))
    text = json.dumps(render_serving(from_inventory(str(inv), check_memory=False)))
    return _refs(text)


def _refs(text: str) -> set[str]:
    import re

    return set(re.findall(r'"image": "([^"]+)"', text))


def test_the_archive_names_the_fetch_and_watchdog_image_unless_the_inventory_does(
    tmp_path: Path,
) -> None:
    made = to_oci(_docker_save(tmp_path / "d.tar"), tmp_path / "oci.tar", NAME)
    archive = str(tmp_path / "oci.tar")
    from_archive = _images(
        tmp_path / "a",
        serving_image_archive=archive,
        serving_fetch_image=None,
        serving_watchdog_image=None,
    )
    assert made.reference in from_archive
    assert not any("registry.example.com/sparkrack" in ref for ref in from_archive)
    # An owner with a registry names their own: it wins over the archive.
    own = "registry.example.com/mine/fetch@sha256:" + "a" * 64
    named = _images(tmp_path / "b", serving_image_archive=archive, serving_fetch_image=own)
    assert own in named
    # Without the archive, nothing names its reference (negative control).
    assert made.reference not in _images(tmp_path / "c")
