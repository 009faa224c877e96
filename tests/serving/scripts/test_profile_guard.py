"""The group guard probe and the smoke-chat script against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkrack.serving.scripts.group_guard import main
from sparkrack.serving.scripts.smoke_chat import main as smoke

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback


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


class Chat(BaseHTTPRequestHandler):
    events: list[str] = []
    request: dict[str, object] = {}

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        length = int(self.headers["Content-Length"])
        Chat.request = json.loads(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in Chat.events:
            self.wfile.write(f"data: {event}\n\n".encode())
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture()
def chat() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _delta(text: str) -> str:
    return json.dumps({"choices": [{"delta": {"content": text}}]})


def test_smoke_streams_tokens(chat: str, capsys: pytest.CaptureFixture[str]) -> None:
    Chat.events = [_delta("rea"), _delta("dy"), "[DONE]"]
    assert smoke(["--url", chat, "--model", "m/x", "--max-tokens", "8", "--timeout", "5"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[0])
    assert result["chunks"] == 2 and result["text"] == "ready" and result["done"] is True
    assert Chat.request["stream"] is True and Chat.request["model"] == "m/x"


def test_smoke_fails_on_empty_or_unterminated_stream(chat: str) -> None:
    Chat.events = ["[DONE]"]
    assert smoke(["--url", chat, "--model", "m/x", "--timeout", "5"]) == 1
    Chat.events = [_delta("x")]
    assert smoke(["--url", chat, "--model", "m/x", "--timeout", "5"]) == 1


def test_smoke_fails_when_nothing_listens() -> None:
    assert smoke(["--url", "http://127.0.0.1:9", "--model", "m/x", "--timeout", "2"]) == 1


class KeyedChat(Chat):
    """A chat server that, like an engine started with a key, refuses a request without it."""

    key = "sk-engine"

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        if self.headers.get("Authorization") != f"Bearer {KeyedChat.key}":
            self.send_response(401)
            self.end_headers()
            return
        super().do_POST()


@pytest.fixture()
def keyed() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), KeyedChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_smoke_sends_the_engine_key_to_the_pod_address(
    keyed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The serve play's command: the address and the key come from the pod's variables."""
    Chat.events = [_delta("ready"), "[DONE]"]
    monkeypatch.setenv("POD_IP", "127.0.0.1")
    monkeypatch.setenv("SPARKRACK_ENGINE_KEY", KeyedChat.key)
    argv = ["--host-env", "POD_IP", "--port", str(keyed), "--model", "m/x", "--timeout", "5"]
    assert smoke([*argv, "--api-key-env", "SPARKRACK_ENGINE_KEY"]) == 0
    # Negative controls: no key sent, a wrong key, or the key's variable missing.
    assert smoke([*argv, "--api-key-env", ""]) == 1
    monkeypatch.setenv("SPARKRACK_ENGINE_KEY", "sk-wrong")
    assert smoke([*argv, "--api-key-env", "SPARKRACK_ENGINE_KEY"]) == 1
    monkeypatch.delenv("SPARKRACK_ENGINE_KEY")
    assert smoke([*argv, "--api-key-env", "SPARKRACK_ENGINE_KEY"]) == 1
