"""The answer canary: its judges, and `bench` / `watch --probe canary` against real test-server
processes that answer right, answer wrong (fluent and fast) or stream word salad.

The server answering right is the negative control of every WRONG-ANSWERS / wrong-answers case:
the same run against the same server without the fault must pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkrack.bench import canary
from sparkrack.bench.server import BASE_MODEL, solve, spawn
from sparkrack.cli import main

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback

SUM, COPY, ECHO = canary.QUESTIONS


@pytest.mark.parametrize(
    ("q", "answer"),
    [
        (SUM, "42"),
        (SUM, "17 + 25 = 42."),
        (SUM, "The answer is **42**"),
        (COPY, "violet harbor 4821 lantern"),
        (COPY, '"Violet  harbor 4821 lantern"'),
        (ECHO, '{"canary": "sparkrack", "n": 7}'),
        (ECHO, '```json\n{"n": 7, "canary": "sparkrack"}\n```'),
    ],
)
def test_right_answers_pass(q: canary.Question, answer: str) -> None:
    assert canary.judge(q, answer).right


@pytest.mark.parametrize(
    ("q", "answer", "why"),
    [
        (SUM, "", "no number in the answer"),
        (SUM, "42 - no, 43", "the last number is 43, not 42"),
        (SUM, "the scheduler routes the packet", "no number in the answer"),
        (COPY, "lantern 4821 harbor violet", "does not come back"),
        (COPY, "violet harbor 4812 lantern", "does not come back"),
        (ECHO, '{"canary": "sparkrack", "n": 8}', "no JSON object equal"),
        (ECHO, '{"canary": "sparkrack", "n": 7', "no JSON object equal"),
        (ECHO, "{{{ not json", "no JSON object equal"),
    ],
)
def test_wrong_answers_fail(q: canary.Question, answer: str, why: str) -> None:
    verdict = canary.judge(q, answer)
    assert not verdict.right and verdict.why is not None and why in verdict.why


def test_the_reasoning_is_judged_only_when_there_is_no_content() -> None:
    assert canary.judge(SUM, "", "so it is 42").right
    assert not canary.judge(SUM, "43", "so it is 42").right


def test_the_test_server_works_the_questions_out() -> None:
    """Its answers are computed from the question, not looked up: other numbers work too."""
    assert solve("What is 100 + -1? Reply with the number only.") == "99"
    assert [canary.judge(q, solve(q.prompt) or "").right for q in canary.QUESTIONS] == [True] * 3
    wrong = [canary.judge(q, solve(q.prompt, wrong=True) or "").right for q in canary.QUESTIONS]
    assert wrong == [False] * 3
    assert solve("Tell me a story.") is None


def _bench(url: str, out: Path, *extra: str, model: str = BASE_MODEL) -> list[str]:
    return [
        "bench", "--url", url, "--model", model, "--concurrency", "1,4,8", "--max-tokens", "64",
        "--no-metrics", "--no-progress", "--out", str(out), *extra,
    ]  # fmt: skip


def _levels(out: Path) -> dict[int, dict[str, Any]]:
    data = json.loads((out / "results.json").read_text())
    return {lv["concurrency"]: lv for lv in data["levels"]}


def test_bench_passes_a_server_that_answers_right(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with spawn(["--rate", "1000", "--ttft", "0.01"]) as url:
        code = main(_bench(url, tmp_path))
    output = "".join(capsys.readouterr())
    assert code == 0, output
    for n, level in _levels(tmp_path).items():
        assert level["status"] == "ok"
        assert level["canary"]["asked"] == max(n, 3) == level["canary"]["right"]
        print(f"canary n={n}: {level['canary']['wall_s']:.3f} s")
    assert "canary: 8/8 right" in output


@pytest.mark.parametrize(
    ("server_args", "model", "first_reason"),
    [
        (["--wrong-answers"], BASE_MODEL, "canary sum: the last number is 43, not 42"),
        ([], f"{BASE_MODEL}-word-salad", "canary sum: no number in the answer"),
    ],
)
def test_bench_marks_every_level_of_a_wrong_server(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    server_args: list[str],
    model: str,
    first_reason: str,
) -> None:
    """Fluent and fast but wrong (or word salad that no loop detector flags): WRONG-ANSWERS."""
    with spawn(["--rate", "1000", "--ttft", "0.01", *server_args]) as url:
        code = main(_bench(url, tmp_path, model=model))
    output = "".join(capsys.readouterr())
    assert code == 2, output
    for level in _levels(tmp_path).values():
        assert level["status"] == "WRONG-ANSWERS" and level["failed"] == 0
        assert level["canary"]["right"] == 0 and level["notes"][-3].startswith(first_reason)
    assert "n=8: WRONG-ANSWERS" in output and "| WRONG-ANSWERS |" in output


def test_bench_without_the_canary_does_not_ask(tmp_path: Path) -> None:
    with spawn(["--rate", "1000", "--ttft", "0.01", "--wrong-answers"]) as url:
        code = main(_bench(url, tmp_path, "--no-canary"))
    assert code == 0
    assert all(lv["canary"] is None for lv in _levels(tmp_path).values())


def _watch(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    cmd = [sys.executable, "-m", "sparkrack", "watch", "--url", url, "--once", "--json"]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize(
    ("server_args", "probe", "verdict", "code"),
    [
        ([], "canary", "healthy", 0),
        (["--wrong-answers"], "canary", "wrong-answers", 1),
        (["--wrong-answers"], "stream", "healthy", 0),  # tokens alone do not tell
    ],
)
def test_watch_with_the_canary_probe(
    server_args: list[str], probe: str, verdict: str, code: int
) -> None:
    with spawn(["--rate", "200", *server_args]) as url:
        got, result = _watch(url, "--probe", probe, "--stall-after", "5")
    assert (got, result["verdict"]) == (code, verdict), result
    if probe == "canary" and verdict == "wrong-answers":
        assert result["detail"].startswith("canary sum: the last number is 43, not 42")
    if probe == "canary" and verdict == "healthy":
        assert result["detail"].startswith("canary sum right")


@pytest.mark.parametrize(
    ("server_args", "verdict"), [([], "healthy"), (["--wrong-answers"], "wrong-answers")]
)
def test_the_watch_loop_asks_the_questions_in_turn(server_args: list[str], verdict: str) -> None:
    import asyncio
    import socket

    from sparkrack.watch.loop import LoopConfig, run
    from sparkrack.watch.metrics import Series
    from sparkrack.watch.probe import ProbeConfig, ProbeResult

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    seen: list[ProbeResult] = []

    async def on_verdict(result: ProbeResult, _: Series) -> None:
        seen.append(result)

    with spawn(["--rate", "500", *server_args]) as url:
        cfg = ProbeConfig(url=url, stall_s=5, max_tokens=64, canary=0)
        loop = LoopConfig("t", interval_s=0.05, metrics_port=port, probes=4)
        asyncio.run(run(cfg, loop, on_verdict, printer=lambda _: None))
    assert [str(r.verdict) for r in seen] == [verdict] * 4
    asked = [r.detail.removeprefix("canary ").split()[0].rstrip(":") for r in seen]
    assert asked == ["sum", "copy", "json", "sum"]


def test_the_watchdog_deployment_probes_with_the_canary_when_asked() -> None:
    from sparkrack.cli import build_parser
    from sparkrack.serving.objects.agents import WatchdogSettings, manifests

    def args(settings: WatchdogSettings) -> list[str]:
        docs = manifests("alpha", "sparkrack", "http://x:30000", "a", settings)
        [deployment] = [d for d in docs if d["kind"] == "Deployment"]
        words: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        return words

    image = "registry.invalid/sparkrack@sha256:" + "0" * 64
    canary = args(WatchdogSettings(image=image, canary=True))
    assert canary[-2:] == ["--probe", "canary"]
    assert build_parser().parse_args(canary).probe == "canary"  # the CLI takes what is rendered
    assert "--probe" not in args(WatchdogSettings(image=image))  # default: the stream probe
