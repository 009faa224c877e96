"""results.json + schema, TESTLOG Markdown, plots, usage handling, reasoning, MTP accept length."""

from __future__ import annotations

import copy
import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrack.bench import server
from sparkrack.bench.client import RequestSpec
from sparkrack.bench.mtp import LogFollower, parse_log_line, parse_log_text, parse_metrics
from sparkrack.bench.report import (
    load_results,
    render_testlog,
    validate_results,
    write_outputs,
)
from sparkrack.bench.runner import BenchConfig, RunResult, load_prompts, run_bench

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback

FAST = ["--rate", "2000", "--tokens-per-chunk", "4", "--ttft", "0.01"]


@pytest.fixture(scope="module")
def url() -> Any:
    with server.spawn([*FAST, "--accept-len", "2.7", "--natural-tokens", "150"]) as u:
        yield u


def _bench(url: str, levels: list[int], **spec: Any) -> RunResult:
    metrics = spec.pop("metrics", None)
    logs = spec.pop("logs", None)
    request = RequestSpec(url=url, model=spec.pop("model", server.BASE_MODEL), **spec)
    return run_bench(
        BenchConfig(
            spec=request,
            concurrency=levels,
            progress=False,
            metrics_url=metrics,
            logs_from=logs,
            metrics_interval_s=0.05,
        )
    )


def test_results_json_schema_testlog_and_plots(url: str, tmp_path: Path) -> None:
    run = _bench(url, [1, 4, 8], max_tokens=200, metrics=f"{url}/metrics")
    paths = write_outputs(run, tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    assert validate_results(data) == []
    assert [lv["concurrency"] for lv in data["levels"]] == [1, 4, 8]
    for lv in data["levels"]:
        assert lv["peak_tok_s"] > lv["aggregate_tok_s"] > 0
        assert lv["accept_len"] == pytest.approx(2.7)
        assert lv["requests"][0]["finish_reason"] == "stop"  # natural end at 150 tokens
        assert lv["requests"][0]["output_tokens"] == 150
    assert data["meta"]["prompt_set"] == {"file": "prompts-v1.json", "version": "1", "prompts": 8}
    # The shipped schema is written next to the results and refuses a broken document.
    assert json.loads(paths["schema"].read_text())["$id"].endswith("bench-results-v1.json")
    broken = copy.deepcopy(data)
    del broken["levels"][0]["peak_tok_s"]
    broken["levels"][1]["status"] = "fine"
    errors = validate_results(broken)
    assert any("peak_tok_s" in e for e in errors) and any("fine" in e for e in errors)
    # The round trip through results.json keeps every figure.
    again = load_results(tmp_path / "results.json")
    assert again.to_json() == data
    # TESTLOG: the seeds' columns, one row for the config.
    table = (tmp_path / "TESTLOG.md").read_text()
    header = (
        "| Config | n=1 tok/s (agg) | n=4 peak (agg) | n=8 peak (agg) | n=8 ok/failed | "
        "accept_len | n=8 TTFT p50 (s) | status |"
    )
    assert header in table
    row = next(line for line in table.splitlines() if line.startswith(f"| {server.BASE_MODEL} |"))
    assert "| 8/0 | ≈ 2.70 |" in row and row.endswith("| ok |")
    for name in ("tok_s_vs_concurrency.png", "ttft_distribution.png"):
        png = (tmp_path / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_missing_usage_is_reported_not_estimated() -> None:
    with server.spawn([*FAST, "--no-usage"]) as url:
        run = _bench(url, [2], max_tokens=100)
    level = run.levels[0]
    for req in level.requests:
        assert req.output_tokens is None and req.output_tokens_source == "missing"
        assert req.decode_tok_s is None and req.token_split_source is None
        assert req.content_tokens is None and req.reasoning_tokens is None
        assert any("never estimated from characters" in n for n in req.notes)
    assert level.peak_tok_s == 0 and any("no token counts" in n for n in level.notes)
    assert level.status == "NO-TOKEN-COUNTS"
    assert validate_results(run.to_json()) == []


def test_reasoning_toggle_uses_chat_template_kwargs(url: str) -> None:
    on = _bench(url, [1], max_tokens=100, thinking=True).levels[0].requests[0]
    off = _bench(url, [1], max_tokens=100, thinking=False).levels[0].requests[0]
    assert (on.reasoning_tokens, on.content_tokens, on.token_split_source) == (
        32,
        68,
        "usage-details",
    )
    assert (off.reasoning_tokens, off.content_tokens) == (0, 100)
    assert RequestSpec(url="u", model="m", thinking=False).body("hi", 0)[
        "chat_template_kwargs"
    ] == {"enable_thinking": False}
    assert "chat_template_kwargs" not in RequestSpec(url="u", model="m").body("hi", 0)


def test_prompt_set_is_versioned_package_data() -> None:
    version, prompts = load_prompts()
    assert version == "1" and len(prompts) == 8
    assert len({p.id for p in prompts}) == len(prompts)
    body = RequestSpec(url="u", model="m", seed=5).body(prompts[0].text, 3)
    assert body["seed"] == 8 and body["stream_options"]["include_usage"] is True


SGLANG_DECODE = (
    "[2026-06-12 10:01:02 TP0] Decode batch. #running-req: 8, #token: 9120, token usage: 0.01, "
    "accept len: 2.71, accept rate: 0.57, cuda graph: True, gen throughput (token/s): 199.70, "
    "#queue-req: 0"
)


def test_accept_len_parsers() -> None:
    assert parse_log_line(SGLANG_DECODE) == pytest.approx(2.71)
    older = "Decode batch. #running-req: 1, #token: 500, token usage: 0.00, accept len: 3.05, gen throughput (token/s): 26.68, #queue-req: 0"
    assert parse_log_line(older) == pytest.approx(3.05)
    assert parse_log_line(SGLANG_DECODE.replace("#running-req: 8", "#running-req: 0")) is None
    assert parse_log_line("Prefill batch. #new-seq: 1, #new-token: 30") is None
    assert parse_log_text(SGLANG_DECODE + "\nnoise\n" + older) == pytest.approx([2.71, 3.05])
    metrics = (
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{model_name="m",tp_rank="0"} 2.6\n'
        'sglang:spec_accept_length{model_name="m",tp_rank="1"} 2.8\n'
        'sglang:spec_accept_rate{model_name="m"} 0.5\n'
    )
    assert parse_metrics(metrics) == pytest.approx(2.7)
    assert parse_metrics("sglang:generation_tokens_total 5\n") is None


def test_accept_len_from_a_growing_log_file(tmp_path: Path) -> None:
    """--logs-from FILE: lines written while a level runs are attributed to that level."""
    log = tmp_path / "sglang.log"
    log.write_text("old: " + SGLANG_DECODE.replace("2.71", "9.99") + "\n")
    with server.spawn(["--rate", "200", "--ttft", "0.01"]) as url:
        stop = threading.Event()

        def writer() -> None:
            while not stop.is_set():
                with log.open("a") as fh:
                    fh.write(SGLANG_DECODE + "\n")
                time.sleep(0.05)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            run = _bench(url, [2], max_tokens=100, logs=str(log))
        finally:
            stop.set()
            thread.join()
    level = run.levels[0]
    assert level.accept_len == pytest.approx(2.71)  # not the 9.99 written before the run
    assert level.accept_len_source and level.accept_len_source.startswith("logs (")


def test_accept_len_from_a_finished_log_and_from_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    log = tmp_path / "done.log"
    log.write_text(SGLANG_DECODE + "\n" + SGLANG_DECODE.replace("2.71", "2.91") + "\n")
    run = _bench(url, [1], max_tokens=50, logs=str(log))
    assert run.levels[0].accept_len is None
    assert run.meta["accept_len_whole_log"] == pytest.approx(2.81)
    assert "did not grow" in run.meta["accept_len_note"]
    monkeypatch.setattr("sys.stdin", io.StringIO(SGLANG_DECODE + "\n"))
    follower = LogFollower("-")
    follower.start()
    deadline = time.monotonic() + 5
    while not follower.samples and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [v for _, v in follower.samples] == [pytest.approx(2.71)]
    with pytest.raises(FileNotFoundError):
        LogFollower(str(tmp_path / "missing.log"))


def test_testlog_marks_garbage_and_failed_levels(url: str) -> None:
    run = _bench(url, [1], max_tokens=50)
    run.levels[0].status = "GARBAGE"
    run.levels[0].garbage_reasons = ["uniform-stats: test"]
    text = render_testlog([run])
    assert "GARBAGE" in text and "uniform-stats: test" in text


def test_progress_only_on_a_terminal(url: str) -> None:
    from rich.console import Console

    spec = RequestSpec(url=url, model=server.BASE_MODEL, max_tokens=400)
    for terminal in (True, False):
        buffer = io.StringIO()
        console = Console(file=buffer, force_terminal=terminal, width=100)
        run_bench(BenchConfig(spec=spec, concurrency=[2], metrics_url=None), console)
        shown = buffer.getvalue()
        if terminal:
            assert "n=2" in shown and "2/2 done" in shown
        else:
            assert shown == ""
