"""The lab control plane's binaries: built from the lab's Go modules (lab/controlplane/,
lab/kwok/) at the Kubernetes release of the pinned K3s when their inputs changed, and the
Prometheus Operator CRDs from the operator's Go module. Used by lab/controlplane.py; stdlib and
PyYAML, typed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane_pki import write_file  # noqa: E402  (lab/ is a folder of scripts, not a package)

ROOT = Path(__file__).resolve().parent.parent
LAB_DIR = ROOT / "lab"
BIN_DIR = ROOT / ".cache" / "controlplane" / "bin"
CRD_DIR = ROOT / ".cache" / "controlplane" / "crds"
"""The Prometheus Operator CRDs the lab's monitoring role applies instead of the chart's."""
OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_VERSION = "v0.77.1"
"""The operator kube-prometheus-stack 65.1.1 (sparkrack/observe/stack.py) runs."""
OPERATOR_SUM = "h1:4SoJcwxgXwLTvS4S+VDmwoHnwoHeZWvMx8G0p2ymt/w="
"""go.sum hash of that module version; ``go mod download`` checks it against the checksum
database too."""
KUBERNETES_VERSION = "v1.35.3"
"""k8s.io/kubernetes in lab/controlplane/go.mod: the release of the pinned K3s (a test compares
it with ``k3s_install_version``)."""
KUBERNETES_COMMIT = "6c1cd99aef09161ddb07b8ade6c9564e9b9bfe27"
"""The commit of that tag (the module's Origin.Hash on the Go module proxy), for ``/version``."""


class ControlPlaneError(Exception):
    """The control plane could not be built, started or stopped; the message says why."""


class BuildUnavailable(ControlPlaneError):
    """No Go toolchain here: the binaries cannot be built (tests needing the API skip)."""


def log(message: str) -> None:
    print(f"[controlplane] {message}", flush=True)


# --- build --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoBinary:
    """One binary built from one of the lab's Go modules."""

    name: str
    module: Path
    package: str
    ldflags: str

    @property
    def path(self) -> Path:
        return BIN_DIR / self.name

    def inputs(self) -> list[Path]:
        return sorted([self.module / "go.mod", self.module / "go.sum", *self.module.glob("*.go")])

    def key(self, go_version: str) -> str:
        """Hash of what the binary is built from: sources, pins, flags and the toolchain."""
        digest = hashlib.sha256(f"{go_version}\n{self.package}\n{self.ldflags}\n".encode())
        for path in self.inputs():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()


def _version_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={KUBERNETES_VERSION}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitCommit={KUBERNETES_COMMIT}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


BINARIES = (
    GoBinary("controlplane", LAB_DIR / "controlplane", ".", _version_ldflags()),
    GoBinary("kwok", LAB_DIR / "kwok", "sigs.k8s.io/kwok/cmd/kwok", "-s -w"),
)


def go_tool() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildUnavailable(
            "no `go` on PATH: the lab's control plane is built from Go modules — install Go "
            "1.26 (the CI machines carry it)"
        )
    return go


def _go_version(go: str) -> str:
    return subprocess.run(
        [go, "env", "GOVERSION"], check=True, capture_output=True, text=True
    ).stdout.strip()


def built() -> bool:
    """Every binary exists and was built from the current inputs (no Go needed to tell)."""
    return all(b.path.is_file() and stamp_path(b).is_file() for b in BINARIES) and all(
        stamp_path(b).read_text().split("\n", 1)[0] == _inputs_digest(b) for b in BINARIES
    )


def stamp_path(binary: GoBinary) -> Path:
    return binary.path.with_suffix(".stamp")


def _inputs_digest(binary: GoBinary) -> str:
    return binary.key("")


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's ``=`` (value) tag."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [r for r in resolvers if r[0] != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def operator_crds(go: str) -> Path:
    """The operator's CRD manifests from its Go module (downloaded and verified by ``go``,
    compared with the pinned hash), copied to :data:`CRD_DIR`."""
    marker = CRD_DIR / ".version"
    if marker.is_file() and marker.read_text() == f"{OPERATOR_VERSION} {OPERATOR_SUM}\n":
        return CRD_DIR
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{OPERATOR_MODULE}@{OPERATOR_VERSION}"],
        capture_output=True,
        text=True,
        cwd=LAB_DIR / "controlplane",
    )
    info = json.loads(result.stdout or "{}") if result.stdout.strip() else {}
    if result.returncode != 0 or info.get("Error"):
        raise ControlPlaneError(
            f"go mod download {OPERATOR_MODULE}@{OPERATOR_VERSION} failed: "
            f"{info.get('Error') or result.stderr.strip()}"
        )
    if info.get("Sum") != OPERATOR_SUM:
        raise ControlPlaneError(
            f"{OPERATOR_MODULE}@{OPERATOR_VERSION} has hash {info.get('Sum')}, pinned "
            f"{OPERATOR_SUM}: refusing it"
        )
    source = Path(info["Dir"]) / "example" / "prometheus-operator-crd"
    shutil.rmtree(CRD_DIR, ignore_errors=True)
    CRD_DIR.mkdir(parents=True)
    for crd in sorted(source.glob("*.yaml")):
        # As JSON: YAML 1.1 loaders read a bare `=` (a label-matcher enum value) as a tag.
        data = yaml.load(crd.read_text(), Loader=_Yaml12Loader)
        write_file(CRD_DIR / f"{crd.stem}.json", json.dumps(data))
    marker.write_text(f"{OPERATOR_VERSION} {OPERATOR_SUM}\n")
    return CRD_DIR


def build(force: bool = False) -> dict[str, float | None]:
    """Build each binary whose inputs or toolchain changed; seconds per binary (None: cached).

    ``-mod=readonly`` makes the build use exactly the versions go.sum pins; modules come from
    the Go module proxy through ``go`` itself and are cached in GOMODCACHE, compiled packages
    in GOCACHE.
    """
    go = go_tool()
    go_version = _go_version(go)
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    operator_crds(go)
    timings: dict[str, float | None] = {}
    for binary in BINARIES:
        key = binary.key(go_version)
        stamp = stamp_path(binary)
        current = f"{_inputs_digest(binary)}\n{key}\n"
        if not force and binary.path.is_file() and stamp.is_file() and stamp.read_text() == current:
            timings[binary.name] = None
            continue
        log(f"go build {binary.name} ({binary.module.relative_to(ROOT)}, {go_version})")
        start = time.monotonic()
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
        tmp = binary.path.with_suffix(".tmp")
        result = subprocess.run(
            [go, "build", "-trimpath", "-ldflags", binary.ldflags, "-o", str(tmp), binary.package],
            cwd=binary.module,
            env=env,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ControlPlaneError(
                f"go build {binary.name} failed (exit {result.returncode}):\n"
                f"{result.stderr.strip()[-4000:]}"
            )
        tmp.replace(binary.path)
        stamp.write_text(current)
        timings[binary.name] = time.monotonic() - start
        log(f"{binary.name} built in {timings[binary.name]:.0f} s")
    return timings
