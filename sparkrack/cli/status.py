"""``sparkrack status``: the owner's view of the running deployments, through the kubeconfig.

Per deployment: ranks Ready, container restarts, the watchdog's state and last verdict, its group
restarts, whether the gateway routes to it, and the newest evidence bundle. Exit 0 when every
deployment is healthy (or recovered) with all ranks Ready, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from sparkrack import contract
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.options import add_inventory
from sparkrack.cli.watch import api_client
from sparkrack.diagnose import bundle
from sparkrack.watch.cluster import Cluster, DeploymentView
from sparkrack.watch.supervisor import State

GOOD = {State.HEALTHY.value, State.RECOVERED.value}


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    add_inventory(p, default=None, help="inventory directory (its serving namespace)")
    p.add_argument("--namespace", default=None, help="serving namespace (overrides -i)")
    p.add_argument("--kubeconfig", default=None, help="default: in-cluster, else ~/.kube/config")
    p.add_argument("--evidence", type=Path, default=None, help="evidence root to show bundles of")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--watch", type=float, default=None, metavar="S", help="refresh every S s")
    p.set_defaults(handler=cmd_status)


def _namespace(args: argparse.Namespace) -> str:
    if args.namespace:
        return str(args.namespace)
    from sparkrack.serving.context import context_from_inventory

    return context_from_inventory(args.inventory or "inventories/example").namespace


def row(view: DeploymentView, evidence: Path | None) -> dict[str, Any]:
    notes = view.annotations()
    ready, ranks = view.ranks_ready()
    state = notes.get(contract.WATCHDOG_STATE_ANNOTATION, "unwatched")
    restarts = [t for t in notes.get(contract.WATCHDOG_RESTARTS_ANNOTATION, "").split(",") if t]
    newest = ""
    if evidence is not None:
        mine = [b for b in bundle.bundles(evidence) if b.name.startswith(f"{view.name}-")]
        newest = str(mine[-1]) if mine else ""
    return {
        "deployment": view.name,
        "ranks_ready": f"{ready}/{ranks}",
        "container_restarts": view.pod_restarts(),
        "watchdog": state,
        "watchdog_restarts": len(restarts),
        "routed": not view.quarantined(),
        "last_verdict": notes.get(contract.WATCHDOG_VERDICT_ANNOTATION, ""),
        "evidence": newest,
        "ok": ready == ranks > 0 and state in GOOD | {"unwatched"} and not view.quarantined(),
    }


def snapshot(cluster: Cluster, evidence: Path | None) -> list[dict[str, Any]]:
    return [row(cluster.view(name), evidence) for name in cluster.deployment_names()]


def show(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2), flush=True)
        return
    if not rows:
        print("no serving deployments", flush=True)
    for r in rows:
        routed = "routed" if r["routed"] else "NOT ROUTED"
        print(
            f"{r['deployment']}: {r['watchdog']}, ranks {r['ranks_ready']} ready, "
            f"{r['watchdog_restarts']} watchdog restarts, {r['container_restarts']} container "
            f"restarts, {routed}",
            flush=True,
        )
        if r["last_verdict"]:
            print(f"  last verdict: {r['last_verdict']}", flush=True)
        if r["evidence"]:
            print(f"  evidence: {r['evidence']}", flush=True)


def cmd_status(args: argparse.Namespace) -> int:
    namespace = _namespace(args)
    cluster = Cluster(api_client(args.kubeconfig), namespace)
    while True:
        rows = snapshot(cluster, args.evidence)
        show(rows, args.json)
        if args.watch is None:
            return ExitCode.OK if rows and all(r["ok"] for r in rows) else ExitCode.FAILED
        time.sleep(max(1.0, args.watch))
