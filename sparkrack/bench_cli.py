"""Sub-commands ``bench``, ``bench-server``, ``diagnose`` and ``matrix``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import enum
import json
import os
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from sparkrack.bench import server as test_server
from sparkrack.bench.client import DEFAULT_STALL_S, RequestSpec
from sparkrack.bench.guard import GuardConfig
from sparkrack.bench.report import (
    load_results,
    plot_runs,
    render_testlog,
    summary_lines,
    write_outputs,
)
from sparkrack.bench.runner import BenchConfig, RunResult, normalize_url, parse_url, run_bench
from sparkrack.bench.stats import NO_TOKEN_COUNTS
from sparkrack.bench.tokens import FileTokenizer
from sparkrack.diagnose import diagnose
from sparkrack.errors import Problem, SparkrackError
from sparkrack.matrix import (
    AnsibleDeployer,
    Case,
    MatrixRunner,
    default_validator,
    load_matrix,
    write_provenance,
    write_summary,
)


class BenchExit(enum.IntEnum):
    """Exit codes of ``sparkrack bench`` (the highest applicable one wins)."""

    OK = 0
    """Every level ok (overlap warnings allowed; no token counts allowed with --allow-no-usage)."""
    ERROR = 1
    """Bad input, endpoint down, API key refused, model not listed (see its message)."""
    BAD_LEVEL = 2
    """A level was GARBAGE (fingerprint) or FAILED (no request succeeded)."""
    NO_TOKEN_COUNTS = 3
    """A level had no token counts (no usage in the stream) and --allow-no-usage was not given."""


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


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark an OpenAI-compatible endpoint the way the seeds did (n=1/4/8)",
        description=(
            "Streams chat completions at each concurrency level and writes results.json, "
            "TESTLOG.md and PNG plots. peak_tok_s = Σ per-request decode tok/s of successful "
            "requests; aggregate_tok_s = tokens / wall time. Exit 1: bad input, endpoint down or "
            "model unknown; exit 2: a level was GARBAGE or FAILED; exit 3: a level had no token "
            "counts (no usage; see --allow-no-usage)."
        ),
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
    g = GuardConfig()
    p.add_argument("--guard-ngram", type=int, default=g.ngram)
    p.add_argument("--guard-max-count", type=int, default=g.ngram_max_count)
    p.add_argument("--guard-ratio", type=float, default=g.ngram_ratio)
    p.add_argument("--guard-window", type=int, default=g.suffix_window)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=cmd_bench)

    s = subparsers.add_parser(
        "bench-server",
        help="run the local HTTP/SSE test server (known token rate, garbage on request)",
    )
    test_server.add_arguments(s)
    s.set_defaults(handler=cmd_bench_server)

    r = subparsers.add_parser(
        "bench-report",
        help="combine results.json files of several runs into one TESTLOG table + plots",
    )
    r.add_argument("results", nargs="+", type=Path, help="results.json files (or their folders)")
    r.add_argument("--out", type=Path, required=True, help="folder for TESTLOG.md and PNGs")
    r.add_argument("--title", default="sparkrack bench")
    r.set_defaults(handler=cmd_bench_report)

    d = subparsers.add_parser(
        "diagnose", help="match SGLang/NCCL logs against the known failure signatures"
    )
    d.add_argument("logs", nargs="+", help="log files, or - for stdin")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(handler=cmd_diagnose)

    m = subparsers.add_parser(
        "matrix", help="validate, deploy, bench and record a list of profile variants"
    )
    m.add_argument("matrix", type=Path, help="MATRIX.yml")
    m.add_argument("--out", type=Path, default=None, help="default matrix-results/<name>/")
    m.add_argument("--inventory", default=None, help="overrides the matrix file's inventory")
    m.add_argument(
        "--write-provenance",
        action="store_true",
        help="write the winner's n=1/4/8 figures into the base profile's provenance.measured",
    )
    m.add_argument("--no-progress", action="store_true")
    m.set_defaults(handler=cmd_matrix)


def bench_config_from_args(args: argparse.Namespace) -> BenchConfig:
    endpoint = parse_url(args.url)
    url = endpoint.url
    if args.warmup < 0:
        raise SparkrackError(
            Problem("--warmup", "--warmup", "must be 0 or more", "e.g. --warmup 1", "bench-args")
        )
    counter = None
    if args.tokenizer is not None:
        if not args.allow_no_usage:
            raise SparkrackError(
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
        guard=guard,
        basic_auth=endpoint.basic_auth,
        token_counter=counter,
    )
    if args.logs_from and args.logs_from != "-" and not Path(args.logs_from).is_file():
        raise SparkrackError(
            Problem(
                args.logs_from,
                "--logs-from",
                "no such file",
                "give an SGLang log file (e.g. kubectl logs -f POD > sglang.log) or - for stdin",
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
    )


def verdict(run: RunResult, allow_no_usage: bool = False) -> BenchExit:
    """The exit code of a finished run (see :class:`BenchExit`)."""
    statuses = {lv.status for lv in run.levels}
    if statuses & {"GARBAGE", "FAILED"}:
        return BenchExit.BAD_LEVEL
    if NO_TOKEN_COUNTS in statuses and not allow_no_usage:
        return BenchExit.NO_TOKEN_COUNTS
    return BenchExit.OK


def _report(run: RunResult, out: Path, allow_no_usage: bool = False) -> int:
    print(render_testlog([run]))
    print(f"results: {out}/results.json · TESTLOG: {out}/TESTLOG.md · plots: {out}/*.png")
    for line in summary_lines(run):
        print(line, file=sys.stderr)
    code = verdict(run, allow_no_usage)
    if code == BenchExit.NO_TOKEN_COUNTS:
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
            raise SparkrackError(
                Problem(str(file), "results", "no such file", "give results.json files")
            )
        runs.append(load_results(file))
    args.out.mkdir(parents=True, exist_ok=True)
    text = render_testlog(runs, args.title)
    (args.out / "TESTLOG.md").write_text(text, encoding="utf-8")
    plot_runs(runs, args.out)
    print(text)
    return 0


def cmd_bench_server(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(test_server.serve(test_server.config_from_args(args)))
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    report: list[dict[str, Any]] = []
    for name in args.logs:
        if name == "-":
            text = sys.stdin.read()
        else:
            try:
                text = Path(name).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise SparkrackError(
                    Problem(name, "LOG", f"cannot read: {exc}", "give a readable log file")
                ) from exc
        findings = diagnose(text)
        report.append({"log": name, "findings": [asdict(f) for f in findings]})
        if not args.json:
            if not findings:
                print(f"{name}: no known failure signature")
            for f in findings:
                print(f"{name}: {f}")
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    matrix = load_matrix(args.matrix)
    out = args.out or Path("matrix-results") / matrix.name
    inventory = args.inventory or matrix.inventory
    if not inventory:
        raise SparkrackError(
            Problem(
                str(args.matrix),
                "inventory",
                "no inventory to deploy with",
                "add `inventory:` to the matrix file or pass --inventory",
                "matrix-file",
            )
        )
    bench = dict(matrix.bench)

    def bench_case(case: Case, case_dir: Path) -> RunResult:
        sglang = case.profile.get("sglang") or {}
        model = bench.get("model") or sglang.get("served_model_name") or case.profile.get("model")
        spec = RequestSpec(
            url=normalize_url(str(bench.get("url", "http://127.0.0.1:30000"))),
            model=str(model),
            max_tokens=int(bench.get("max_tokens", 3072)),
            api_key=os.environ.get(str(bench.get("api_key_env", "OPENAI_API_KEY"))) or None,
            thinking=bench.get("thinking"),
            seed=int(bench.get("seed", 0)),
        )
        config = BenchConfig(
            spec=spec,
            concurrency=list(bench.get("concurrency", [1, 4, 8])),
            label=case.name,
            metrics_url=f"{spec.url}/metrics",
            progress=False if args.no_progress else None,
        )
        run = run_bench(config)
        write_outputs(run, case_dir)
        return run

    runner = MatrixRunner(
        matrix=matrix,
        out_dir=out,
        deployer=AnsibleDeployer(inventory=str(inventory)),
        bench=bench_case,
        validator=default_validator(),
    )
    state = runner.run()
    finish_matrix(matrix, state, out)
    if args.write_provenance:
        print(f"{matrix.base_profile}: provenance.measured <- {write_provenance(matrix, state)}")
    return 0


def finish_matrix(matrix: Any, state: dict[str, Any], out: Path) -> Path:
    """summary.md/json + a combined TESTLOG and plots over every finished case."""
    summary = write_summary(matrix, state, out)
    runs = [
        load_results(Path(entry["results"]))
        for entry in state["cases"].values()
        if entry.get("status") == "done" and Path(entry.get("results", "")).is_file()
    ]
    if runs:
        (out / "TESTLOG.md").write_text(
            render_testlog(runs, f"sparkrack matrix {matrix.name}"), encoding="utf-8"
        )
        plot_runs(runs, out)
    print(summary.read_text(encoding="utf-8"))
    return summary
