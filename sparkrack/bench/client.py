"""Streaming OpenAI-compatible client: one coroutine per request, timing with a monotonic clock.

HTTP client: aiohttp (pinned in pyproject; already in the dependency tree through ``kubernetes``).
It has an asyncio-native streaming body with a C line splitter, connection pooling without a
per-host cap, and TLS/proxy support for real endpoints; the client does one ``json.loads`` per SSE
event and nothing else per chunk besides the repetition guard, which keeps it far from being the
bottleneck (the accuracy tests measure that: see ``client_cpu_s_per_1k_tok``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from sparkrack.bench.guard import GuardConfig, RepetitionGuard
from sparkrack.bench.stats import RequestResult, percentile
from sparkrack.errors import printable

DEFAULT_STALL_S = 120.0
DEFAULT_CONNECT_S = 10.0
"""Seconds to connect and get the response headers: a streaming server sends them at once."""


class TokenCounter(Protocol):
    """Counts the tokens of a text with the model's tokenizer (used only when usage is missing)."""

    name: str

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class RequestSpec:
    """Everything that goes into each chat-completion request of a run."""

    url: str  # base URL without credentials, e.g. http://127.0.0.1:30000 (no /v1)
    model: str
    max_tokens: int = 3072
    api_key: str | None = field(default=None, repr=False)
    thinking: bool | None = None  # None: leave the chat template default alone
    temperature: float | None = None
    seed: int = 0
    timeout_s: float = 1800.0
    stall_timeout_s: float = DEFAULT_STALL_S
    connect_timeout_s: float = DEFAULT_CONNECT_S
    """A request fails when it is not connected and answered with headers within this."""
    """A request fails when neither generated text nor a growing usage count arrived for this
    long (counted from sending it, too)."""
    guard: GuardConfig = field(default_factory=GuardConfig)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    """user:password taken out of the URL; sent as HTTP Basic auth, never printed."""
    token_counter: TokenCounter | None = field(default=None, repr=False, compare=False)

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        elif self.basic_auth:
            user, password = self.basic_auth
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            headers["Authorization"] = f"Basic {token}"
        return headers

    def body(self, prompt: str, index: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.max_tokens,
            "stream": True,
            # Usage on every chunk (SGLang/vLLM: continuous_usage_stats) gives the exact token
            # count of the first chunk, hence an exact decode rate; the final usage is required.
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "seed": self.seed + index,
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.thinking is not None:
            # src:ultra-post: reasoning is toggled per request through the chat template.
            body["chat_template_kwargs"] = {"enable_thinking": self.thinking}
        return body


@dataclass
class LiveCounters:
    """Shared, lock-free progress counters (single event loop thread)."""

    tokens: int = 0
    done: int = 0
    failed: int = 0


class StreamError(Exception):
    """The server broke the protocol or reported an error: the request fails with this text."""


def clip(text: str, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters, control characters escaped (server
    messages in errors: results.json and TESTLOG.md keep them as they are printed)."""
    text = printable(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decode_event(payload: bytes) -> dict[str, Any]:
    """One SSE ``data:`` payload as a JSON object, or :class:`StreamError`."""
    try:
        obj = json.loads(payload)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        raise StreamError(
            f"malformed SSE event (not JSON): {clip(payload.decode('utf-8', 'replace'), 80)!r}"
        ) from None
    if not isinstance(obj, dict):
        raise StreamError(f"malformed SSE event: a JSON {type(obj).__name__}, not an object")
    error = obj.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else None
        raise StreamError(f"server error event: {clip(str(message or error))}")
    return obj


def token_count(usage: Any) -> int | None:
    """``usage.completion_tokens`` as a non-negative int; None when absent; StreamError if bad."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise StreamError(f"invalid usage: a JSON {type(usage).__name__}, not an object")
    value = usage.get("completion_tokens")
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StreamError(f"invalid usage.completion_tokens: {clip(repr(value), 60)}")
    return value


def choice_texts(obj: dict[str, Any]) -> tuple[str, str, str | None]:
    """(reasoning, content, finish_reason) of one chunk; StreamError on a malformed chunk."""
    choices = obj.get("choices") or []
    if not isinstance(choices, list):
        raise StreamError(f"malformed chunk: choices is a JSON {type(choices).__name__}")
    reasoning = content = ""
    finish: str | None = None
    for choice in choices:
        if not isinstance(choice, dict):
            raise StreamError("malformed chunk: a choice is not an object")
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise StreamError("malformed chunk: delta is not an object")
        parts = [delta.get("content"), delta.get("reasoning_content") or delta.get("reasoning")]
        for part in parts:
            if part is not None and not isinstance(part, str):
                raise StreamError(f"malformed chunk: text is a JSON {type(part).__name__}")
        content += parts[0] or ""
        reasoning += parts[1] or ""
        if choice.get("finish_reason"):
            finish = str(choice["finish_reason"])
    return reasoning, content, finish


async def run_request(
    session: aiohttp.ClientSession,
    spec: RequestSpec,
    index: int,
    prompt_id: str,
    prompt: str,
    counters: LiveCounters | None = None,
    t_origin: float | None = None,
) -> RequestResult:
    """Send one streaming request and measure it; never raises for request-level failures.

    ``t_origin`` (``time.perf_counter`` seconds, default: the moment of sending) is the zero of
    the result's ``stream_start_s`` / ``stream_end_s``.
    """
    result = RequestResult(index=index, prompt_id=prompt_id)
    guard = RepetitionGuard(spec.guard)
    if not spec.guard.enabled:
        result.guard = "off"
    counters = counters or LiveCounters()
    pieces: list[str] = []
    gaps: list[float] = []  # per-token inter-token latency samples, seconds
    usage_final: int | None = None
    usage_raw: dict[str, Any] | None = None
    per_chunk_usage = True
    prev_ctok = 0
    reasoning_tok = content_tok = 0  # from per-chunk usage deltas
    t_first = t_last = 0.0
    t_prev = 0.0
    stall = spec.stall_timeout_s
    timeout = aiohttp.ClientTimeout(total=spec.timeout_s, sock_read=min(spec.timeout_s, stall))
    t_send = time.perf_counter()
    t_progress = t_send
    event_name = ""
    connected = False
    try:
        request = session.post(
            spec.url + "/v1/chat/completions",
            json=spec.body(prompt, index),
            headers=spec.headers(),
            timeout=timeout,
        )
        # Connect and response headers: a server that accepts and never answers fails here,
        # long before the stall deadline (which is sized for a slow prefill).
        async with asyncio.timeout(spec.connect_timeout_s):
            resp = await request.__aenter__()
        connected = True
        try:
            if resp.status != 200:
                text = clip(await resp.text(errors="replace"))
                raise StreamError(f"HTTP {resp.status}: {text}")
            while True:
                # Our own deadline per line: aiohttp's sock_read timer is dropped when a broken
                # response closes the connection under a pending read, which then never returns.
                async with asyncio.timeout(stall):
                    raw = await resp.content.readline()
                if not raw:
                    break
                now = time.perf_counter()  # arrival time, before any parsing
                if now - t_progress > stall:
                    raise StreamError(_stalled(stall, result.text_chunks))
                line = raw.rstrip(b"\r\n")
                if not line.startswith(b"data:"):
                    if line.startswith(b"event:"):
                        event_name = line[6:].strip().decode("utf-8", "replace")
                    elif not line:
                        event_name = ""  # a blank line ends the event
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                if event_name == "error":
                    raise StreamError(
                        f"server error event: {clip(payload.decode('utf-8', 'replace'))}"
                    )
                obj = decode_event(payload)
                if result.response_id is None and isinstance(obj.get("id"), str):
                    result.response_id = clip(obj["id"], 80)  # a hostile server's id is cut
                ctok = token_count(obj.get("usage"))
                if ctok is not None:
                    if usage_final is None or ctok > usage_final:
                        t_progress = now  # tokens generated, even if not shown (hidden reasoning)
                    usage_final, usage_raw = ctok, obj["usage"]
                reasoning, content, finish = choice_texts(obj)
                if finish:
                    result.finish_reason = finish
                if not (content or reasoning):
                    continue
                if ctok is None:
                    per_chunk_usage = False
                    n_tok = 1
                else:
                    n_tok = max(ctok - prev_ctok, 0)
                    prev_ctok = max(ctok, prev_ctok)
                if result.text_chunks == 0:
                    t_first = now
                    result.first_chunk_tokens = ctok
                    if spec.token_counter is not None and ctok is None:
                        result.first_chunk_tokens = spec.token_counter.count(reasoning + content)
                elif n_tok:
                    gap = (now - t_prev) / n_tok
                    gaps.extend([gap] * min(n_tok, 64))
                t_prev = t_last = t_progress = now
                result.text_chunks += 1
                counters.tokens += n_tok
                if reasoning:
                    result.reasoning_chars += len(reasoning)
                if content:
                    result.content_chars += len(content)
                if ctok is not None:
                    share = len(reasoning) / (len(reasoning) + len(content))
                    r_tok = round(n_tok * share)
                    reasoning_tok += r_tok
                    content_tok += n_tok - r_tok
                text = reasoning + content
                pieces.append(text)
                verdict = guard.feed(text)
                if verdict is not None:
                    break  # releasing the response below closes (aborts) the stream
        finally:
            await request.__aexit__(None, None, None)
    except StreamError as exc:
        result.status, result.error = "failed", str(exc)
    except (TimeoutError, aiohttp.ServerTimeoutError):
        waited = time.perf_counter() - t_progress
        if not connected:
            result.status, result.error = "failed", no_answer(spec.connect_timeout_s)
        elif waited >= stall * 0.99:
            result.status, result.error = "failed", _stalled(stall, result.text_chunks)
        else:
            result.status, result.error = "failed", f"request timed out after {spec.timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001 - any transport or decoding failure fails ONE request
        result.status, result.error = "failed", clip(f"{type(exc).__name__}: {exc}")
    verdict = guard.verdict or guard.finish()
    if verdict is not None:
        result.status, result.guard = "failed", "tripped"
        result.guard_reason = str(verdict)
        result.error = result.error or f"repetition guard: {verdict}"
    result.text = "".join(pieces)
    result.tail = result.text[-200:]
    origin = t_send if t_origin is None else t_origin
    if result.text_chunks:
        result.stream_start_s = t_first - origin
        result.stream_end_s = t_last - origin
    _finish_stats(
        result,
        usage_final,
        usage_raw,
        spec.token_counter,
        per_chunk_usage,
        (reasoning_tok, content_tok),
        (t_send, t_first, t_last),
        gaps,
    )
    if result.status == "ok" and result.text_chunks == 0:
        result.status, result.error = "failed", "stream ended without any generated text"
    if result.status == "ok" and result.finish_reason is None:
        result.status = "failed"
        result.error = (
            f"stream ended without a finish reason after {result.text_chunks} text chunks "
            "(connection closed or the server stopped mid-answer)"
        )
    counters.done += 1
    if result.status != "ok":
        counters.failed += 1
    return result


def no_answer(seconds: float) -> str:
    return (
        f"no answer: connected and response headers not within {seconds:g} s "
        "(raise --connect-timeout for a slow network)"
    )


def _stalled(stall: float, chunks: int) -> str:
    return (
        f"stalled: no generated text for {stall:g} s (after {chunks} text chunks; "
        "raise --stall-timeout for a slow prefill)"
    )


def _finish_stats(
    result: RequestResult,
    total: int | None,
    usage: dict[str, Any] | None,
    counter: TokenCounter | None,
    per_chunk_usage: bool,
    split: tuple[int, int],
    times: tuple[float, float, float],
    gaps: list[float],
) -> None:
    t_send, t_first, t_last = times
    reasoning_tok, content_tok = split
    if result.text_chunks:
        result.ttft_s = t_first - t_send
    if gaps:
        result.itl_ms_p50 = _ms(percentile(gaps, 50))
        result.itl_ms_p90 = _ms(percentile(gaps, 90))
        result.itl_ms_p99 = _ms(percentile(gaps, 99))
    if total is None or usage is None:
        if counter is None:
            result.output_tokens_source = "missing"
            result.notes.append(
                "server sent no usage: output tokens unknown, tok/s not computed "
                "(never estimated from characters)"
            )
            return
        total = counter.count(result.text)
        result.output_tokens_source = f"tokenizer:{counter.name}"
        result.notes.append(f"server sent no usage: output tokens counted by {counter.name}")
        per_chunk_usage = False
    else:
        result.output_tokens_source = "usage"
    result.output_tokens = total
    details = (usage or {}).get("completion_tokens_details") or {}
    reasoning_detail = details.get("reasoning_tokens") if isinstance(details, dict) else None
    top_level = (usage or {}).get("reasoning_tokens")
    if isinstance(reasoning_detail, int) and 0 <= reasoning_detail <= total:
        result.reasoning_tokens = reasoning_detail
        result.content_tokens = total - reasoning_detail
        result.token_split_source = "usage-details"
    elif per_chunk_usage:
        result.reasoning_tokens, result.content_tokens = reasoning_tok, content_tok
        result.token_split_source = "per-chunk-usage"
    elif isinstance(top_level, int) and 0 < top_level <= total:
        # SGLang's UsageInfo carries it at the top level.
        result.reasoning_tokens = top_level
        result.content_tokens = total - top_level
        result.token_split_source = "usage-details"
    if result.first_chunk_tokens is None or (
        not per_chunk_usage and result.output_tokens_source == "usage"
    ):
        result.first_chunk_tokens, result.first_chunk_tokens_source = 1, "assumed-1"
        result.notes.append(
            "no per-chunk usage: the first chunk is assumed to hold 1 token for the decode rate"
        )
    elif result.output_tokens_source != "usage":
        result.first_chunk_tokens_source = result.output_tokens_source
    decoded = total - result.first_chunk_tokens
    span = t_last - t_first
    if decoded > 0 and span > 0:
        result.decode_tok_s = decoded / span
    if t_last > t_send and total:
        result.e2e_tok_s = total / (t_last - t_send)


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0
