"""A stand-in for ``docker`` in the owner's guide test: ``make image`` runs its real recipe with
this on PATH instead of a container engine (the test machine runs none).

It answers the two calls the Makefile makes and refuses what Docker refuses there:

* ``build [--build-arg K=V] -f FILE -t TAG CONTEXT``: the Containerfile must exist and the
  context must hold the wheel its ``COPY sparkrack-*.whl`` needs (Docker: "COPY failed: no
  source files were specified"); the tag is recorded in ``$SPARKRACK_DOCKER_STANDIN/images``.
* ``save -o PATH TAG``: an unknown tag is refused ("No such image"); otherwise a ``docker save``
  archive whose one layer holds the context's wheel, so its digest follows the checkout.

Anything else exits 125 with Docker's "unknown command". No image is built and nothing runs in
a container.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
from pathlib import Path


def _state() -> Path:
    return Path(os.environ["SPARKRACK_DOCKER_STANDIN"])


def _tar_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build(args: list[str]) -> int:
    opts: dict[str, str] = {}
    rest: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in ("-f", "-t", "--build-arg"):
            opts[arg] = next(it)
        else:
            rest.append(arg)
    if len(rest) != 1 or "-f" not in opts or "-t" not in opts:
        print('"docker build" requires exactly 1 argument, -f and -t', file=sys.stderr)
        return 1
    context, containerfile = Path(rest[0]), Path(opts["-f"])
    if not containerfile.is_file():
        print(f"unable to prepare context: {containerfile}: no such file", file=sys.stderr)
        return 1
    wheels = sorted(context.glob("sparkrack-*.whl"))
    if not wheels:
        print("COPY failed: no source files were specified", file=sys.stderr)
        return 1
    _state().mkdir(parents=True, exist_ok=True)
    record = {"tag": opts["-t"], "wheel": str(wheels[0])}
    (_state() / "images").write_text(json.dumps(record))
    return 0


def save(args: list[str]) -> int:
    if len(args) != 3 or args[0] != "-o":
        print('"docker save" requires -o PATH and an image', file=sys.stderr)
        return 1
    path, tag = Path(args[1]), args[2]
    images = _state() / "images"
    known = json.loads(images.read_text()) if images.is_file() else {}
    if known.get("tag") != tag:
        print(f"Error response from daemon: No such image: {tag}", file=sys.stderr)
        return 1
    wheel = Path(known["wheel"])
    layer = _tar_bytes({f"tmp/{wheel.name}": wheel.read_bytes()})
    diff_id = f"sha256:{hashlib.sha256(layer).hexdigest()}"
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    manifest = [{"Config": "config.json", "RepoTags": [tag], "Layers": ["layer/layer.tar"]}]
    path.write_bytes(
        _tar_bytes(
            {
                "manifest.json": json.dumps(manifest).encode(),
                "config.json": config,
                "layer/layer.tar": layer,
            }
        )
    )
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "build":
        return build(argv[1:])
    if argv and argv[0] == "save":
        return save(argv[1:])
    print(
        f"docker: unknown command: docker {' '.join(argv[:1])} (the guide's stand-in)",
        file=sys.stderr,
    )
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
