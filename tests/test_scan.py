"""lab/scan.py: checkov over sparkrack's renders (``make scan`` runs it over all of them).

Negative controls: an unhardened Deployment fails the scan, and a rendered fetch Job fails it
once its skip annotations are gone, so the clean scan is the annotations' doing, each with its
reason, not a scanner that finds nothing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from sparkrack.k8s import scanner

pytestmark = pytest.mark.tools  # checkov

ROOT = Path(__file__).resolve().parent.parent


def scan_module() -> ModuleType:
    name = "sparkrack_lab_scan"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "lab" / "scan.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scan() -> ModuleType:
    module = scan_module()
    if not module.CHECKOV.exists():
        if os.environ.get("SPARKRACK_REQUIRE_API") == "1":
            pytest.fail(f"checkov is required here: {module.CHECKOV} (make scan-setup)")
        pytest.skip(f"no checkov at {module.CHECKOV} (make scan-setup)")
    return module


UNHARDENED: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "open", "namespace": "x"},
    "spec": {
        "selector": {"matchLabels": {"a": "b"}},
        "template": {
            "metadata": {"labels": {"a": "b"}},
            "spec": {
                "containers": [
                    {"name": "c", "image": "busybox:1", "securityContext": {"privileged": True}}
                ]
            },
        },
    },
}


def ids(found: list[str]) -> set[str]:
    return {line.split(": ")[1].split()[0] for line in found}


def test_negative_control_an_unhardened_deployment_fails(scan: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "open.yaml").write_text(yaml.safe_dump(UNHARDENED))
    found = ids(scan.scan(tmp_path))
    assert {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_38"} <= found


def test_a_render_passes_by_its_annotations_alone(scan: ModuleType, tmp_path: Path) -> None:
    docs = scan.serve_render(str(ROOT / "inventories" / "lab"))
    jobs = [d for d in docs if d["kind"] == "Job"]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert jobs and policies
    (tmp_path / "with.yaml").write_text(yaml.safe_dump_all([*jobs, *policies]))
    assert scan.scan(tmp_path) == []
    for job in jobs:
        notes = job["metadata"]["annotations"]
        skips = {k: v for k, v in notes.items() if k.startswith(scanner.ANNOTATION_PREFIX)}
        assert skips and all("=" in v and len(v.split("=", 1)[1]) > 20 for v in skips.values())
        job["metadata"]["annotations"] = {k: v for k, v in notes.items() if k not in skips}
    (tmp_path / "with.yaml").write_text(yaml.safe_dump_all([*jobs, *policies]))
    lines = scan.scan(tmp_path)
    found = ids(lines)
    assert {"CKV_K8S_19", "CKV_K8S_15", "CKV_K8S_43"} <= found
    # The hardening itself is no annotation: those checks pass without one, but for the
    # receiver's root start, which its own skips name (and which is caught without them).
    hardening = {"CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_38"}
    assert not ids([line for line in lines if "-recv-" not in line]) & hardening
    receivers = ids([line for line in lines if "-recv-" in line])
    assert "CKV_K8S_23" in receivers and not receivers & (hardening - set(scanner.RECEIVER_ROOT))


def test_the_network_policies_cover_the_serving_pods(scan: ModuleType, tmp_path: Path) -> None:
    """No skip stands in for the NetworkPolicy check: the rendered policies satisfy it, and the
    same pods without them fail it (negative control)."""
    docs = scan.serve_render(str(ROOT / "inventories" / "lab"))
    workloads = [d for d in docs if d["kind"] in ("Job", "StatefulSet", "Deployment")]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert workloads and policies
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all([*workloads, *policies]))
    assert "CKV2_K8S_6" not in ids(scan.scan(tmp_path))
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(workloads))
    assert "CKV2_K8S_6" in ids(scan.scan(tmp_path))
