"""``sparkrack watch``: probe a serving endpoint like a user and say whether it is healthy."""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from sparkrack.bench.runner import parse_url
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.errors import Problem, SparkrackError
from sparkrack.watch.loop import LoopConfig, run
from sparkrack.watch.probe import ProbeConfig, Verdict, run_probe

DEFAULT_STALL_S = 10.0


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
    p.add_argument("--max-tokens", type=int, default=8, help="tokens the probe asks for")
    p.add_argument("--min-rate", type=float, default=0.0, help="slow below this tok/s (0: off)")
    p.add_argument("--once", action="store_true", help="one probe, one line, exit 0/1")
    p.add_argument("--json", action="store_true", help="print the probe as JSON")
    p.add_argument("--interval", type=_positive, default=10.0, help="seconds between probes")
    p.add_argument("--name", default=None, help="target label of the metrics (default: URL)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of GET /metrics")
    p.add_argument("--metrics-port", type=int, default=9464, help="port of GET /metrics")
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
    endpoint = parse_url(args.url)
    if endpoint.basic_auth is not None:
        raise SparkrackError(
            Problem(
                "--url",
                "--url",
                "user:password in the URL",
                "give the server's own URL and its key through --api-key-env",
                "watch-url",
            )
        )
    if not 1 <= args.max_tokens <= 256:
        raise SparkrackError(
            Problem("--max-tokens", "--max-tokens", "must be 1..256", "e.g. 8", "watch-args")
        )
    return ProbeConfig(
        url=endpoint.url,
        model=args.model,
        api_key=os.environ.get(args.api_key_env) or None,
        stall_s=args.stall_after,
        max_tokens=args.max_tokens,
        min_rate=args.min_rate,
    )


def cmd_watch(args: argparse.Namespace) -> int:
    cfg = probe_config(args)
    if not args.once:
        loop_cfg = LoopConfig(
            target=args.name or cfg.url,
            interval_s=args.interval,
            metrics_host=args.metrics_host,
            metrics_port=args.metrics_port,
        )
        asyncio.run(run(cfg, loop_cfg, printer=lambda text: print(text, flush=True)))
        return ExitCode.OK
    result = run_probe(cfg)
    print(json.dumps(result.to_json(), indent=2) if args.json else result.line(), flush=True)
    return ExitCode.OK if result.verdict is Verdict.HEALTHY else ExitCode.FAILED
