"""A real OpenAI-compatible HTTP/SSE test server that emits tokens at a KNOWN rate.

It exists so the harness can be held to its numbers: ``sparkrack bench`` against this server must
measure the decode rate the server paces (±1 %), and the guard / fingerprint must catch the
garbage it produces on request.  Plain asyncio streams (HTTP/1.1, keep-alive, chunked transfer
encoding) on 127.0.0.1; no framework, so its own overhead is small and visible.

Endpoints: ``GET /v1/models``, ``GET /metrics`` (SGLang-style ``sglang:spec_accept_length``),
``GET /health``, ``POST /v1/chat/completions`` (streaming with ``stream_options.include_usage``
and ``continuous_usage_stats``; non-streaming too).

The served model names pick the behaviour (see :data:`MODES`):

* ``sparkrack-test`` — grammatical text, reasoning first when thinking is on, ends with
  ``finish_reason=stop`` after ``natural_tokens`` (or ``length`` at ``max_tokens``);
* ``sparkrack-test-repetition`` — a few sentences, then one sentence looped until ``length``;
* ``sparkrack-test-word-salad`` — content words without grammar plus self-correction markers;
* ``sparkrack-test-uniform`` — src:roce-post's eager-mode collapse: only ``!`` reasoning tokens, no
  content, ``finish_reason=length``, identical pacing for every request.

In normal mode the server is also a tiny deterministic model (:mod:`sparkrack.bench.server_text`
holds it and every mode's text): asked a sum ("What is A + B?"), to repeat a line, or to echo a
JSON object, it answers (after its reasoning tokens, when thinking is on) and stops — right, or,
with ``--wrong-answers``, plausibly wrong. The other modes answer such questions with their
garbage.

Server options model broken deployments: ``--no-usage`` (no token counts), ``--serialize`` (one
stream at a time, so n requests never overlap), ``--error-after N`` (an error event mid-stream),
``--unlisted`` (``/v1/models`` lists nothing), ``--cold-start S`` (the first request waits S
seconds longer, like a model loading on first use).

Options that model a sick deployment, for the watchdog (``sparkrack watch``): ``--stall-after N``
(the stream stops after N tokens and stays open while ``/health`` keeps answering 200 and the
generated-token counter on ``/metrics`` stops: a wedged TP group), ``--slow-after N --slow-rate R``
(after N tokens the stream goes on at R tok/s: a dying decode), ``--http-error CODE`` (every chat
request answers that status), ``--break-after N`` (the connection drops after N tokens without
ending the stream), ``--answer html|garbage|redirect`` (an HTML page, SSE events that are not
JSON, a redirect to itself).

Pacing is on an absolute schedule: the chunk whose cumulative completion-token count is ``C`` is
written at ``t_first + (C - c_first) / rate`` (``loop.time()``, monotonic).  A late wake-up does not
shift later chunks, so the decode rate a client measures between the first and the last chunk is
``rate`` exactly, up to the lateness of those two writes.  On a busy machine that lateness is
tens of milliseconds, so ``--send-log FILE`` records when each stream's first and last token
chunks were written: :func:`delivered_rates` gives the rate the server really delivered, which is
what a client's figure is compared with.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkrack.bench.server_text import solve, token_stream
from sparkrack.serving.engines import DEFAULT_ENGINE, engine
from sparkrack.serving.engines.facts import Quantity
from sparkrack.serving.scripts.engine_gate import allowed as gate_passes

BASE_MODEL = "sparkrack-test"
METRICS_OF = {
    q: metric.name for q in Quantity if (metric := engine(DEFAULT_ENGINE).metric(q)) is not None
}
"""The metric names of the engine this server stands in for (the default engine's)."""
MODES: dict[str, str] = {
    BASE_MODEL: "normal",
    f"{BASE_MODEL}-repetition": "repetition",
    f"{BASE_MODEL}-word-salad": "word-salad",
    f"{BASE_MODEL}-uniform": "uniform",
}

BAD_ANSWERS = ("html", "garbage", "redirect")
"""``--answer``: an HTML page, an event stream of non-JSON events, a redirect to itself."""

_FOREVER = 86400.0


def _prompt(request: dict[str, Any]) -> str:
    messages = request.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        content = messages[-1].get("content")
        return content if isinstance(content, str) else ""
    return ""


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    rate: float = 50.0
    """Decode tokens per second per stream (the truth the client must measure)."""
    tokens_per_chunk: int = 1
    ttft: float = 0.05
    natural_tokens: int = 1500
    """Normal mode ends with finish_reason=stop after this many tokens (if below max_tokens)."""
    reasoning_tokens: int = 32
    """Tokens sent as reasoning_content first, when thinking is on (the default)."""
    accept_len: float | None = None
    """Value of sglang:spec_accept_length on /metrics (None: metric absent)."""
    usage: bool = True
    """False: never send usage (tests the client's 'usage missing' path)."""
    api_key: str | None = field(default=None, repr=False)
    """The engine key ``/v1/*`` and every other guarded route require, as SGLang's ``--api-key``."""
    serialize: bool = False
    """Generate one stream at a time (a server without batching): peak is then not concurrent."""
    error_after: int | None = None
    """Send an ``{"error": ...}`` event after this many chunks and end the stream."""
    listed: bool = True
    """False: ``GET /v1/models`` lists nothing (servers that serve a local folder)."""
    cold_start: float = 0.0
    """Extra seconds before the first token of the first streamed request (model load)."""
    served_as: tuple[str, ...] = ()
    """More model names answered like ``sparkrack-test`` (a deployment's served model name)."""
    stall_after: int | None = None
    """Stop generating after this many tokens and hold the stream open (health stays 200)."""
    slow_after: int | None = None
    """From this many tokens on, generate at ``slow_rate`` instead of ``rate``."""
    slow_rate: float = 0.2
    http_error: int | None = None
    """Answer every chat request with this HTTP status (a JSON error body)."""
    break_after: int | None = None
    """Drop the connection after this many tokens, without ending the stream."""
    answer: str | None = None
    """A wrong kind of answer to chat requests: one of :data:`BAD_ANSWERS`."""
    wrong_answers: bool = False
    """Answer the questions :func:`solve` knows wrongly (fluent, fast, wrong)."""
    send_log: str | None = None
    """Append one JSON line per completed stream to this file (:func:`delivered_rates` reads it)."""


OPEN_PREFIXES = ("/health", "/metrics")
"""Paths SGLang's auth middleware (``srt/utils/auth.py``, ``decide_request_auth``) always lets
through, by prefix (``/health_generate`` too): the kubelet's probes and Prometheus."""


def _bearer(authorization: str | None, expected: str) -> bool:
    scheme, _, token = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), expected.encode())


def auth_refusal(
    method: str, path: str, authorization: str | None, config: ServerConfig
) -> str | None:
    """The status line the engine's API port would answer (None: let the request through): the
    gate in front of every engine refuses each path it does not pass on (SGLang's
    ``/server_info`` and admin routes, vLLM's ``/invocations`` and development routes, the
    routes each engine class records), then the engine's key check wants the engine key for all
    but health and metrics (SGLang's and vLLM's alike on the paths the gate passes)."""
    if not gate_passes(path):
        return "404 Not Found"
    if method == "OPTIONS" or path.startswith(OPEN_PREFIXES):
        return None
    if config.api_key and not _bearer(authorization, config.api_key):
        return "401 Unauthorized"
    return None


class TestServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.modes = {**MODES, **dict.fromkeys(config.served_as, MODES[BASE_MODEL])}
        self.server: asyncio.Server | None = None
        self.requests_served = 0
        self.generation_tokens = 0
        self._one_at_a_time = asyncio.Lock()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, self.config.host, self.config.port)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    # -- HTTP plumbing --------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                keep = await self._route(method, path.split("?", 1)[0], headers, body, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    @staticmethod
    def _respond(
        writer: asyncio.StreamWriter, status: str, body: bytes, ctype: str = "application/json"
    ) -> None:
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1")
            + body
        )

    async def _route(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
    ) -> bool:
        refused = auth_refusal(method, path, headers.get("authorization"), self.config)
        if refused is not None:
            self._respond(writer, refused, json.dumps({"error": refused[4:]}).encode())
            await writer.drain()
            return True
        if method == "GET" and path == "/v1/models":
            data = {
                "object": "list",
                "data": [{"id": m, "object": "model", "owned_by": "sparkrack"} for m in self.modes]
                if self.config.listed
                else [],
            }
            self._respond(writer, "200 OK", json.dumps(data).encode())
        elif method == "GET" and path == "/health":
            self._respond(writer, "200 OK", b"{}")
        elif method == "GET" and path == "/metrics":
            self._respond(writer, "200 OK", self._metrics().encode(), "text/plain; version=0.0.4")
        elif method == "POST" and path == "/v1/chat/completions":
            try:
                request = json.loads(body)
            except json.JSONDecodeError:
                self._respond(writer, "400 Bad Request", b'{"error": "body is not JSON"}')
                await writer.drain()
                return True
            model = request.get("model")
            if self.config.http_error is not None or self.config.answer is not None:
                self._misbehave(writer)
            elif model not in self.modes:
                msg = {"error": {"message": f"The model `{model}` does not exist.", "code": 404}}
                self._respond(writer, "404 Not Found", json.dumps(msg).encode())
            elif request.get("stream"):
                if self.config.serialize:
                    async with self._one_at_a_time:
                        await self._stream(request, self.modes[model], writer)
                else:
                    await self._stream(request, self.modes[model], writer)
                return True
            else:
                await self._complete(request, self.modes[model], writer)
        else:
            self._respond(writer, "404 Not Found", b'{"error": "not found"}')
        await writer.drain()
        return True

    def _misbehave(self, writer: asyncio.StreamWriter) -> None:
        """The answer of a sick or wrong server to a chat request (see ``--http-error``,
        ``--answer``)."""
        cfg = self.config
        if cfg.http_error is not None:
            msg = {"error": {"message": "the engine is unavailable (test server --http-error)"}}
            self._respond(writer, f"{cfg.http_error} Error", json.dumps(msg).encode())
        elif cfg.answer == "html":
            page = b"<!DOCTYPE html><html><body><h1>Welcome to nginx!</h1></body></html>"
            self._respond(writer, "200 OK", page, "text/html")
        elif cfg.answer == "garbage":
            events = b"data: \x00\xffnot json at all\n\ndata: {{{\n\n"
            self._respond(writer, "200 OK", events, "text/event-stream")
        elif cfg.answer == "redirect":
            writer.write(
                b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /v1/chat/completions\r\n"
                b"Content-Length: 0\r\n\r\n"
            )

    def _metrics(self) -> str:
        """The default engine's /metrics: its generated-token counter and, when speculative
        decoding is on, its acceptance-length gauge on two TP ranks."""
        tokens, accept = METRICS_OF[Quantity.GENERATED], METRICS_OF[Quantity.ACCEPT_LENGTH]
        lines = [
            f"# HELP {tokens} Number of generation tokens processed.",
            f"# TYPE {tokens} counter",
            f'{tokens}{{model_name="{BASE_MODEL}"}} {self.generation_tokens}.0',
        ]
        if self.config.accept_len is not None:
            lines += [
                f"# HELP {accept} The average acceptance length of speculative decoding.",
                f"# TYPE {accept} gauge",
            ]
            for rank in range(2):
                lines.append(
                    f'{accept}{{model_name="{BASE_MODEL}",tp_rank="{rank}"}} '
                    f"{self.config.accept_len}"
                )
        return "\n".join(lines) + "\n"

    # -- generation -----------------------------------------------------------------------------
    def _plan(self, request: dict[str, Any], mode: str) -> tuple[Iterator[str], int, int, str]:
        """(token texts, tokens to send, reasoning tokens among them, finish_reason)."""
        max_tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 256)
        kwargs = request.get("chat_template_kwargs") or {}
        thinking = bool(kwargs.get("enable_thinking", True))
        tokens = token_stream(mode, int(request.get("seed") or 0))
        answer = solve(_prompt(request), self.config.wrong_answers) if mode == "normal" else None
        natural = self.config.natural_tokens
        if answer is not None:
            words = re.findall(r"\s*\S+", " " + answer)
            head = self.config.reasoning_tokens if thinking else 0
            tokens = itertools.chain(itertools.islice(tokens, head), words)
            natural = head + len(words)
        if mode == "normal" and natural < max_tokens:
            total, finish = natural, "stop"
        else:
            total, finish = max_tokens, "length"
        if mode == "uniform":
            reasoning = total  # the collapse happens inside the thinking block
        else:
            reasoning = min(self.config.reasoning_tokens, total) if thinking else 0
        return tokens, total, reasoning, finish

    async def _complete(
        self, request: dict[str, Any], mode: str, writer: asyncio.StreamWriter
    ) -> None:
        tokens, total, reasoning, finish = self._plan(request, mode)
        text = [next(tokens) for _ in range(total)]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text[reasoning:])}
        if reasoning:
            message["reasoning_content"] = "".join(text[:reasoning])
        body: dict[str, Any] = {
            "id": "cmpl-test",
            "object": "chat.completion",
            "model": request.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if self.config.usage:
            body["usage"] = {"prompt_tokens": 16, "completion_tokens": total}
        await asyncio.sleep(self.config.ttft + total / self.config.rate)
        self.generation_tokens += total
        self._respond(writer, "200 OK", json.dumps(body).encode())

    def _after_first(self, count: int, first: int) -> float:
        """Seconds after the first chunk at which the chunk ending at token ``count`` is due."""
        cfg = self.config
        knee = cfg.slow_after
        if knee is None or count <= knee:
            return (count - first) / cfg.rate
        return max(0, knee - first) / cfg.rate + (count - max(knee, first)) / cfg.slow_rate

    async def _stream(
        self, request: dict[str, Any], mode: str, writer: asyncio.StreamWriter
    ) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        t_recv = loop.time()
        self.requests_served += 1
        tokens, total, reasoning, finish = self._plan(request, mode)
        opts = request.get("stream_options") or {}
        include_usage = cfg.usage and bool(opts.get("include_usage"))
        continuous = include_usage and bool(opts.get("continuous_usage_stats"))
        model = request.get("model")
        created = int(time.time())
        stream_id = f"chatcmpl-test-{self.requests_served}"

        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
        )

        def event(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            raw = f"data: {data}\n\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(raw), raw))

        def chunk(delta: dict[str, Any], done: int, finish_reason: str | None) -> dict[str, Any]:
            body: dict[str, Any] = {
                "id": stream_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            if continuous:
                body["usage"] = {
                    "prompt_tokens": 16,
                    "completion_tokens": done,
                    "total_tokens": 16 + done,
                }
            return body

        event(chunk({"role": "assistant", "content": ""}, 0, None))
        await writer.drain()
        cold = cfg.cold_start if self.requests_served == 1 else 0.0
        await asyncio.sleep(max(0.0, t_recv + cold + cfg.ttft - loop.time()))
        t_first = loop.time()
        done = 0
        first = 0
        first_sent: float | None = None  # when the first token chunk went to the socket
        last_sent = 0.0
        try:
            while done < total:
                n = min(cfg.tokens_per_chunk, total - done)
                if cfg.break_after is not None and done >= cfg.break_after:
                    writer.transport.abort()  # no terminating chunk: a broken stream
                    return
                if cfg.stall_after is not None and done >= cfg.stall_after:
                    await asyncio.sleep(_FOREVER)  # a wedged group: nothing more, ever
                if done == 0:
                    first = n
                else:
                    delay = t_first + self._after_first(done + n, first) - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                texts = [next(tokens) for _ in range(n)]
                r = max(0, min(n, reasoning - done))
                delta: dict[str, Any] = {}
                if r:
                    delta["reasoning_content"] = "".join(texts[:r])
                if r < n:
                    delta["content"] = "".join(texts[r:])
                done += n
                self.generation_tokens += n
                event(chunk(delta, done, None))
                last_sent = time.monotonic()
                first_sent = last_sent if first_sent is None else first_sent
                await writer.drain()
                if cfg.error_after is not None and done >= cfg.error_after * cfg.tokens_per_chunk:
                    message = f"the engine failed after {done} tokens (test server --error-after)"
                    event({"error": {"message": message, "type": "InternalServerError"}})
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return
            # Logged before [DONE] is written, so before the client can be done with the stream.
            if cfg.send_log is not None and first_sent is not None:
                record = {
                    "id": stream_id,
                    "first_chunk_tokens": first,
                    "tokens": done,
                    "first_sent": first_sent,
                    "last_sent": last_sent,
                }
                with open(cfg.send_log, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(record) + "\n")
            event(chunk({}, done, finish))
            if include_usage:
                usage: dict[str, Any] = {
                    "prompt_tokens": 16,
                    "completion_tokens": done,
                    "total_tokens": 16 + done,
                    "completion_tokens_details": {"reasoning_tokens": reasoning},
                }
                event(
                    {
                        "id": stream_id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                )
            event("[DONE]")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            return  # the client aborted (e.g. its repetition guard tripped)


async def serve(config: ServerConfig, ready_line: bool = True) -> None:
    server = TestServer(config)
    await server.start()
    if ready_line:
        print(f"sparkrack bench-server listening on http://{config.host}:{server.port}", flush=True)
    assert server.server is not None
    async with server.server:
        await server.server.serve_forever()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ServerConfig()
    parser.add_argument("--host", default=defaults.host)
    parser.add_argument("--port", type=int, default=8765, help="0 = pick a free port")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="tok/s per stream")
    parser.add_argument("--tokens-per-chunk", type=int, default=defaults.tokens_per_chunk)
    parser.add_argument("--ttft", type=float, default=defaults.ttft, help="seconds")
    parser.add_argument("--natural-tokens", type=int, default=defaults.natural_tokens)
    parser.add_argument("--reasoning-tokens", type=int, default=defaults.reasoning_tokens)
    parser.add_argument("--accept-len", type=float, default=None)
    parser.add_argument("--no-usage", action="store_true", help="never report usage")
    parser.add_argument(
        "--api-key-env", default=None, help="variable holding the engine key /v1/* requires"
    )
    parser.add_argument("--serialize", action="store_true", help="one stream at a time")
    parser.add_argument("--error-after", type=int, default=None, help="error event after N chunks")
    parser.add_argument("--unlisted", action="store_true", help="GET /v1/models lists nothing")
    parser.add_argument("--cold-start", type=float, default=0.0, help="first request's extra TTFT")
    parser.add_argument(
        "--serve-as", action="append", default=[], help="another model name (normal mode)"
    )
    parser.add_argument(
        "--stall-after", type=int, default=None, help="stop after N tokens, stream held open"
    )
    parser.add_argument("--slow-after", type=int, default=None, help="slow down after N tokens")
    parser.add_argument(
        "--slow-rate", type=float, default=defaults.slow_rate, help="tok/s after --slow-after"
    )
    parser.add_argument("--http-error", type=int, default=None, help="answer chats with CODE")
    parser.add_argument("--break-after", type=int, default=None, help="drop after N tokens")
    parser.add_argument("--answer", choices=BAD_ANSWERS, default=None, help="a wrong answer")
    parser.add_argument(
        "--wrong-answers", action="store_true", help="answer sums, copies and JSON echoes wrongly"
    )
    parser.add_argument(
        "--send-log", default=None, help="append when each stream's chunks were written (JSONL)"
    )


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("bench-server is a test fixture: it only binds to the loopback address")
    return ServerConfig(
        host=args.host,
        port=args.port,
        rate=args.rate,
        tokens_per_chunk=args.tokens_per_chunk,
        ttft=args.ttft,
        natural_tokens=args.natural_tokens,
        reasoning_tokens=args.reasoning_tokens,
        accept_len=args.accept_len,
        usage=not args.no_usage,
        api_key=os.environ.get(args.api_key_env) or None if args.api_key_env else None,
        serialize=args.serialize,
        error_after=args.error_after,
        listed=not args.unlisted,
        cold_start=args.cold_start,
        served_as=tuple(args.serve_as),
        stall_after=args.stall_after,
        slow_after=args.slow_after,
        slow_rate=args.slow_rate,
        http_error=args.http_error,
        break_after=args.break_after,
        answer=args.answer,
        wrong_answers=args.wrong_answers,
        send_log=args.send_log,
    )


def delivered_rates(send_log: str | os.PathLike[str]) -> dict[str, float]:
    """The decode rate each stream in ``send_log`` really had, by response id: its tokens after
    the first chunk over the time between writing its first and its last token chunk."""
    rates = {}
    with open(send_log, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            span = rec["last_sent"] - rec["first_sent"]
            if span > 0:
                rates[rec["id"]] = (rec["tokens"] - rec["first_chunk_tokens"]) / span
    return rates


@contextlib.contextmanager
def spawn(
    args: Sequence[str] = (), timeout: float = 15.0, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """Run the test server in a child process (its own CPU, like a real server); yield its URL.
    ``env``: variables added to the child's environment (its keys, never in its argv).

    The child is terminated (by its own pid) when the block ends.
    """
    cmd = [sys.executable, "-m", "sparkrack.bench.server", "--port", "0", *args]
    child_env = {**os.environ, **env} if env else None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=child_env)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline and not line:
            line = proc.stdout.readline()
        match = re.search(r"http://\S+", line)
        if not match:
            raise RuntimeError(f"bench-server did not start: {line!r}")
        yield match.group(0)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    # No abbreviations: ``--api-key VALUE`` must not pass as ``--api-key-env``.
    parser = argparse.ArgumentParser(prog="python -m sparkrack.bench.server", allow_abbrev=False)
    add_arguments(parser)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config_from_args(args)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
