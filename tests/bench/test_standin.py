"""The lab's stand-in for the smoke request: the module the serve play runs on KWOK pods."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from sparkrack.serving.scripts import smoke_chat

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback


def test_standin_answers_the_smoke_request_as_the_served_model() -> None:
    # As roles/serving/tasks/hardware/simulated.yml runs it: a fresh interpreter, -m.
    result = subprocess.run(
        [sys.executable, "-m", "sparkrack.bench.standin", "--model", "lab-model",
         "--max-tokens", "8", "--timeout", "30"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    first, report = result.stdout.splitlines()[:2]
    assert "serving 'lab-model'" in first
    assert json.loads(report)["done"] is True


def test_smoke_client_fails_without_a_server() -> None:
    # Negative control: the smoke client the stand-in drives refuses when nothing answers.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = smoke_chat.main(["--url", f"http://127.0.0.1:{port}", "--model", "m", "--timeout", "5"])
    assert code != 0
