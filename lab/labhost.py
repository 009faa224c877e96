"""The lab's Docker side that every lab step shares: the engine (Debian's docker.io installed
and dockerd started when absent; a running engine is left alone), the node image (built from
scratch with mmdebstrap, tagged with the hash of its recipe in lab/image/), and the paths,
names and commands the lab driver (lab/lab.py) and its nodes (lab/labnodes.py) use. Stdlib
only, typed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAB_DIR = ROOT / "lab"
IMAGE_DIR = LAB_DIR / "image"
STATE_DIR = LAB_DIR / ".state"
INVENTORY = ROOT / "inventories" / "lab"
VENV_BIN = ROOT / ".venv" / "bin"

PREFIX = "sparkrack-"
IMAGE_REPO = "sparkrack-node"
SUITE = "bookworm"
# Bump when the build procedure below changes in a way the recipe files do not show.
RECIPE_VERSION = "1"
MGMT_NETWORK = "sparkrack-mgmt"
MGMT_SUBNET = ipaddress.IPv4Network("172.28.250.0/24")
MGMT_GATEWAY = "172.28.250.1"
FABRIC_NETWORK = "sparkrack-fabric"
"""Docker network standing in for the first rail; rail r > 0 uses ``sparkrack-fabric<r>``."""
LABEL = "io.sparkrack.lab"
DOCKERD_LOG = Path("/var/log/sparkrack-dockerd.log")
DOCKER_SOCKET = Path("/var/run/docker.sock")

# How a systemd container boots on this kind of machine (no --privileged: the engine lacks
# CAP_SYS_RESOURCE). /sys and /proc/sys stay read-only: a container must never write a
# kernel-global sysctl of the machine that runs the lab.
SYSTEMD_RUN_ARGS = [
    "--cap-add",
    "SYS_ADMIN",
    "--cap-add",
    "NET_ADMIN",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--cgroupns=host",
    "--stop-signal",
    "SIGRTMIN+3",
    "-e",
    "container=docker",
]


class LabError(Exception):
    """A lab step failed; the message says which and what to do."""


def log(message: str) -> None:
    print(f"[lab] {message}", flush=True)


def run(
    cmd: Sequence[str],
    *,
    check: bool = True,
    capture: bool = True,
    env: dict[str, str] | None = None,
    stdin: Any = None,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(cmd),
        check=False,
        text=True,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        capture_output=capture,
        env=env,
        cwd=ROOT,
    )
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip() if capture else ""
        raise LabError(f"`{' '.join(cmd)}` failed (exit {result.returncode}): {detail}")
    return result


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["docker", *args], check=check)


# --- engine -------------------------------------------------------------------------------


def _apt_install(packages: list[str], updated: list[bool]) -> None:
    if os.geteuid() != 0:
        raise LabError(f"{' '.join(packages)} missing and not root: install them (apt-get install)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not updated[0]:
        log("apt-get update")
        run(["apt-get", "update", "-q"], env=env)
        updated[0] = True
    log(f"apt-get install {' '.join(packages)}")
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], env=env)


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return docker("version", "--format", "{{.Server.Version}}", check=False).returncode == 0


_APT_UPDATED = [False]


def ensure_engine() -> None:
    """Use a running engine as is; else install Debian's docker.io if absent and start dockerd."""
    if engine_answers():
        version = docker("version", "--format", "{{.Server.Version}}").stdout.strip()
        log(f"docker engine {version} is running (left as is)")
        return
    if shutil.which("docker") is None or shutil.which("dockerd") is None:
        _apt_install(["docker.io"], _APT_UPDATED)
    log(f"starting dockerd (log: {DOCKERD_LOG})")
    with DOCKERD_LOG.open("ab") as out:
        subprocess.Popen(
            ["dockerd"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if DOCKER_SOCKET.exists() and engine_answers():
            log("dockerd is up")
            return
        time.sleep(1)
    raise LabError(f"dockerd did not answer within 90 s; see {DOCKERD_LOG}")


# --- image --------------------------------------------------------------------------------


def apt_sources() -> list[Path]:
    """The machine's own Debian sources (deb822 or one-line), used as the image's mirror."""
    base = Path("/etc/apt")
    found = [p for p in [base / "sources.list"] if p.is_file() and _has_entries(p)]
    found += sorted(
        p
        for p in (base / "sources.list.d").glob("*")
        if p.suffix in {".list", ".sources"} and p.is_file() and _has_entries(p)
    )
    return found


def _has_entries(path: Path) -> bool:
    text = path.read_text(encoding="utf-8", errors="replace")
    return any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines())


def packages() -> list[str]:
    lines = (IMAGE_DIR / "packages.txt").read_text(encoding="utf-8").splitlines()
    return [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]


def recipe_hash() -> str:
    digest = hashlib.sha256()
    digest.update(f"{SUITE}\n{RECIPE_VERSION}\n".encode())
    for path in [IMAGE_DIR / "packages.txt", IMAGE_DIR / "customize.sh", *apt_sources()]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def image_tag() -> str:
    return f"{IMAGE_REPO}:{recipe_hash()}"


def ensure_image() -> tuple[str, float | None]:
    """Return (tag, build seconds or None when the cached image was used)."""
    tag = image_tag()
    if docker("image", "inspect", tag, check=False).returncode == 0:
        log(f"image {tag} is cached (recipe unchanged)")
        return tag, None
    if shutil.which("mmdebstrap") is None:
        _apt_install(["mmdebstrap"], _APT_UPDATED)
    sources = apt_sources()
    if not sources:
        raise LabError("no apt sources in /etc/apt/sources.list*: configure a Debian mirror")
    log(
        f"building image {tag} with mmdebstrap ({SUITE}, "
        f"mirror from {', '.join(map(str, sources))})"
    )
    start = time.monotonic()
    mm = [
        "mmdebstrap",
        "--variant=minbase",
        "--mode=root",
        "--format=tar",
        "--include=" + ",".join(packages()),
        "--skip=cleanup/apt/lists",
        f"--customize-hook=upload {IMAGE_DIR / 'customize.sh'} /tmp/sparkrack-customize.sh",
        '--customize-hook=chroot "$1" /bin/sh /tmp/sparkrack-customize.sh',
        '--customize-hook=rm -f "$1/tmp/sparkrack-customize.sh"',
        SUITE,
        "-",
        *map(str, sources),
    ]
    importer = [
        "docker",
        "import",
        "--change",
        'CMD ["/sbin/init"]',
        "--change",
        "ENV container=docker",
        "--change",
        f"LABEL {LABEL}=image {LABEL}.recipe={recipe_hash()}",
        "-",
        tag,
    ]
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    build_log = STATE_DIR / "image-build.log"
    with build_log.open("w") as errlog:
        producer = subprocess.Popen(mm, stdout=subprocess.PIPE, stderr=errlog, cwd=ROOT)
        consumer = subprocess.run(importer, stdin=producer.stdout, capture_output=True, text=True)
        assert producer.stdout is not None
        producer.stdout.close()
        producer.wait()
    if producer.returncode != 0 or consumer.returncode != 0:
        docker("image", "rm", "-f", tag, check=False)
        raise LabError(
            f"image build failed (mmdebstrap exit {producer.returncode}, docker import exit "
            f"{consumer.returncode}: {consumer.stderr.strip()}); see {build_log}"
        )
    seconds = time.monotonic() - start
    log(f"image {tag} built in {seconds:.0f} s")
    # Older builds of the lab image are superseded; remove them unless a container uses them.
    for line in docker(
        "image", "ls", IMAGE_REPO, "--format", "{{.Repository}}:{{.Tag}}"
    ).stdout.split():
        if line != tag:
            docker("image", "rm", line, check=False)
    return tag, seconds


def venv_tool(name: str) -> str:
    tool = VENV_BIN / name
    return str(tool) if tool.exists() else name
