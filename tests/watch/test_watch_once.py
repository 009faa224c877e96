"""``sparkrack watch --once`` against real test-server processes, one per sick mode.

Each case runs the CLI as a user would (a child process), checks its one-line verdict, its exit
status and that the verdict came in time. The healthy server is the negative control of every
bad verdict: the same probe against the same server without the fault must say healthy.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrack.bench.server import spawn
from sparkrack.watch.probe import ProbeConfig, Verdict, run_probe

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback

timed = pytest.mark.serial  # bounds wall time or a rate: alone, never beside a worker

S = 2.0
"""--stall-after of the cases: short, so the suite stays quick."""
STARTUP_S = 3.0
"""Allowance for starting the CLI's Python process (imports) on a loaded machine."""


def watch(url: str, *args: str) -> tuple[int, dict[str, Any], float, str]:
    """(exit status, the probe as JSON, wall seconds, stderr) of ``watch --once --json``."""
    cmd = [sys.executable, "-m", "sparkrack", "watch", "--url", url, "--once", "--json"]
    t0 = time.monotonic()
    proc = subprocess.run(
        [*cmd, "--stall-after", str(S), *args], capture_output=True, text=True, timeout=120
    )
    wall = time.monotonic() - t0
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout), wall, proc.stderr


def line(url: str, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``watch --once`` (the one-line form)."""
    cmd = [sys.executable, "-m", "sparkrack", "watch", "--url", url, "--once"]
    proc = subprocess.run(
        [*cmd, "--stall-after", str(S), *args], capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stdout, proc.stderr


@timed
def test_healthy_server_is_healthy() -> None:
    with spawn(["--rate", "100"]) as url:
        code, probe, wall, _ = watch(url)
    assert (code, probe["verdict"]) == (0, "healthy"), probe
    assert probe["tokens"] == 8 and probe["health_status"] == 200
    assert probe["engine_tokens"] == 8  # the engine's counter moved with the stream
    assert wall < STARTUP_S + 2


@timed
@pytest.mark.parametrize("after", [0, 3])
def test_stall_with_health_200_is_reported_within_the_stall_limit(after: int) -> None:
    with spawn(["--rate", "100", "--stall-after", str(after)]) as url:
        code, probe, wall, _ = watch(url)
    assert (code, probe["verdict"]) == (1, "stalled"), probe
    assert probe["tokens"] == after
    assert probe["health_status"] == 200, "the stall mode keeps /health answering"
    assert probe["engine_tokens"] == after, "the engine counter stops with the stream"
    # Reported S after the last token, plus at most the loop's lateness (issue: <= S + 5 s).
    assert S <= probe["since_last_token_s"] <= S + 1.0
    assert wall <= STARTUP_S + S + 5
    assert f"after {after} tokens" in probe["detail"] or after == 0


@timed
def test_a_stall_is_reported_within_the_limit_by_the_tests_clock() -> None:
    """The stall bound held by a clock outside the probe: the probe's own ``since_last_token_s``
    is what it says of itself. In process, so no interpreter start blurs the figure: the three
    tokens take 0.03 s, the requests before them a few ms, so the verdict is due S after the
    probe starts and must come well before 2 S."""
    with spawn(["--rate", "100", "--stall-after", "3"]) as url:
        t0 = time.monotonic()
        result = run_probe(ProbeConfig(url=url, stall_s=S, max_tokens=64))
        wall = time.monotonic() - t0
    assert (result.verdict, result.tokens) == (Verdict.STALLED, 3), result
    assert S <= wall <= S + 1.5, f"{wall:.2f} s for a stall limit of {S:g} s"
    assert result.since_last_token_s is not None and result.since_last_token_s <= wall


@timed
def test_slow_but_progressing_server_is_never_stalled() -> None:
    """One token every 2 s at --stall-after 5 (the issue's figure) is healthy."""
    with spawn(["--rate", "0.5"]) as url:
        code, probe, _, _ = watch(url, "--stall-after", "5", "--max-tokens", "4")
    assert (code, probe["verdict"]) == (0, "healthy"), probe
    assert 1.8 <= probe["max_gap_s"] <= 2.5


@timed
def test_rate_below_the_floor_is_slow_and_above_it_healthy() -> None:
    with spawn(["--rate", "100", "--slow-after", "2", "--slow-rate", "1.5"]) as url:
        code, probe, _, _ = watch(url, "--max-tokens", "5", "--min-rate", "4")
        assert (code, probe["verdict"]) == (1, "slow"), probe
        assert probe["rate"] < 4
        # Negative control: the same stream against a floor it clears.
        code, probe, _, _ = watch(url, "--max-tokens", "5", "--min-rate", "0.5")
        assert (code, probe["verdict"]) == (0, "healthy"), probe


@timed
def test_decode_that_slows_past_the_stall_limit_is_stalled() -> None:
    with spawn(["--rate", "100", "--slow-after", "3", "--slow-rate", "0.25"]) as url:
        code, probe, wall, _ = watch(url)
    assert (code, probe["verdict"]) == (1, "stalled"), probe
    assert probe["tokens"] == 3
    assert wall <= STARTUP_S + S + 5


@timed
@pytest.mark.parametrize(
    ("server", "words"),
    [
        (["--http-error", "503"], "HTTP 503"),
        (["--http-error", "500"], "HTTP 500"),
        (["--error-after", "2"], "server error event"),
        (["--break-after", "3"], "stream broken after 3 tokens"),
    ],
)
def test_erroring_server_is_erroring(server: list[str], words: str) -> None:
    with spawn(["--rate", "100", *server]) as url:
        code, probe, wall, _ = watch(url)
    assert (code, probe["verdict"]) == (1, "erroring"), probe
    assert words in probe["detail"]
    assert wall <= STARTUP_S + 2


@pytest.fixture
def silent() -> Iterator[str]:
    """A listening socket that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ("html", "erroring: answered text/html, not an event stream"),
        ("garbage", "erroring: after 0 tokens: malformed SSE event"),
        ("redirect", "erroring: HTTP 307 redirect"),
    ],
)
def test_wrong_answers_get_one_line_and_no_traceback(answer: str, words: str) -> None:
    with spawn(["--answer", answer]) as url:
        code, out, err = line(url)
    assert code == 1 and out.startswith(words), out
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out + err


@timed
def test_a_server_that_never_answers_is_stalled_within_the_deadline(silent: str) -> None:
    t0 = time.monotonic()
    code, out, err = line(silent, "--model", "m")
    wall = time.monotonic() - t0
    assert code == 1 and out.startswith("stalled: stalled before the first token"), out
    assert "Traceback" not in err
    # /metrics (5 s) is read first, then the stream gets S: well inside the deadline.
    assert wall <= STARTUP_S + 5 + S + 2


def test_nothing_listening_is_down(closed_port: str) -> None:
    code, out, err = line(closed_port)
    assert code == 1 and out.startswith("down: unreachable"), out
    assert "Traceback" not in err


def test_bad_url_is_refused_with_a_clear_error() -> None:
    code, out, err = line("ftp://example.invalid")
    assert code == 2 and not out  # a usage error, like every command's
    assert "--url" in err and "Traceback" not in err
