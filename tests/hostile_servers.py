"""A scripted hostile HTTP server on 127.0.0.1 for ``sparkrack bench``: raw bytes per path.

Shared by tests/bench/test_bench_hostile.py and the hostile-inventory corpus's bench entries.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Protocol

Script = list[bytes | float]  # bytes are written as they are; a float sleeps that many seconds


class Scripts(Protocol):
    """What the server answers per path (a test's case object has these attributes)."""

    chat: Script
    models: Script
    metrics: Script | None


MODEL = "m"


def http(status: str, body: bytes, ctype: str = "application/json") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


MODELS_OK = http("200 OK", json.dumps({"data": [{"id": MODEL}]}).encode())
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def chunk(text: str | None = "tok ", finish: str | None = None, usage: object = None) -> bytes:
    body: dict[str, object] = {
        "choices": [{"index": 0, "delta": {} if text is None else {"content": text}}]
    }
    if finish:
        body["choices"][0]["finish_reason"] = finish  # type: ignore[index]
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


KEEPALIVES: Script = [b": ping\n\n", 0.2] * 15  # SSE comments, 3 s, no token


def good_chunks(n: int = 5) -> list[bytes]:
    return [chunk(f"word{i} ", usage={"completion_tokens": i + 1}) for i in range(n)]


def stream(*parts: bytes | float, end: bool = True) -> Script:
    """An SSE response: the given events, then (end=True) a finish chunk with usage and [DONE]."""
    tail: list[bytes | float] = []
    if end:
        tail = [chunk(None, "stop", {"completion_tokens": 6}), b"data: [DONE]\n\n"]
    return [SSE_HEAD, *parts, *tail]


class HostileServer:
    """Writes each path's scripted bytes on 127.0.0.1, then closes the connection (``case``:
    anything with ``chat``, ``models`` and ``metrics`` scripts)."""

    def __init__(self, case: Scripts) -> None:
        self.case = case
        self.port = 0
        self.headers: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            self.headers.append(head)
            lines = head.split("\r\n")
            path = lines[0].split(" ")[1].split("?")[0]
            length = next(
                (
                    int(v)
                    for k, _, v in (ln.partition(":") for ln in lines)
                    if k.lower() == "content-length"
                ),
                0,
            )
            if length:
                await reader.readexactly(length)
            routes = {"/v1/models": self.case.models, "/v1/chat/completions": self.case.chat}
            if self.case.metrics is not None:
                routes["/metrics"] = self.case.metrics
            for part in routes.get(path, [http("404 Not Found", b"{}")]):
                if isinstance(part, float):
                    await asyncio.sleep(part)
                else:
                    writer.write(part)
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def __enter__(self) -> HostileServer:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
