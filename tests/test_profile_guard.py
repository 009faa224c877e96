"""The group guard probe against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkrack.profiles.group_guard import main


class Head(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture()
def head() -> Iterator[tuple[ThreadingHTTPServer, str]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Head)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_startup_waits_for_the_head(head: tuple[ThreadingHTTPServer, str], tmp_path: Path) -> None:
    server, url = head
    state = tmp_path / "seen"
    Head.status = 503  # head still loading
    assert main(["startup", "--head", url, "--state", str(state), "--timeout", "2"]) == 1
    assert not state.exists()
    Head.status = 200
    assert main(["startup", "--head", url, "--state", str(state), "--timeout", "2"]) == 0
    assert state.exists()


def test_live_fails_once_a_seen_head_goes_away(
    head: tuple[ThreadingHTTPServer, str], tmp_path: Path
) -> None:
    server, url = head
    state = tmp_path / "seen"
    Head.status = 503
    assert main(["live", "--head", url, "--state", str(state), "--timeout", "2"]) == 0  # never seen
    Head.status = 200
    assert main(["live", "--head", url, "--state", str(state), "--timeout", "2"]) == 0
    Head.status = 503  # head restarted or its group hangs
    assert main(["live", "--head", url, "--state", str(state), "--timeout", "2"]) == 1


def test_live_fails_when_the_head_is_unreachable(tmp_path: Path) -> None:
    state = tmp_path / "seen"
    state.write_text("1\n")
    assert (
        main(["live", "--head", "http://127.0.0.1:9", "--state", str(state), "--timeout", "1"]) == 1
    )
