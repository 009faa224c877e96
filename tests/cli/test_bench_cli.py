"""`sparkrack bench` end to end through the real CLI entry point against the test server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkrack.bench import server
from sparkrack.cli import main

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback

FAST = ["--rate", "2000", "--tokens-per-chunk", "4", "--ttft", "0.01", "--natural-tokens", "120"]


def _small(url: str, *extra: str) -> list[str]:
    """A one-request bench invocation."""
    base = ["bench", "--url", url, "--model", server.BASE_MODEL, "--max-tokens", "20"]
    return [*base, "--concurrency", "1", *extra]


@pytest.fixture(scope="module")
def url() -> Any:
    with server.spawn(FAST) as u:
        yield u


def test_bench_writes_every_output(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "bench",
            "--url",
            url + "/v1",
            "--model",
            server.BASE_MODEL,
            "--max-tokens",
            "200",
            "--concurrency",
            "1,2",
            "--label",
            "baseline",
            "--thinking",
            "off",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "TESTLOG.md",
        "results.json",
        "results.schema.json",
        "tok_s_vs_concurrency.png",
        "ttft_distribution.png",
    ]
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["label"] == "baseline" and data["meta"]["thinking"] is False
    assert data["meta"]["metrics_url"] == url + "/metrics"
    stdout = capsys.readouterr().out
    assert "| baseline |" in stdout and "n=2 peak" in stdout


def test_default_out_dir_is_timestamped(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(_small(url, "--no-metrics")) == 0
    (folder,) = (tmp_path / "bench-results").iterdir()
    assert folder.name.endswith("Z") and (folder / "results.json").is_file()


def test_endpoint_down_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert "endpoint not reachable" in err and "[bench-endpoint-down]" in err
    assert not (tmp_path / "results.json").exists()


def test_wrong_model_lists_the_served_ones(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--url", url, "--model", "gpt-17"])
    err = capsys.readouterr().err
    assert code == 1
    assert "'gpt-17' is not served" in err and server.BASE_MODEL in err
    assert "[bench-model-unknown]" in err


def test_api_key_from_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with server.spawn([*FAST, "--api-key-env", "STANDIN_KEY"], env={"STANDIN_KEY": "s3cret"}) as u:
        args = _small(u, "--api-key-env", "BENCH_KEY", "--out", str(tmp_path))
        monkeypatch.delenv("BENCH_KEY", raising=False)
        assert main(args) == 1
        assert "refused the API key" in capsys.readouterr().err
        monkeypatch.setenv("BENCH_KEY", "s3cret")
        assert main(args) == 0
    assert "s3cret" not in (tmp_path / "results.json").read_text()


def test_garbage_level_exits_2(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "bench",
            "--url",
            url,
            "--model",
            f"{server.BASE_MODEL}-uniform",
            "--no-guard",
            "--no-canary",
            "--max-tokens",
            "300",
            "--concurrency",
            "4",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 2
    assert "GARBAGE" in capsys.readouterr().err
    assert json.loads((tmp_path / "results.json").read_text())["levels"][0]["status"] == "GARBAGE"


def test_logs_from_must_exist(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--url", url, "--model", "m", "--logs-from", "/nonexistent.log"]) == 2
    assert "--logs-from" in capsys.readouterr().err


def test_bench_server_refuses_non_loopback() -> None:
    with pytest.raises(SystemExit, match="loopback"):
        main(["bench-server", "--host", "0.0.0.0"])


def test_bench_report_combines_runs(url: str, tmp_path: Path) -> None:
    for label in ("alpha", "beta"):
        assert main(_small(url, "--label", label, "--out", str(tmp_path / label))) == 0
    out = tmp_path / "combined"
    assert (
        main(
            [
                "bench-report",
                str(tmp_path / "alpha"),
                str(tmp_path / "beta" / "results.json"),
                "--out",
                str(out),
                "--title",
                "two configs",
            ]
        )
        == 0
    )
    text = (out / "TESTLOG.md").read_text()
    assert text.startswith("# two configs — TESTLOG")
    assert "| alpha |" in text and "| beta |" in text
    assert (out / "tok_s_vs_concurrency.png").is_file()
    assert main(["bench-report", str(tmp_path / "nothing"), "--out", str(out)]) == 2
