"""A real Kubernetes API for tests: the lab's control plane (lab/controlplane.py) on loopback.

``kube_api`` (session scope) builds the binaries when their inputs changed, starts etcd,
kube-apiserver, controller-manager, scheduler and KWOK in a temporary folder on 127.0.0.1 and
stops exactly those processes at the end. Tests that use it skip only when no Go toolchain can
build the binaries; ``make api`` sets SPARKRACK_REQUIRE_API=1, and then a missing toolchain
fails instead. Registered in tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def controlplane_module() -> ModuleType:
    """lab/controlplane.py as a module (lab/ is not a package)."""
    name = "sparkrack_lab_controlplane"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "lab" / "controlplane.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class KubeAPI:
    """A running control plane: its admin kubeconfig, server URL and the launcher's handle."""

    kubeconfig: Path
    server: str
    plane: Any

    def client(self) -> Any:
        """A kubernetes ApiClient authenticated as the admin (system:masters)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def namespace(self, prefix: str = "t", labels: dict[str, str] | None = None) -> str:
        """A fresh namespace for one test (the Pod Security level given in ``labels``)."""
        from kubernetes import client

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        body = {"metadata": {"name": name, "labels": labels or {}}}
        api = client.CoreV1Api(self.client())
        api.create_namespace(body)
        # Pods are refused until the controller-manager made the namespace's default account.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if api.list_namespaced_service_account(name).items:
                return name
            time.sleep(0.2)
        raise AssertionError(f"namespace {name}: no default ServiceAccount within 30 s")


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    cp = controlplane_module()
    try:
        cp.build()
    except cp.BuildUnavailable as exc:
        if os.environ.get("SPARKRACK_REQUIRE_API") == "1":
            pytest.fail(f"a real Kubernetes API is required here: {exc}")
        pytest.skip(f"no real Kubernetes API: {exc}")
    plane = cp.ControlPlane(tmp_path_factory.mktemp("kube-api") / "state")
    plane.start(cp.Placement.loopback())
    try:
        yield KubeAPI(plane.admin_kubeconfig, plane.placement.server, plane)
    finally:
        plane.stop()
