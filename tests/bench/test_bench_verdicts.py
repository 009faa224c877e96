"""Verdicts and exit codes of `sparkrack bench` on a broken deployment, through the real CLI and
the real test server: a mid-stream error, no usage, requests that never overlap, a cold start, a
model the server does not list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkrack.bench import server
from sparkrack.bench.client import DEFAULT_STALL_S
from sparkrack.cli import build_parser, main
from sparkrack.cli.exitcodes import ExitCode

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback

FAST = ["--rate", "1000", "--tokens-per-chunk", "2", "--ttft", "0.01", "--natural-tokens", "100000"]


def _bench(url: str, out: Path, *extra: str, n: str = "1,2") -> list[str]:
    return [
        "bench", "--url", url, "--model", server.BASE_MODEL, "--max-tokens", "200",
        "--concurrency", n, "--no-progress", "--out", str(out), *extra,
    ]  # fmt: skip


def _levels(out: Path) -> list[dict[str, Any]]:
    levels: list[dict[str, Any]] = json.loads((out / "results.json").read_text())["levels"]
    return levels


def test_exit_codes_are_one_enum() -> None:
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5]


def test_mid_stream_error_event_fails_the_request_with_the_server_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with server.spawn([*FAST, "--error-after", "5"]) as url:
        code = main(_bench(url, tmp_path))
    assert code == ExitCode.BAD_LEVEL
    for level in _levels(tmp_path):
        assert level["status"] == "FAILED"
        for req in level["requests"]:
            assert req["status"] == "failed" and req["finish_reason"] is None
            assert req["error"] == (
                "server error event: the engine failed after 10 tokens (test server --error-after)"
            )
    assert "the engine failed after 10 tokens" in capsys.readouterr().err


def test_no_usage_is_no_token_counts_and_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with server.spawn([*FAST, "--no-usage"]) as url:
        strict = main(_bench(url, tmp_path / "strict"))
        err = capsys.readouterr().err
        allowed = main(_bench(url, tmp_path / "allowed", "--allow-no-usage"))
    assert strict == ExitCode.NO_TOKEN_COUNTS and allowed == ExitCode.OK
    assert "no token counts" in err and "--allow-no-usage" in err
    for out in (tmp_path / "strict", tmp_path / "allowed"):
        for level in _levels(out):
            assert level["status"] == "NO-TOKEN-COUNTS" and level["peak_tok_s"] == 0
            for req in level["requests"]:
                assert req["output_tokens"] is None and req["content_tokens"] is None
        assert "no token counts" in (out / "TESTLOG.md").read_text()


def test_no_usage_with_usage_present_is_a_negative_control(tmp_path: Path) -> None:
    with server.spawn(FAST) as url:
        assert main(_bench(url, tmp_path)) == ExitCode.OK
    assert {lv["status"] for lv in _levels(tmp_path)} == {"ok"}


def test_tokenizer_needs_allow_no_usage_and_a_tokenizer_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(_bench("http://127.0.0.1:9", tmp_path, "--tokenizer", str(tmp_path))) == 2
    )  # a usage error
    assert "add --allow-no-usage" in capsys.readouterr().err
    args = _bench("http://127.0.0.1:9", tmp_path, "--allow-no-usage", "--tokenizer", str(tmp_path))
    assert main(args) == 1
    assert "no tokenizer.json here" in capsys.readouterr().err


def test_serialising_server_warns_that_peak_is_not_concurrent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with server.spawn([*FAST, "--serialize"]) as url:
        code = main(_bench(url, tmp_path, n="4"))
    captured = capsys.readouterr()
    assert code == ExitCode.OK  # a warning, not a failure: aggregate is still right
    (level,) = _levels(tmp_path)
    assert level["mean_concurrent_streams"] < 1.3 and level["all_streaming_fraction"] < 0.05
    assert level["overlap_warning"].startswith("peak not backed by concurrency")
    assert level["peak_tok_s"] > 3 * level["aggregate_tok_s"]
    testlog = (tmp_path / "TESTLOG.md").read_text()
    assert "**WARNING**" in testlog and "⚠ no overlap" in testlog
    assert "WARNING peak not backed by concurrency" in captured.err


def test_batching_server_has_full_overlap_and_no_warning(tmp_path: Path) -> None:
    with server.spawn(FAST) as url:
        assert main(_bench(url, tmp_path, "--max-tokens", "1000", n="4")) == ExitCode.OK
    (level,) = _levels(tmp_path)
    # 1 s streams: TTFT and scheduling noise on a busy machine stay a small share of the level.
    assert level["mean_concurrent_streams"] > 3.0 and level["all_streaming_fraction"] > 0.6
    assert level["overlap_warning"] is None
    assert "WARNING" not in (tmp_path / "TESTLOG.md").read_text()


def test_aggregate_is_shown_beside_peak(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with server.spawn(FAST) as url:
        assert main(_bench(url, tmp_path, n="2")) == 0
    (level,) = _levels(tmp_path)
    cell = f"{level['peak_tok_s']:.2f} (agg {level['aggregate_tok_s']:.2f})"
    assert cell in (tmp_path / "TESTLOG.md").read_text()
    assert f"aggregate {level['aggregate_tok_s']:.2f} tok/s" in capsys.readouterr().err


@pytest.mark.parametrize(("warmup", "cold_in_results"), [("1", False), ("0", True)])
def test_warmup_keeps_the_cold_start_out_of_the_results(
    tmp_path: Path, warmup: str, cold_in_results: bool
) -> None:
    with server.spawn([*FAST, "--cold-start", "1.0"]) as url:
        assert main(_bench(url, tmp_path, "--warmup", warmup, n="1")) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    ttft = data["levels"][0]["requests"][0]["ttft_s"]
    assert (ttft >= 1.0) is cold_in_results, ttft
    assert len(data["levels"][0]["requests"]) == 1
    if warmup == "1":
        assert data["meta"]["warmup"]["requests"] == 1 and data["meta"]["warmup"]["failed"] == 0
    else:
        assert "warmup" not in data["meta"]


def test_skip_model_check_for_a_server_that_does_not_list_its_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with server.spawn([*FAST, "--unlisted"]) as url:
        refused = main(_bench(url, tmp_path / "a", n="1"))
        err = capsys.readouterr().err
        accepted = main(_bench(url, tmp_path / "b", "--skip-model-check", n="1"))
    assert refused == 1 and "--skip-model-check" in err and "[bench-model-unknown]" in err
    assert accepted == 0
    assert json.loads((tmp_path / "b" / "results.json").read_text())["meta"]["skip_model_check"]


def test_stall_timeout_default_is_bounded() -> None:
    args = build_parser().parse_args(["bench", "--url", "http://h", "--model", "m"])
    assert args.stall_timeout == DEFAULT_STALL_S <= 120
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--url", "u", "--model", "m", "--stall-timeout", "0"])
