"""Outputs of a run: results.json (+ its JSON Schema), TESTLOG Markdown, PNG plots."""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from sparkrack.bench.runner import RunResult
from sparkrack.bench.stats import NO_TOKEN_COUNTS, WRONG_ANSWERS, LevelResult, RequestResult

SCHEMA_FILE = "results.schema.json"


def results_schema() -> dict[str, Any]:
    raw = resources.files("sparkrack.bench").joinpath("data", SCHEMA_FILE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(raw)
    return schema


def validate_results(data: dict[str, Any]) -> list[str]:
    """Schema errors of a results.json document (empty list = valid)."""
    validator = jsonschema.Draft202012Validator(results_schema())
    return [
        f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    ]


def run_from_json(data: dict[str, Any]) -> RunResult:
    levels = []
    for lv in data["levels"]:
        fields = dict(lv)
        fields["requests"] = [RequestResult(**r) for r in lv["requests"]]
        levels.append(LevelResult(**fields))
    return RunResult(meta=dict(data["meta"]), levels=levels)


def load_results(path: Path) -> RunResult:
    return run_from_json(json.loads(path.read_text(encoding="utf-8")))


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _cell(level: LevelResult | None) -> str:
    """Peak with the aggregate beside it (n=1: the single stream's rate and its aggregate)."""
    if level is None:
        return "—"
    if level.status == "FAILED":
        return "FAILED"
    if level.status == NO_TOKEN_COUNTS:
        return "no token counts"
    text = f"{_fmt(level.peak_tok_s)} (agg {_fmt(level.aggregate_tok_s)})"
    if level.overlap_warning:
        text += " ⚠ no overlap"
    return f"{text} {level.status}" if level.status in ("GARBAGE", WRONG_ANSWERS) else text


def summary_lines(run: RunResult) -> list[str]:
    """One line per level: verdict, peak beside aggregate, overlap, and what went wrong."""
    lines = []
    for lv in run.levels:
        line = (
            f"n={lv.concurrency}: {lv.status} · peak {_fmt(lv.peak_tok_s)} tok/s · aggregate "
            f"{_fmt(lv.aggregate_tok_s)} tok/s · {lv.ok} ok / {lv.failed} failed"
        )
        if lv.mean_concurrent_streams is not None:
            line += f" · {lv.mean_concurrent_streams:.2f} streams open on average"
        lines.append(line)
        lines += [f"  {reason}" for reason in lv.garbage_reasons]
        if lv.canary is not None:
            c = lv.canary
            lines.append(f"  canary: {c['right']}/{c['asked']} right in {c['wall_s']:.2f} s")
            lines += [f"  {note}" for note in lv.notes if note.startswith("canary ")]
        if lv.overlap_warning:
            lines.append(f"  WARNING {lv.overlap_warning}")
        errors = sorted({r.error for r in lv.requests if r.status != "ok" and r.error})
        lines += [f"  failed: {e}" for e in errors[:5]]
        if lv.status == NO_TOKEN_COUNTS:
            lines.append("  no token counts: the server sent no usage")
    return lines


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _accept(run: RunResult) -> str:
    values = [lv.accept_len for lv in run.levels if lv.accept_len is not None]
    if values:
        shown = list(dict.fromkeys(f"{v:.2f}" for v in values))
        return "≈ " + " / ".join(shown)
    whole = run.meta.get("accept_len_whole_log")
    return f"≈ {whole:.2f} (whole log)" if isinstance(whole, float) else "—"


def render_testlog(runs: Sequence[RunResult], title: str = "sparkrack bench") -> str:
    """A TESTLOG-style Markdown table like the seeds' (one row per config) + per-level details."""
    levels = sorted({lv.concurrency for run in runs for lv in run.levels})
    top = levels[-1] if levels else 0
    heads = ["Config"] + [f"n={n} tok/s (agg)" if n == 1 else f"n={n} peak (agg)" for n in levels]
    heads += [f"n={top} ok/failed", "accept_len", f"n={top} TTFT p50 (s)", "status"]
    lines = [f"# {title} — TESTLOG", ""]
    if runs:
        meta = runs[0].meta
        models = ", ".join(dict.fromkeys(f"`{r.meta.get('model')}`" for r in runs))
        urls = ", ".join(dict.fromkeys(str(r.meta.get("url")) for r in runs))
        think = meta.get("thinking")
        thinking = "template default" if think is None else ("on" if think else "off")
        lines += [
            f"- started: {meta.get('started_at')} · tool: {meta.get('tool')}",
            f"- endpoint: {urls} · model: {models}",
            f"- max_tokens per request: {meta.get('max_tokens')} · prompt set: "
            f"{meta.get('prompt_set', {}).get('file')} (v{meta.get('prompt_set', {}).get('version')})"
            f" · seed: {meta.get('seed')} · thinking: {thinking}",
            "- n=N = N concurrent requests; peak = Σ per-request decode tok/s over the successful "
            "requests (`peak_tok_s`); aggregate = tokens / wall time (`aggregate_tok_s`, below); "
            "failed = server error or repetition guard; GARBAGE = post-hoc fingerprint; "
            "WRONG-ANSWERS = a canary question (sum, copy, JSON echo) answered wrong; "
            "⚠ no overlap = fewer than half of the n streams were open on average, so peak is "
            "not backed by concurrency (use aggregate).",
            "",
        ]
        warnings = [
            f"- **WARNING** {run.label} n={lv.concurrency}: {lv.overlap_warning}"
            for run in runs
            for lv in run.levels
            if lv.overlap_warning
        ]
        if warnings:
            lines += [*warnings, ""]
    lines += ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for run in runs:
        last = run.level(top)
        status = "ok"
        bad = [lv for lv in run.levels if lv.status != "ok"]
        if bad:
            status = ", ".join(f"n={lv.concurrency} {lv.status}" for lv in bad)
        row = [run.label] + [_cell(run.level(n)) for n in levels]
        row += [
            f"{last.ok}/{last.failed}" if last else "—",
            _accept(run),
            _fmt(last.ttft_p50_s) if last else "—",
            status,
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "## Per level",
        "",
        "| Config | n | peak_tok_s | aggregate_tok_s | server tok/s | mean streams open | "
        "all n open | ok/failed | TTFT p50 / p95 (s) | decode tok/s p50 | accept_len | status | "
        "client CPU s / 1k tok |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for lv in run.levels:
            lines.append(
                f"| {run.label} | {lv.concurrency} | {_fmt(lv.peak_tok_s)} | "
                f"{_fmt(lv.aggregate_tok_s)} | {_fmt(lv.server_tok_s)} | "
                f"{_fmt(lv.mean_concurrent_streams)} | "
                f"{_pct(lv.all_streaming_fraction)} | {lv.ok}/{lv.failed} | "
                f"{_fmt(lv.ttft_p50_s)} / {_fmt(lv.ttft_p95_s)} | {_fmt(lv.decode_tok_s_p50)} | "
                f"{_fmt(lv.accept_len)} | {lv.status} | {_fmt(lv.client_cpu_s_per_1k_tok, 4)} |"
            )
    notes = [
        f"- {run.label} n={lv.concurrency}: {reason}"
        for run in runs
        for lv in run.levels
        for reason in lv.garbage_reasons
        + [
            f"request {r.index} failed: {r.error}"
            for r in lv.requests
            if r.status != "ok" and r.error
        ][:8]
        + lv.notes
    ]
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


def plot_runs(runs: Sequence[RunResult], out_dir: Path) -> list[Path]:
    """tok/s vs concurrency per config, and the TTFT distribution per level (PNG, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for run in runs:
        xs = [lv.concurrency for lv in run.levels]
        line = ax.plot(xs, [lv.peak_tok_s for lv in run.levels], marker="o", label=run.label)
        ax.plot(
            xs,
            [lv.aggregate_tok_s for lv in run.levels],
            linestyle="--",
            marker="x",
            color=line[0].get_color(),
            label=f"{run.label} (aggregate)",
        )
        for lv in run.levels:
            if lv.status != "ok":
                ax.annotate(lv.status, (lv.concurrency, lv.peak_tok_s), color="red", fontsize=8)
    ax.set_xscale("log", base=2)
    ticks = sorted({lv.concurrency for run in runs for lv in run.levels})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("concurrent requests (n)")
    ax.set_ylabel("tok/s")
    ax.set_title("Throughput vs concurrency (solid: peak = Σ decode tok/s; dashed: aggregate)")
    ax.title.set_fontsize(9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "tok_s_vs_concurrency.png"
    fig.savefig(path)
    plt.close(fig)
    paths.append(path)

    data: list[list[float]] = []
    labels: list[str] = []
    for run in runs:
        for lv in run.levels:
            ttfts = [r.ttft_s for r in lv.requests if r.ttft_s is not None]
            if ttfts:
                data.append(ttfts)
                labels.append(
                    f"{run.label}\nn={lv.concurrency}" if len(runs) > 1 else f"n={lv.concurrency}"
                )
    fig, ax = plt.subplots(figsize=(max(7.0, 0.8 * len(data)), 4.5), dpi=110)
    if data:
        ax.boxplot(data, tick_labels=labels)
        if len(runs) > 1:
            ax.tick_params(axis="x", labelsize=7, labelrotation=30)
    ax.set_ylabel("TTFT (s)")
    ax.set_title("Time to first token per level")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = out_dir / "ttft_distribution.png"
    fig.savefig(path)
    plt.close(fig)
    paths.append(path)
    return paths


def write_outputs(run: RunResult, out_dir: Path) -> dict[str, Path]:
    """results.json (schema-validated before writing), TESTLOG.md and the plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = run.to_json()
    errors = validate_results(data)
    if errors:  # a bug in sparkrack, not in the user's input
        raise RuntimeError("results.json does not match its schema:\n" + "\n".join(errors))
    results = out_dir / "results.json"
    results.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    schema = out_dir / SCHEMA_FILE
    schema.write_text(json.dumps(results_schema(), indent=2) + "\n", encoding="utf-8")
    testlog = out_dir / "TESTLOG.md"
    testlog.write_text(render_testlog([run]), encoding="utf-8")
    plots = plot_runs([run], out_dir)
    return {"results": results, "schema": schema, "testlog": testlog, "plots": plots[0]}
