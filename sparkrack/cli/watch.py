"""``sparkrack watch``: probe a serving endpoint like a user and say whether it is healthy."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from sparkrack.bench.runner import parse_url
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.contract import KUBECONFIG_FILE
from sparkrack.errors import Problem, SparkrackError, UsageError
from sparkrack.watch.actions import Actions
from sparkrack.watch.cluster import Cluster
from sparkrack.watch.loop import LoopConfig, run
from sparkrack.watch.probe import ProbeConfig, Verdict, run_probe
from sparkrack.watch.supervisor import Budget, Supervisor

DEFAULT_STALL_S = 10.0
STREAM_TOKENS = 8
CANARY_TOKENS = 64
"""A canary answer is a few words; room for a template's preamble."""


def add_arguments(command: str, p: argparse.ArgumentParser) -> None:
    p.description = (
        "Streams a short chat completion and reads /health and the engine's /metrics beside it. "
        "Verdicts: healthy (first token within --stall-after, no longer gap, proper end; slow "
        "but progressing is healthy), slow (below --min-rate), stalled, erroring, down. "
        "--once: one probe, one line, exit 0 healthy / 1 not, within the deadline printed by "
        "--help of --stall-after. Without --once: probe every --interval seconds and serve the "
        "verdicts as Prometheus metrics."
    )
    p.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--model", default=None, help="model to ask (default: the first listed)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="variable holding the key")
    p.add_argument(
        "--stall-after",
        type=_positive,
        default=DEFAULT_STALL_S,
        metavar="S",
        help="stalled when no token for S seconds (default %(default)g); one probe ends within "
        "3 x 5 s + S x (max-tokens + 1) + 1 s",
    )
    p.add_argument(
        "--probe",
        choices=("stream", "canary"),
        default="stream",
        help="stream: any tokens will do; canary: ask the answer canary's questions in turn "
        "(a sum, a copied line, a JSON echo) and call a wrong answer wrong-answers",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help=f"tokens the probe asks for (default {STREAM_TOKENS}; {CANARY_TOKENS} with "
        "--probe canary)",
    )
    p.add_argument("--min-rate", type=float, default=0.0, help="slow below this tok/s (0: off)")
    p.add_argument("--once", action="store_true", help="one probe, one line, exit 0/1")
    p.add_argument("--json", action="store_true", help="print the probe as JSON")
    p.add_argument("--interval", type=_positive, default=10.0, help="seconds between probes")
    p.add_argument("--name", default=None, help="target label of the metrics (default: URL)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of GET /metrics")
    p.add_argument("--metrics-port", type=int, default=9464, help="port of GET /metrics")
    p.add_argument("--evidence", type=Path, default=None, help="write bundles here when sick")
    k = p.add_argument_group("acting on the cluster (a deployment of sparkrack serve)")
    k.add_argument("--deployment", default=None, help="the deployment's name (its label)")
    k.add_argument("--namespace", default=None, help="its namespace")
    k.add_argument(
        "--ranks",
        type=int,
        default=None,
        help="its number of ranks: read its objects by name, as a Role naming them allows "
        "(default: find them by label)",
    )
    k.add_argument("--alias", default="", help="its gateway alias (recorded in the evidence)")
    k.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    k.add_argument("--max-restarts", type=int, default=Budget.max_restarts, help="per window")
    k.add_argument(
        "--restart-window", type=_positive, default=Budget.window_s, help="seconds (budget window)"
    )
    k.add_argument(
        "--restart-grace",
        type=float,
        default=Budget.restart_grace_s,
        help="seconds after a restart in which bad verdicts are the group loading",
    )
    p.set_defaults(handler=cmd_watch)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


def probe_config(args: argparse.Namespace) -> ProbeConfig:
    try:
        endpoint = parse_url(args.url)
    except SparkrackError as exc:
        raise UsageError(exc.problems) from None
    if endpoint.basic_auth is not None:
        raise UsageError(
            Problem(
                "--url",
                "--url",
                "user:password in the URL",
                "give the server's own URL and its key through --api-key-env",
                "watch-url",
            )
        )
    canary = args.probe == "canary"
    max_tokens = args.max_tokens
    if max_tokens is None:
        max_tokens = CANARY_TOKENS if canary else STREAM_TOKENS
    if not 1 <= max_tokens <= 256:
        raise UsageError(
            Problem("--max-tokens", "--max-tokens", "must be 1..256", "e.g. 8", "watch-args")
        )
    return ProbeConfig(
        url=endpoint.url,
        model=args.model,
        api_key=os.environ.get(args.api_key_env) or None,
        stall_s=args.stall_after,
        max_tokens=max_tokens,
        min_rate=args.min_rate,
        canary=0 if canary else None,
    )


KUBECONFIG_HELP = f"default: in-cluster, else $KUBECONFIG, ~/{KUBECONFIG_FILE}, ~/.kube/config"


def kubeconfig_candidates(given: str | None = None) -> list[Path]:
    """Where a command looks for the kubeconfig, in order: ``given`` (``--kubeconfig``), every
    file of ``$KUBECONFIG``, the one site.yml writes (``~/.kube/sparkrack.yaml``), then
    kubectl's ``~/.kube/config``."""
    if given:
        return [Path(given)]
    listed = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    home = Path.home()
    return [*listed, home / KUBECONFIG_FILE, home / ".kube" / "config"]


class NoKubeconfig(UsageError):
    """No kubeconfig where :func:`kubeconfig_candidates` looks by default (and not in a pod)."""


def find_kubeconfig(given: str | None = None) -> str:
    """The first kubeconfig of :func:`kubeconfig_candidates` that exists."""
    looked = kubeconfig_candidates(given)
    for path in looked:
        if path.is_file():
            return str(path)
    if given:  # a file named on the command line: a usage error, like any other
        raise UsageError(
            Problem(
                given,
                "--kubeconfig",
                "is not a file",
                f"give the kubeconfig site.yml writes (~/{KUBECONFIG_FILE})",
                "kubeconfig",
            )
        )
    raise NoKubeconfig(
        Problem(
            "--kubeconfig",
            "--kubeconfig",
            f"no kubeconfig: looked in {', '.join(str(p) for p in looked)}",
            f"run site.yml (it writes ~/{KUBECONFIG_FILE}), or give --kubeconfig FILE",
            "kubeconfig",
        )
    )


def api_client(kubeconfig: str | None, timeout_s: float | None = None) -> Any:
    """A client of the cluster's API: in-cluster, else the kubeconfig :func:`find_kubeconfig`
    finds; with ``timeout_s``, every request it makes gives up after that many seconds to
    connect and as many to read an answer, and is tried at most twice."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return _bounded(client.ApiClient(), timeout_s)
    path = find_kubeconfig(kubeconfig)
    try:
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, client_configuration=configuration
        )
        if timeout_s is not None:
            configuration.retries = 1
        return _bounded(client.ApiClient(configuration), timeout_s)
    except (ConfigException, OSError, ValueError) as exc:
        raise UsageError(
            Problem(
                path,
                "--kubeconfig",
                f"is not a usable kubeconfig ({' '.join(str(exc).split())[:200]})",
                f"give --kubeconfig FILE (the one site.yml writes: ~/{KUBECONFIG_FILE})",
                "kubeconfig",
            )
        ) from None


def _bounded(api: Any, timeout_s: float | None) -> Any:
    """``api`` with ``(timeout_s, timeout_s)`` as the connect and read timeout of every request
    that names none (the client's own default is to wait for ever)."""
    if timeout_s is None:
        return api
    request = api.rest_client.request

    def bounded(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("_request_timeout"):
            kwargs["_request_timeout"] = (timeout_s, timeout_s)
        return request(*args, **kwargs)

    api.rest_client.request = bounded
    return api


def actions_from_args(args: argparse.Namespace, url: str) -> Actions | None:
    if args.namespace is None and args.deployment is None and args.evidence is None:
        return None
    if (args.namespace is None) != (args.deployment is None):
        raise UsageError(
            Problem(
                "--deployment",
                "--deployment/--namespace",
                "one given without the other",
                "give both: the deployment's name and its namespace",
                "watch-args",
            )
        )
    cluster = None
    if args.namespace is not None:
        cluster = Cluster(api_client(args.kubeconfig), args.namespace, args.ranks)
    budget = Budget(args.max_restarts, args.restart_window, args.restart_grace)
    actions = Actions(
        args.deployment or args.name or url,
        url,
        cluster,
        args.evidence,
        args.alias,
        Supervisor(budget),
    )
    actions.load_state()
    return actions


def cmd_watch(args: argparse.Namespace) -> int:
    cfg = probe_config(args)
    actions = actions_from_args(args, cfg.url)
    if not args.once:
        loop_cfg = LoopConfig(
            target=args.name or cfg.url,
            interval_s=args.interval,
            metrics_host=args.metrics_host,
            metrics_port=args.metrics_port,
        )
        hook = actions.on_verdict if actions is not None else None
        asyncio.run(run(cfg, loop_cfg, hook, printer=lambda text: print(text, flush=True)))
        return ExitCode.OK
    result = run_probe(cfg)
    print(json.dumps(result.to_json(), indent=2) if args.json else result.line(), flush=True)
    if actions is not None:
        actions.apply(result)
        for line in actions.log:
            print(line, file=sys.stderr if args.json else sys.stdout, flush=True)
    return ExitCode.OK if result.verdict is Verdict.HEALTHY else ExitCode.FAILED
