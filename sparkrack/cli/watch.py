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
    k.add_argument("--alias", default="", help="its gateway alias (recorded in the evidence)")
    k.add_argument("--kubeconfig", default=None, help="default: in-cluster, else ~/.kube/config")
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


def api_client(kubeconfig: str | None) -> Any:
    """A client of the cluster's API: in-cluster, else ``kubeconfig`` or ``~/.kube/config``."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return client.ApiClient()
    try:
        return config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as exc:
        raise UsageError(
            Problem(
                "--kubeconfig",
                "--kubeconfig",
                f"no usable kubeconfig ({exc})",
                f"give --kubeconfig FILE (the one site.yml writes: ~/{KUBECONFIG_FILE})",
                "watch-args",
            )
        ) from None


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
        cluster = Cluster(api_client(args.kubeconfig), args.namespace)
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
