"""``sparkrack status``: the owner's view of the running deployments, through the kubeconfig.

Per deployment: ranks Ready, container restarts, the watchdog's state and last verdict, its group
restarts, whether it serves (every rank Ready and the gateway's route not taken out by the
watchdog), its weight download and copy Jobs with their progress, the newest evidence bundle
and, with ``--prometheus``, its generated tokens/s. Whether the watchdog watches is read from
its Deployment (a Ready pod), not assumed from its state ConfigMap. Exit 0 when every deployment
serves and its watchdog, if it has one, runs and is healthy (or recovered), 1 otherwise; ``--watch``
redraws every S seconds until ^C or ``--count`` frames, and exits with the last frame's code.

The kubeconfig is ``--kubeconfig``, else ``$KUBECONFIG``, else the one site.yml writes
(``~/.kube/sparkrack.yaml``), else ``~/.kube/config``. Every request to the API gives up after
``--request-timeout`` seconds. A bad day is one line on stderr, never a traceback: exit 4 when
no kubeconfig is found, 5 when the API refuses the connection, does not answer in time or
answers with an error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from sparkrack import contract
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.options import DEFAULT_INVENTORY, add_inventory
from sparkrack.cli.watch import KUBECONFIG_HELP, NoKubeconfig, api_client
from sparkrack.diagnose import bundle
from sparkrack.diagnose.redact import redact_data
from sparkrack.errors import Problem, UsageError, printable
from sparkrack.observe.query import tokens_per_s
from sparkrack.watch.cluster import Cluster, DeploymentView
from sparkrack.watch.supervisor import State

GOOD = {State.HEALTHY.value, State.RECOVERED.value}
REQUEST_TIMEOUT_S = 10.0


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    add_inventory(p, default=None, help="inventory directory (its serving namespace)")
    p.add_argument("--namespace", default=None, help="serving namespace (overrides -i)")
    p.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    p.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT_S,
        metavar="S",
        help=f"seconds to connect and to wait for each answer of the API (default {REQUEST_TIMEOUT_S:g})",
    )
    p.add_argument("--evidence", type=Path, default=None, help="evidence root to show bundles of")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--watch", type=float, default=None, metavar="S", help="refresh every S s")
    p.add_argument(
        "--count", type=int, default=None, metavar="N", help="with --watch: stop after N frames"
    )
    p.add_argument(
        "--prometheus",
        default=None,
        metavar="URL",
        help="Prometheus' base URL: tokens/s per deployment from the engines' metrics",
    )
    p.set_defaults(handler=cmd_status)


def _namespace(args: argparse.Namespace) -> str:
    if args.namespace:
        return str(args.namespace)
    from sparkrack.serving.context import context_from_inventory

    if args.inventory is None:
        print(
            f"note: no -i or --namespace: the serving namespace of {DEFAULT_INVENTORY}",
            file=sys.stderr,
        )
    return context_from_inventory(args.inventory or DEFAULT_INVENTORY).namespace


NO_WATCHDOG = "no watchdog"
WATCHDOG_DOWN = "watchdog not running"
WATCHDOG_STARTING = "watchdog running, no verdict yet"


def watchdog_state(view: DeploymentView) -> str:
    """What the watchdog says, read from its Deployment and its state ConfigMap: its state when
    its pod is Ready, else that it is not running (its last state beside it, as history). A
    deployment without a watchdog Deployment shows the state a watchdog run by hand wrote (its
    last verdict carries the time), or that it has no watchdog."""
    state = view.annotations().get(contract.WATCHDOG_STATE_ANNOTATION)
    running = view.watchdog_running()
    if running is None:
        return state or NO_WATCHDOG
    if not running:
        return f"{WATCHDOG_DOWN} (last state: {state})" if state else WATCHDOG_DOWN
    return state or WATCHDOG_STARTING


def serving_text(r: dict[str, Any]) -> str:
    if not r["routed"]:
        return "NOT ROUTED (the watchdog took it out of the gateway)"
    if not r["serving"]:
        return f"NOT SERVING ({r['ranks_ready']} ranks ready)"
    return "serving"


def row(
    view: DeploymentView, evidence: Path | None, jobs: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    jobs = jobs or []
    notes = view.annotations()
    ready, ranks = view.ranks_ready()
    state = watchdog_state(view)
    verdict_given = state not in (NO_WATCHDOG, WATCHDOG_STARTING)
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
        "serving": view.serving(),
        "last_verdict": notes.get(contract.WATCHDOG_VERDICT_ANNOTATION, ""),
        "evidence": newest,
        "jobs": jobs,
        "ok": view.serving() and (state in GOOD or not verdict_given),
    }


def snapshot(
    cluster: Cluster, evidence: Path | None, prometheus: str | None = None
) -> list[dict[str, Any]]:
    rows = [
        row(cluster.view(name), evidence, cluster.fetch_jobs(name))
        for name in cluster.deployment_names()
    ]
    if prometheus:
        rates = tokens_per_s(prometheus, cluster.namespace)
        for r in rows:
            r["tokens_per_s"] = rates.by_deployment.get(r["deployment"])
            r["tokens_per_s_error"] = rates.error
    # Verdicts and job reasons carry text the engines and fetch pods wrote (a response, a
    # termination message's log tail): keys out before anything is shown.
    redacted: list[dict[str, Any]] = redact_data(rows)
    return redacted


def show(rows: list[dict[str, Any]], as_json: bool, lines: bool = False) -> None:
    """Text, or JSON (``lines``: one line per frame, for ``--watch --json``)."""
    if as_json:
        print(json.dumps(rows, indent=None if lines else 2), flush=True)
        return
    if not rows:
        print("no serving deployments", flush=True)
    for r in rows:
        routed = serving_text(r)
        print(
            f"{r['deployment']}: {r['watchdog']}, ranks {r['ranks_ready']} ready, "
            f"{r['watchdog_restarts']} watchdog restarts, {r['container_restarts']} container "
            f"restarts, {routed}{_rate(r)}",
            flush=True,
        )
        if r["last_verdict"]:
            print(f"  last verdict: {r['last_verdict']}", flush=True)
        for job in r.get("jobs", []):
            print(f"  job {job['job']}: {job['state']}, {job['progress']}", flush=True)
        if r["evidence"]:
            print(f"  evidence: {r['evidence']}", flush=True)


def _rate(r: dict[str, Any]) -> str:
    if "tokens_per_s" not in r:
        return ""
    if r["tokens_per_s_error"]:
        return f", tokens/s unknown (Prometheus: {r['tokens_per_s_error']})"
    if r["tokens_per_s"] is None:
        return ", no tokens/s series"
    return f", {r['tokens_per_s']:.1f} tokens/s"


def code(rows: list[dict[str, Any]]) -> int:
    return ExitCode.OK if rows and all(r["ok"] for r in rows) else ExitCode.FAILED


def cmd_status(args: argparse.Namespace) -> int:
    if args.count is not None and (args.watch is None or args.count < 1):
        raise UsageError(
            Problem(
                "--count",
                "--count",
                "needs --watch and at least 1",
                "e.g. --watch 5 --count 3",
                "status-args",
            )
        )
    namespace = _namespace(args)
    try:
        api = api_client(args.kubeconfig, timeout_s=max(0.1, args.request_timeout))
    except NoKubeconfig as exc:
        print(f"status: {exc.problems[0].message} — fix: {exc.problems[0].fix}", file=sys.stderr)
        return ExitCode.NO_KUBECONFIG
    cluster = Cluster(api, namespace)
    try:
        return _frames(args, cluster, namespace)
    except BrokenPipeError:
        raise  # the reader went away: the CLI's entry ends quietly
    except Exception as exc:
        trouble = api_trouble(exc, str(api.configuration.host), args.request_timeout)
        if trouble is None:
            raise
        print(f"status: {trouble}", file=sys.stderr)
        return ExitCode.API_UNAVAILABLE


def _frames(args: argparse.Namespace, cluster: Cluster, namespace: str) -> int:
    if args.watch is None:
        rows = snapshot(cluster, args.evidence, args.prometheus)
        show(rows, args.json)
        return code(rows)
    last: int = ExitCode.FAILED
    frames = 0
    try:
        while args.count is None or frames < args.count:
            if frames:
                time.sleep(max(1.0, args.watch))
            rows = snapshot(cluster, args.evidence, args.prometheus)
            if not args.json:
                print(f"--- {time.strftime('%H:%M:%S')} {namespace}", flush=True)
            show(rows, args.json, lines=True)
            last, frames = code(rows), frames + 1
    except KeyboardInterrupt:
        pass
    return last


def api_trouble(exc: BaseException, host: str, timeout_s: float) -> str | None:
    """One line for an API that cannot be used (refused, silent, TLS, an error answer); None
    for any other exception (a bug, shown as one)."""
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return (
            f"the API at {host} answered {exc.status} {exc.reason}: check the kubeconfig's "
            "credentials and that its user may read the serving namespace"
        )
    if not isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return None
    reason = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    text = " ".join(str(reason).split())
    # urllib3 makes a refused connection a NewConnectionError, a subclass of its timeouts.
    if isinstance(reason, ConnectionRefusedError) or "refused" in text.lower():
        return (
            f"the API at {host} refused the connection: K3s is not running on the control-plane "
            "node (ssh to it: systemctl status k3s), or the kubeconfig names the wrong address"
        )
    if isinstance(reason, urllib3.exceptions.TimeoutError) or "timed out" in text.lower():
        return (
            f"the API at {host} accepted the connection but did not answer within {timeout_s:g} s: "
            "the control-plane node or K3s is overloaded or hung (ssh to it: systemctl status "
            "k3s), or the address is not the API's"
        )
    return f"the API at {host} cannot be reached: {printable(text)[:200]}"
