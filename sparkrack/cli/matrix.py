"""``sparkrack matrix MATRIX.yml``: validate, deploy, bench and record profile variants."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from sparkrack.bench.client import RequestSpec
from sparkrack.bench.report import load_results, plot_runs, render_testlog, write_outputs
from sparkrack.bench.runner import BenchConfig, RunResult, normalize_url, run_bench
from sparkrack.cli.exitcodes import ExitCode
from sparkrack.errors import Problem, UsageError
from sparkrack.matrix.runner import (
    AnsibleDeployer,
    Case,
    MatrixRunner,
    default_validator,
    load_matrix,
    write_provenance,
    write_summary,
)


def add_arguments(command: str, m: argparse.ArgumentParser) -> None:
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


def bench_model(bench: dict[str, Any], profile: dict[str, Any]) -> str:
    """The model name the bench sends: the matrix's ``bench.model``, else the name the case's
    server answers to (its engine's ``served_model_name``, else the model id)."""
    from sparkrack.serving import engine_of

    return str(bench.get("model") or engine_of(profile).served_name(profile))


def cmd_matrix(args: argparse.Namespace) -> int:
    if not args.matrix.is_file():
        raise UsageError(
            Problem(str(args.matrix), "MATRIX", "does not exist", "give a matrix file", "cli")
        )
    matrix = load_matrix(args.matrix)
    out = args.out or Path("matrix-results") / matrix.name
    inventory = args.inventory or matrix.inventory
    if not inventory:
        raise UsageError(
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
        spec = RequestSpec(
            url=normalize_url(str(bench.get("url", "http://127.0.0.1:30000"))),
            model=bench_model(bench, case.profile),
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
    return ExitCode.OK


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
