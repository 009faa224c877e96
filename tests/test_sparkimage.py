"""The sparkrack image built in the lab (lab/sparkimage.py: image/Containerfile over the lab's
node image, the checkout's wheel, no registry, no PyPI): its commands run, it carries what the
fetch step needs, and its archive names it by the digest of the manifest inside. Holds
``/tmp/sparkrack-lab.lock`` like every other lab user. Skipped only without Docker."""

from __future__ import annotations

import fcntl
import importlib.metadata
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lab"))
import fetchlab  # noqa: E402

from sparkrack.serving.image_archive import read  # noqa: E402

pytestmark = pytest.mark.docker
LOCK = Path("/tmp/sparkrack-lab.lock")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """(tag, archive, reference) of the lab's sparkrack image."""
    if not fetchlab.docker_answers():
        pytest.skip("no Docker engine answers (`docker version` fails): the image needs one")
    import sparkimage

    import lab

    archive = tmp_path_factory.mktemp("image") / "sparkrack-image.tar"
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tag, _ = sparkimage.build(lab.ensure_image()[0])
        reference = sparkimage.save(tag, archive)
    yield tag, archive, reference


def run(tag: str, *argv: str, user: str = "65532:65532") -> subprocess.CompletedProcess[str]:
    """``argv`` in the image as the serving user, without a network (nothing may be fetched)."""
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "--user", user, tag, *argv],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


def test_the_image_runs_sparkrack_as_the_serving_user(image: tuple[str, Path, str]) -> None:
    tag, _, _ = image
    version = run(tag, "sparkrack", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.split() == ["sparkrack", importlib.metadata.version("sparkrack")]
    # --help loads the command table.
    top = run(tag, "sparkrack", "--help")
    assert top.returncode == 0 and "watch" in top.stdout and "memguard" in top.stdout
    watch = run(tag, "sparkrack", "watch", "--help")
    assert watch.returncode == 0 and "--url" in watch.stdout
    guard = run(tag, "sparkrack", "memguard", "--help")
    assert guard.returncode == 0 and "--node" in guard.stdout
    # Negative control: a command the image does not have fails.
    assert run(tag, "sparkrack", "no-such-command").returncode != 0


def test_the_image_carries_the_fetch_steps_tools(image: tuple[str, Path, str]) -> None:
    tag, _, _ = image
    tools = run(
        tag, "sh", "-c", "rsync --version && python3 -c 'import sys; print(sys.version_info[:2])'"
    )
    assert tools.returncode == 0, tools.stderr
    assert "rsync  version" in tools.stdout
    major, minor = (int(x) for x in tools.stdout.strip().splitlines()[-1].strip("()").split(","))
    assert (major, minor) >= (3, 10)
    # The installed sparkrack is this checkout's: its fetch step is the file in the tree.
    shipped = run(
        tag,
        "python3",
        "-c",
        "import sparkrack.serving.scripts.fetch_step as f; print(open(f.__file__).read())",
    )
    assert shipped.stdout == (ROOT / "sparkrack/serving/scripts/fetch_step.py").read_text() + "\n"


def test_the_archive_names_the_image_by_its_manifest_digest(image: tuple[str, Path, str]) -> None:
    _, archive, reference = image
    found = read(archive)
    assert found.reference == reference
    assert reference.startswith("sparkrack.invalid/sparkrack@sha256:")
