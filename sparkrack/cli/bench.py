"""``sparkrack bench``, ``bench-server`` and ``bench-report``: measure an OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from sparkrack.bench import canary
from sparkrack.bench import server as test_server
from sparkrack.bench.client import DEFAULT_CONNECT_S, DEFAULT_STALL_S, RequestSpec
from sparkrack.bench.guard import GuardConfig
from sparkrack.bench.report import (
    load_results,
    plot_runs,
    render_testlog,
    summary_lines,
    write_outputs,
)
from sparkrack.bench.runner import BenchConfig, RunResult, parse_url, run_bench
from sparkrack.bench.stats import NO_TOKEN_COUNTS, WRONG_ANSWERS
from sparkrack.bench.tokens import FileTokenizer
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.errors import Problem, SparkrackError, UsageError


def _concurrency(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("comma-separated integers, e.g. 1,4,8") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("comma-separated integers >= 1, e.g. 1,4,8")
    return values


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a number of seconds, e.g. 120") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("a number of seconds > 0, e.g. 120")
    return value


def _thinking(text: str) -> bool | None:
    table = {"on": True, "off": False, "default": None}
    if text not in table:
        raise argparse.ArgumentTypeError("on, off or default")
    return table[text]


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    {
        "bench": _bench_arguments,
        "bench-server": _server_arguments,
        "bench-report": _report_arguments,
    }[command](parser)


def _bench_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Streams chat completions at each concurrency level and writes results.json, "
        "TESTLOG.md and PNG plots. peak_tok_s = Σ per-request decode tok/s of successful "
        "requests; aggregate_tok_s = tokens / wall time. Exit 1: bad input, endpoint down or "
        "model unknown; exit 2: a level was GARBAGE, FAILED or WRONG-ANSWERS (the answer "
        "canary: a sum, a copied line and a JSON echo asked at temperature 0 after every "
        "level, judged by pattern); exit 3: a level had no token "
        "counts (no usage; see --allow-no-usage)."
    )
    p.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--model", required=True, help="served model name (see GET /v1/models)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="variable holding the key")
    p.add_argument("--concurrency", type=_concurrency, default=[1, 4, 8], help="default 1,4,8")
    p.add_argument("--max-tokens", type=int, default=3072)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--thinking",
        type=_thinking,
        default=None,
        help="on/off: send chat_template_kwargs.enable_thinking; default: template default",
    )
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--label", default="", help="config name in the TESTLOG table")
    p.add_argument("--out", type=Path, default=None, help="default bench-results/<timestamp>/")
    p.add_argument("--metrics-url", default=None, help="default <url>/metrics")
    p.add_argument("--no-metrics", action="store_true", help="do not scrape /metrics")
    p.add_argument("--logs-from", default=None, help="SGLang log file to follow, or - (stdin)")
    p.add_argument("--timeout", type=float, default=1800.0, help="per request, seconds")
    p.add_argument(
        "--stall-timeout",
        type=_positive,
        default=DEFAULT_STALL_S,
        help=f"fail a request after this many seconds without generated text "
        f"(default {DEFAULT_STALL_S:g})",
    )
    p.add_argument(
        "--connect-timeout",
        type=_positive,
        default=DEFAULT_CONNECT_S,
        help=f"fail a request not connected and answered with headers within this many seconds "
        f"(default {DEFAULT_CONNECT_S:g})",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=BenchConfig.warmup,
        help="short requests sent at once before the first level, not in the results (default 1)",
    )
    p.add_argument(
        "--from-metrics",
        action="store_true",
        help="read the engine's generated-token counter on /metrics before and after each level "
        "and report the server-side tok/s beside the client's (needs --enable-metrics on SGLang)",
    )
    p.add_argument(
        "--skip-model-check",
        action="store_true",
        help="do not refuse a model that GET /v1/models does not list",
    )
    p.add_argument(
        "--allow-no-usage",
        action="store_true",
        help="exit 0 when the server sends no usage (token counts from --tokenizer, else none)",
    )
    p.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="tokenizer.json (or the model folder) to count tokens when the server sends no usage",
    )
    p.add_argument("--no-guard", action="store_true", help="disable the repetition guard")
    p.add_argument(
        "--no-canary",
        action="store_true",
        help="do not ask the answer canary (a base model without instruction tuning)",
    )
    p.add_argument(
        "--canary-max-tokens",
        type=int,
        default=canary.MAX_TOKENS,
        help=f"tokens a canary answer may take (default {canary.MAX_TOKENS})",
    )
    g = GuardConfig()
    p.add_argument("--guard-ngram", type=int, default=g.ngram)
    p.add_argument("--guard-max-count", type=int, default=g.ngram_max_count)
    p.add_argument("--guard-ratio", type=float, default=g.ngram_ratio)
    p.add_argument("--guard-window", type=int, default=g.suffix_window)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=cmd_bench)


def _server_arguments(s: argparse.ArgumentParser) -> None:
    test_server.add_arguments(s)
    s.set_defaults(handler=cmd_bench_server)


def _report_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("results", nargs="+", type=Path, help="results.json files (or their folders)")
    r.add_argument("--out", type=Path, required=True, help="folder for TESTLOG.md and PNGs")
    r.add_argument("--title", default="sparkrack bench")
    r.set_defaults(handler=cmd_bench_report)


def bench_config_from_args(args: argparse.Namespace) -> BenchConfig:
    try:
        endpoint = parse_url(args.url)
    except SparkrackError as exc:
        raise UsageError(exc.problems) from None
    url = endpoint.url
    if args.canary_max_tokens < 1:
        raise UsageError(
            Problem(
                "--canary-max-tokens",
                "--canary-max-tokens",
                "must be 1 or more",
                f"e.g. --canary-max-tokens {canary.MAX_TOKENS}",
                "bench-args",
            )
        )
    if args.warmup < 0:
        raise UsageError(
            Problem("--warmup", "--warmup", "must be 0 or more", "e.g. --warmup 1", "bench-args")
        )
    counter = None
    if args.tokenizer is not None:
        if not args.allow_no_usage:
            raise UsageError(
                Problem(
                    str(args.tokenizer),
                    "--tokenizer",
                    "only used when the server sends no usage",
                    "add --allow-no-usage",
                    "bench-args",
                )
            )
        counter = FileTokenizer(args.tokenizer)
    guard = GuardConfig(
        ngram=args.guard_ngram,
        ngram_max_count=args.guard_max_count,
        ngram_ratio=args.guard_ratio,
        suffix_window=args.guard_window,
        enabled=not args.no_guard,
    )
    spec = RequestSpec(
        url=url,
        model=args.model,
        max_tokens=args.max_tokens,
        api_key=os.environ.get(args.api_key_env) or None,
        thinking=args.thinking,
        temperature=args.temperature,
        seed=args.seed,
        timeout_s=args.timeout,
        stall_timeout_s=args.stall_timeout,
        connect_timeout_s=args.connect_timeout,
        guard=guard,
        basic_auth=endpoint.basic_auth,
        token_counter=counter,
    )
    if args.logs_from and args.logs_from != "-" and not Path(args.logs_from).is_file():
        raise UsageError(
            Problem(
                args.logs_from,
                "--logs-from",
                "no such file",
                "give the head's log file (e.g. kubectl logs -f POD > head.log) or - for stdin",
                "bench-logs-from",
            )
        )
    return BenchConfig(
        spec=spec,
        concurrency=args.concurrency,
        label=args.label,
        metrics_url=None if args.no_metrics else (args.metrics_url or f"{url}/metrics"),
        logs_from=args.logs_from,
        progress=False if args.no_progress else None,
        warmup=args.warmup,
        skip_model_check=args.skip_model_check,
        from_metrics=args.from_metrics,
        canary=not args.no_canary,
        canary_max_tokens=args.canary_max_tokens,
    )


def verdict(run: RunResult, allow_no_usage: bool = False) -> ExitCode:
    """The exit code of a finished run (see :class:`ExitCode`)."""
    statuses = {lv.status for lv in run.levels}
    if statuses & {"GARBAGE", "FAILED", WRONG_ANSWERS}:
        return ExitCode.BAD_LEVEL
    if NO_TOKEN_COUNTS in statuses and not allow_no_usage:
        return ExitCode.NO_TOKEN_COUNTS
    return ExitCode.OK


def _report(run: RunResult, out: Path, allow_no_usage: bool = False) -> int:
    print(render_testlog([run]))
    print(f"results: {out}/results.json · TESTLOG: {out}/TESTLOG.md · plots: {out}/*.png")
    for line in summary_lines(run):
        print(line, file=sys.stderr)
    code = verdict(run, allow_no_usage)
    if code == ExitCode.NO_TOKEN_COUNTS:
        print(
            "no token counts: the server sent no usage; tok/s not computed. Pass "
            "--allow-no-usage (and --tokenizer to count tokens) to accept this.",
            file=sys.stderr,
        )
    return int(code)


def cmd_bench(args: argparse.Namespace) -> int:
    config = bench_config_from_args(args)
    out = args.out or Path("bench-results") / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    console = Console(stderr=True)
    run = run_bench(config, console)
    write_outputs(run, out)
    return _report(run, out, args.allow_no_usage)


def cmd_bench_report(args: argparse.Namespace) -> int:
    runs = []
    for path in args.results:
        file = path / "results.json" if path.is_dir() else path
        if not file.is_file():
            raise UsageError(
                Problem(str(file), "results", "no such file", "give results.json files")
            )
        runs.append(load_results(file))
    args.out.mkdir(parents=True, exist_ok=True)
    text = render_testlog(runs, args.title)
    (args.out / "TESTLOG.md").write_text(text, encoding="utf-8")
    plot_runs(runs, args.out)
    print(text)
    return ExitCode.OK


def cmd_bench_server(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(test_server.serve(test_server.config_from_args(args)))
    return ExitCode.OK
