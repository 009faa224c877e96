#!/usr/bin/env python3
"""Every manifest sparkrack renders, through a Kubernetes policy scanner (checkov).

``render`` writes, one YAML file per render, what the CLI prints for every shipped inventory
(``render -i`` manifests with the pre-pull Jobs as the serve role renders them, the cluster
add-ons with the fabric check) and every shipped profile (``render PROFILE``), and the
monitoring objects sparkrack applies (its PrometheusRule and dashboard ConfigMaps; the chart's
own objects are rendered by Helm on the cluster, not here). ``scan`` runs checkov's Kubernetes
checks over a folder and returns its failed checks; a finding sparkrack accepts is skipped on the
object itself (annotation ``checkov.io/skip<N>: CKV_K8S_<id>=<reason>``), never here.

checkov runs from its own virtual environment (``make scan-setup``: ``.venv-scan``, pinned in
``lab/scan-requirements.txt``): its pins (``packaging<24``) conflict with pytest's.

``python lab/scan.py [--out DIR]`` renders, scans, prints every failed check and the wall time,
and exits 1 when any check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHECKOV = Path(os.environ.get("SPARKRACK_CHECKOV", ROOT / ".venv-scan" / "bin" / "checkov"))
INVENTORIES = ("example", "lab")


def cli(*argv: str) -> str:
    from sparkrack.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    if code != 0:
        raise SystemExit(f"sparkrack {' '.join(argv)} exited {code}")
    return out.getvalue()


def serve_render(inventory: str) -> list[dict[str, Any]]:
    """What the serve role applies for ``inventory``, pre-pull Jobs on."""
    from sparkrack.inputs.inventory import load_inventory
    from sparkrack.serving.context import SERVING_VARS, context_from_vars
    from sparkrack.serving.deployments.bundle import (
        DEPLOYMENT_VARS,
        from_vars,
        in_apply_order,
        render_serving,
    )

    inv = load_inventory(inventory)
    settings = {n: inv.var(n) for n in SERVING_VARS} | {"serving_prepull": True}
    ctx = context_from_vars(inv.plan(), settings)
    rendered = render_serving(from_vars({n: inv.var(n) for n in DEPLOYMENT_VARS}, ctx, inventory))
    return in_apply_order(rendered)


def monitoring() -> list[dict[str, Any]]:
    data = ROOT / "sparkrack" / "data" / "observe"
    stack = yaml.safe_load((data / "monitoring-stack.yml").read_text())
    docs = [yaml.safe_load((data / "prometheusrule.yml").read_text())]
    for board in sorted((data / "dashboards").glob("*.json")):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": board.stem,
                    "namespace": stack["namespace"],
                    "labels": stack["dashboard_label"],
                },
                "data": {board.name: board.read_text()},
            }
        )
    return docs


def render(out: Path) -> list[Path]:
    """Write every render under ``out`` (emptied first); the files written."""
    from sparkrack.serving import list_profiles

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.yaml"):
        old.unlink()
    renders: dict[str, str] = {}
    for name in INVENTORIES:
        inv = f"inventories/{name}"
        renders[f"inventory-{name}-serving.yaml"] = yaml.safe_dump_all(
            serve_render(str(ROOT / inv)), sort_keys=False
        )
        renders[f"inventory-{name}-cluster.yaml"] = cli(
            "manifests", "cluster", "-i", str(ROOT / inv), "--fabric-check"
        )
    for profile in list_profiles():
        renders[f"profile-{profile.stem}.yaml"] = cli(
            "render", profile.stem, "-i", str(ROOT / "inventories/example"), "--what", "manifests"
        )
    renders["monitoring.yaml"] = yaml.safe_dump_all(monitoring(), sort_keys=False)
    written = []
    for name, text in sorted(renders.items()):
        path = out / name
        path.write_text(text)
        written.append(path)
    return written


def scan(folder: Path) -> list[str]:
    """checkov's Kubernetes checks over ``folder``: one line per failed check."""
    if not CHECKOV.exists():
        raise FileNotFoundError(f"{CHECKOV} is missing: run `make scan-setup`")
    proc = subprocess.run(
        [
            str(CHECKOV),
            "--directory",
            str(folder),
            "--framework",
            "kubernetes",
            "--output",
            "json",
            "--quiet",
            "--compact",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": ""},
        timeout=1200,
    )
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"checkov exited {proc.returncode}: {proc.stderr[-3000:]}")
    report = json.loads(proc.stdout)
    reports = report if isinstance(report, list) else [report]
    failed = []
    for r in reports:
        for check in (r.get("results") or {}).get("failed_checks", []):
            where = Path(check["file_path"]).name
            failed.append(f"{where} {check['resource']}: {check['check_id']} {check['check_name']}")
    return sorted(failed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "scan")
    args = parser.parse_args(argv)
    start = time.monotonic()
    files = render(args.out)
    rendered = time.monotonic()
    failed = scan(args.out)
    end = time.monotonic()
    for line in failed:
        print(f"FAILED {line}")
    print(
        f"checkov: {len(files)} files, {len(failed)} failed checks; "
        f"render {rendered - start:.1f} s, scan {end - rendered:.1f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
