"""Tokens/s for ``sparkrack status`` read from Prometheus' HTTP API.

No real Prometheus runs here: a local HTTP server answers ``/api/v1/query`` in Prometheus'
instant-query format (and in the broken ways a wrong URL answers), and the parsing is judged on
those answers.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sparkrack.observe.query import tokens_per_s
from sparkrack.observe.rules import GEN_RATE

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback


class Answer:
    """What the fake Prometheus answers next (status, content type, body) and what it was asked."""

    def __init__(self) -> None:
        self.status = 200
        self.body: bytes = b""
        self.queries: list[str] = []

    def json(self, data: Any, status: int = 200) -> None:
        self.status, self.body = status, json.dumps(data).encode()


def vector(*samples: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1732412345.123, v]} for m, v in samples],
        },
    }


@pytest.fixture
def prometheus() -> Iterator[tuple[str, Answer]]:
    answer = Answer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            url = urllib.parse.urlsplit(self.path)
            if url.path != "/api/v1/query":
                self.send_error(404)
                return
            answer.queries.append(urllib.parse.parse_qs(url.query)["query"][0])
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer
    finally:
        server.shutdown()
        server.server_close()


def test_tokens_per_s_by_deployment_from_the_recording_rule(
    prometheus: tuple[str, Answer],
) -> None:
    url, answer = prometheus
    answer.json(
        vector(
            ({"deployment": "gemma", "namespace": "sparkrack", "profile": "p"}, "41.5"),
            ({"deployment": "super-vllm", "namespace": "sparkrack", "profile": "q"}, "0"),
            ({"deployment": "nan", "namespace": "sparkrack"}, "NaN"),
        )
    )
    rates = tokens_per_s(url, "sparkrack")
    assert rates.error == ""
    assert rates.by_deployment == {"gemma": 41.5, "super-vllm": 0.0}
    assert answer.queries == [f'{GEN_RATE}{{namespace="sparkrack"}}']


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (200, b"<html><body>Grafana</body></html>", "not JSON"),
        (200, json.dumps({"status": "error", "error": "parse error"}).encode(), "parse error"),
        (200, json.dumps({"status": "success", "data": {"resultType": "matrix"}}).encode(), "not an instant vector"),
        (200, json.dumps(vector(({"deployment": "g"}, "many"))).encode(), "not a number"),
        (200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}).encode(), "without metric"),
        (503, b"down", "HTTP 503"),
    ],
)  # fmt: skip
def test_an_answer_that_is_not_a_vector_gives_a_reason(
    prometheus: tuple[str, Answer], status: int, body: bytes, reason: str
) -> None:
    url, answer = prometheus
    answer.status, answer.body = status, body
    rates = tokens_per_s(url, "sparkrack")
    assert rates.by_deployment == {} and reason in rates.error, rates.error


def test_nothing_listening_and_a_non_http_url_give_a_reason() -> None:
    assert "unreachable" in tokens_per_s("http://127.0.0.1:9", "ns").error
    assert "not an http(s) URL" in tokens_per_s("file:///etc", "ns").error
