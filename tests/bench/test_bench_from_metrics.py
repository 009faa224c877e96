"""`sparkrack bench --from-metrics`: the engine's own generated-token count per level, read from
/metrics before and after it, beside the client's figures (the real CLI and test server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkrack.bench import server
from sparkrack.bench.mtp import generated_tokens
from sparkrack.cli import main
from sparkrack.cli.exitcodes import ExitCode

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback

FAST = ["--rate", "1000", "--tokens-per-chunk", "2", "--ttft", "0.01", "--natural-tokens", "100000"]


def _bench(url: str, out: Path, *extra: str) -> list[str]:
    return [
        "bench", "--url", url, "--model", server.BASE_MODEL, "--max-tokens", "120",
        "--concurrency", "1,4", "--no-progress", "--out", str(out), *extra,
    ]  # fmt: skip


def _levels(out: Path) -> list[dict[str, Any]]:
    levels: list[dict[str, Any]] = json.loads((out / "results.json").read_text())["levels"]
    return levels


def test_server_side_tokens_match_what_the_client_received(tmp_path: Path) -> None:
    with server.spawn([*FAST, "--accept-len", "2.5"]) as url:
        assert main(_bench(url, tmp_path, "--from-metrics")) == ExitCode.OK
    for level in _levels(tmp_path):
        received = sum(r["output_tokens"] for r in level["requests"])
        # The warm-up request is sent before the first level and left out of both counts.
        assert level["server_tokens"] == received
        assert abs(level["server_tok_s"] - received / level["wall_s"]) < 1e-6
        assert level["accept_len"] == 2.5
    assert "server tok/s" in (tmp_path / "TESTLOG.md").read_text()


def test_without_the_flag_there_are_no_server_figures(tmp_path: Path) -> None:
    with server.spawn(FAST) as url:
        assert main(_bench(url, tmp_path)) == ExitCode.OK
    assert all(lv["server_tokens"] is None for lv in _levels(tmp_path))


def test_a_server_without_the_counter_gets_a_note_not_a_failure(tmp_path: Path) -> None:
    with server.spawn(FAST) as url:
        code = main(_bench(url, tmp_path, "--from-metrics", "--metrics-url", f"{url}/health"))
    assert code == ExitCode.OK
    for level in _levels(tmp_path):
        assert level["server_tokens"] is None
        assert any("server-side figures unavailable" in n for n in level["notes"])


def test_counter_parsing() -> None:
    text = (
        "# TYPE vllm:generation_tokens counter\n"
        'vllm:generation_tokens_total{model_name="m",engine="0"} 10.0\n'
        'vllm:generation_tokens_total{model_name="m",engine="1"} 5.0\n'
        'vllm:generation_tokens_created{model_name="m"} 1.7e9\n'
    )
    assert generated_tokens(text) == 15.0
    assert generated_tokens("sglang:generation_tokens_total NaN\n") is None
    assert generated_tokens("other_total 3\n") is None
