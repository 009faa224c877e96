"""The engine's gate: the one door to an engine's HTTP server, with an allow-list of paths.

    python3 -I engine_gate.py --host-env POD_IP --port PORT --upstream 127.0.0.1:PORT \
        [--also /prometheus/metrics]

It listens on the address in the variable ``--host-env`` names (the pod's cluster address, from
the downward API: no word of its command is for Kubernetes to expand).

The engine listens on loopback only; the gate listens on the pod's cluster address and passes
on the requests whose path the gateway, the watchdog, the ranks' group guard, the kubelet and
Prometheus use (:data:`EXACT`, :data:`PREFIXES`, and each ``--also`` path: an engine's own
Prometheus path): the OpenAI API, health and metrics. Every other path (SGLang's
``/server_info``, which answers its whole ``server_args`` with both keys, its admin routes,
``/load_lora_adapter_from_tensors``; vLLM's open ``/scale_elastic_ep`` and development routes;
TensorRT-LLM's ``/update_weights``, to which it asks no key at all), and the runtime adapter
routes under ``/v1`` (:data:`REFUSED`), is answered 404 here and never reaches the engine.
The engine's own auth still checks the key of every request the gate passes on: the gate holds
no key.

One request per connection, so no second request can ride behind an allowed one: the request is
passed on with ``Connection: close`` and its ``Content-Length`` body (a chunked body is refused),
the answer streams back until the engine closes, and the connection ends. A path is judged as
the engine's router would see it: one with a percent escape, a backslash, an empty or dot
segment is refused rather than decoded twice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence

EXACT = frozenset({"/health", "/health_generate", "/metrics"})
"""Paths passed on as they are: the kubelet's probes, the watchdog, Prometheus."""
PREFIXES = ("/v1/",)
"""Path prefixes passed on: the OpenAI API (the gateway, the watchdog, the smoke client)."""
REFUSED = frozenset({"/v1/load_lora_adapter", "/v1/unload_lora_adapter"})
"""Paths under a prefix that are not the OpenAI API: vLLM's runtime adapter loading (mounted
with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``) loads weights from a path the request names."""
HEAD_LIMIT = 64 * 1024
"""Largest request line + headers read."""
BODY_LIMIT = 64 * 1024 * 1024
"""Largest request body passed on."""
HEAD_TIMEOUT_S = 30.0
"""A client has this long to send its request line and headers."""
DROPPED = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"expect", b"upgrade"})
"""Hop-by-hop headers the gate sets itself (``Connection: close``) or does not pass on."""


def allowed(target: str, also: frozenset[str] = frozenset()) -> bool:
    """The request target's path is one the gate passes on (``also``: exact paths past
    :data:`EXACT`)."""
    path = target.split("?", 1)[0]
    if not path.startswith("/") or "%" in path or "\\" in path:
        return False
    segments = path.split("/")[1:]
    if any(s in ("", ".", "..") for s in segments[:-1]) or segments[-1] in (".", ".."):
        return False
    if path in EXACT or path in also:
        return True
    if path.rstrip("/") in REFUSED:
        return False
    return any(path.startswith(p) and len(path) > len(p) for p in PREFIXES)


def _answer(writer: asyncio.StreamWriter, status: str, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


class RequestError(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_head(
    head: bytes, also: frozenset[str] = frozenset()
) -> tuple[bytes, str, list[bytes], int]:
    """(request line, target, headers to pass on, body length) of a request head."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise RequestError("400 Bad Request", "not an HTTP/1.x request line")
    target = parts[1].decode("ascii", "replace")
    if not allowed(target, also):
        raise RequestError("404 Not Found", "not served through the engine's gate")
    headers: list[bytes] = []
    lengths: set[int] = set()
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip() or b"\n" in line or b"\r" in line:
            raise RequestError("400 Bad Request", "malformed header")
        low = name.lower()
        if low == b"transfer-encoding":
            raise RequestError("411 Length Required", "send the body with Content-Length")
        if low == b"content-length":
            if not value.strip().isdigit():
                raise RequestError("400 Bad Request", "bad Content-Length")
            lengths.add(int(value.strip()))
        if low not in DROPPED:
            headers.append(line)
    if len(lengths) > 1:
        raise RequestError("400 Bad Request", "conflicting Content-Length headers")
    length = lengths.pop() if lengths else 0
    if length > BODY_LIMIT:
        raise RequestError("413 Content Too Large", f"body over {BODY_LIMIT} bytes")
    return lines[0], target, headers, length


class Gate:
    def __init__(
        self, upstream_host: str, upstream_port: int, also: frozenset[str] = frozenset()
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.also = also

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            line, target, headers, length = parse_head(head, self.also)
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
            return
        except RequestError as refused:
            words = head.split(b"\r\n", 1)[0].split(b" ")
            path = words[1].split(b"?", 1)[0][:200] if len(words) > 1 else b"-"
            print(
                f"[engine-gate] {refused.status[:3]} {path.decode('ascii', 'replace')}",
                file=sys.stderr,
                flush=True,
            )
            _answer(writer, refused.status, str(refused))
            await writer.drain()
            return
        body = await reader.readexactly(length)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _answer(writer, "502 Bad Gateway", "the engine does not answer yet")
            await writer.drain()
            return
        try:
            up_writer.write(b"\r\n".join([line, *headers, b"Connection: close"]) + b"\r\n\r\n")
            up_writer.write(body)
            await up_writer.drain()
            answer = asyncio.ensure_future(self._copy(up_reader, writer))
            gone = asyncio.ensure_future(self._drain_client(reader))
            done, pending = await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in done:
                task.result()
        finally:
            up_writer.close()

    @staticmethod
    async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()

    @staticmethod
    async def _drain_client(reader: asyncio.StreamReader) -> None:
        """Returns when the client hung up; whatever else it sends is not passed on."""
        while await reader.read(65536):
            pass


def address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def exact_path(text: str) -> str:
    """An ``--also`` path: one plain absolute path, judged as :func:`allowed` judges a request."""
    if not allowed(text, frozenset({text})) or "?" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a plain absolute path")
    return text


async def serve(
    listen: tuple[str, int], upstream: tuple[str, int], also: frozenset[str] = frozenset()
) -> None:
    gate = Gate(*upstream, also)
    server = await asyncio.start_server(gate.handle, *listen, limit=HEAD_LIMIT)
    print(
        f"[engine-gate] {listen[0]}:{listen[1]} -> {upstream[0]}:{upstream[1]}, passing on"
        f" {', '.join(sorted(EXACT | also))} and {', '.join(p + '*' for p in PREFIXES)}",
        flush=True,
    )
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engine_gate.py")
    parser.add_argument("--host-env", required=True, metavar="VAR", help="variable of the address")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", type=address, required=True, metavar="HOST:PORT")
    parser.add_argument("--also", type=exact_path, action="append", default=[], metavar="PATH")
    args = parser.parse_args(argv)
    host = os.environ.get(args.host_env, "")
    if not host:
        print(
            f"[engine-gate] FATAL: {args.host_env} is empty: no address to listen on",
            file=sys.stderr,
        )
        return 2
    try:
        asyncio.run(serve((host, args.port), args.upstream, frozenset(args.also)))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
