"""Streaming OpenAI-compatible client: one coroutine per request, timing with a monotonic clock.

HTTP client: aiohttp (pinned in pyproject; already in the dependency tree through ``kubernetes``).
It has an asyncio-native streaming body with a C line splitter, connection pooling without a
per-host cap, and TLS/proxy support for real endpoints; the client does one ``json.loads`` per SSE
event and nothing else per chunk besides the repetition guard, which keeps it far from being the
bottleneck (the accuracy tests measure that: see ``client_cpu_s_per_1k_tok``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sparkrack.bench.guard import GuardConfig, RepetitionGuard
from sparkrack.bench.stats import RequestResult, percentile


@dataclass(frozen=True)
class RequestSpec:
    """Everything that goes into each chat-completion request of a run."""

    url: str  # base URL, e.g. http://127.0.0.1:30000 (no /v1)
    model: str
    max_tokens: int = 3072
    api_key: str | None = None
    thinking: bool | None = None  # None: leave the chat template default alone
    temperature: float | None = None
    seed: int = 0
    timeout_s: float = 1800.0
    guard: GuardConfig = field(default_factory=GuardConfig)

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
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
            # Seed 002: reasoning is toggled per request through the chat template.
            body["chat_template_kwargs"] = {"enable_thinking": self.thinking}
        return body


@dataclass
class LiveCounters:
    """Shared, lock-free progress counters (single event loop thread)."""

    tokens: int = 0
    done: int = 0
    failed: int = 0


TokenCallback = Callable[[int], None]


async def run_request(
    session: aiohttp.ClientSession,
    spec: RequestSpec,
    index: int,
    prompt_id: str,
    prompt: str,
    counters: LiveCounters | None = None,
) -> RequestResult:
    """Send one streaming request and measure it; never raises for request-level failures."""
    result = RequestResult(index=index, prompt_id=prompt_id)
    guard = RepetitionGuard(spec.guard)
    if not spec.guard.enabled:
        result.guard = "off"
    counters = counters or LiveCounters()
    pieces: list[str] = []
    gaps: list[float] = []  # per-token inter-token latency samples, seconds
    usage_final: dict[str, Any] | None = None
    per_chunk_usage = True
    prev_ctok = 0
    reasoning_tok = content_tok = 0  # from per-chunk usage deltas
    reasoning_chunks = content_chunks = 0
    t_first = t_last = 0.0
    t_prev = 0.0
    timeout = aiohttp.ClientTimeout(total=spec.timeout_s, sock_read=min(spec.timeout_s, 600.0))
    t_send = time.perf_counter()
    try:
        async with session.post(
            spec.url + "/v1/chat/completions",
            json=spec.body(prompt, index),
            headers=spec.headers(),
            timeout=timeout,
        ) as resp:
            if resp.status != 200:
                text = (await resp.text())[:300]
                result.status, result.error = "failed", f"HTTP {resp.status}: {text}"
                return result
            async for raw in resp.content:
                now = time.perf_counter()  # arrival time, before any parsing
                if not raw.startswith(b"data:"):
                    continue
                payload = raw[5:].strip()
                if payload == b"[DONE]":
                    break
                obj = json.loads(payload)
                usage = obj.get("usage")
                ctok: int | None = None
                if usage and usage.get("completion_tokens") is not None:
                    usage_final = usage
                    ctok = int(usage["completion_tokens"])
                reasoning = content = ""
                for choice in obj.get("choices") or ():
                    delta = choice.get("delta") or {}
                    content += delta.get("content") or ""
                    reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
                if not (content or reasoning):
                    continue
                if ctok is None:
                    per_chunk_usage = False
                    n_tok = 1
                else:
                    n_tok = max(ctok - prev_ctok, 0)
                    prev_ctok = ctok
                if result.text_chunks == 0:
                    t_first = now
                    result.first_chunk_tokens = ctok
                elif n_tok:
                    gap = (now - t_prev) / n_tok
                    gaps.extend([gap] * min(n_tok, 64))
                t_prev = t_last = now
                result.text_chunks += 1
                counters.tokens += n_tok
                if reasoning:
                    reasoning_chunks += 1
                    result.reasoning_chars += len(reasoning)
                if content:
                    content_chunks += 1
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
                    break  # leaving the context manager closes (aborts) the stream
    except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError, OSError) as exc:
        result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
    verdict = guard.verdict or guard.finish()
    if verdict is not None:
        result.status, result.guard = "failed", "tripped"
        result.guard_reason = str(verdict)
        result.error = result.error or f"repetition guard: {verdict}"
    result.text = "".join(pieces)
    result.tail = result.text[-200:]
    _finish_stats(
        result,
        usage_final,
        per_chunk_usage,
        (reasoning_tok, content_tok, reasoning_chunks, content_chunks),
        (t_send, t_first, t_last),
        gaps,
    )
    if result.status == "ok" and result.text_chunks == 0:
        result.status, result.error = "failed", "stream ended without any generated text"
    counters.done += 1
    if result.status != "ok":
        counters.failed += 1
    return result


def _finish_stats(
    result: RequestResult,
    usage: dict[str, Any] | None,
    per_chunk_usage: bool,
    split: tuple[int, int, int, int],
    times: tuple[float, float, float],
    gaps: list[float],
) -> None:
    t_send, t_first, t_last = times
    reasoning_tok, content_tok, reasoning_chunks, content_chunks = split
    if result.text_chunks:
        result.ttft_s = t_first - t_send
    if gaps:
        result.itl_ms_p50 = _ms(percentile(gaps, 50))
        result.itl_ms_p90 = _ms(percentile(gaps, 90))
        result.itl_ms_p99 = _ms(percentile(gaps, 99))
    if usage is None:
        result.output_tokens_source = "missing"
        result.notes.append(
            "server sent no usage: output tokens unknown, tok/s not computed "
            "(never estimated from characters)"
        )
        result.reasoning_tokens, result.content_tokens = reasoning_chunks, content_chunks
        result.token_split_source = "chunk-count"
        return
    total = int(usage["completion_tokens"])
    result.output_tokens, result.output_tokens_source = total, "usage"
    details = usage.get("completion_tokens_details") or {}
    if details.get("reasoning_tokens") is not None:
        result.reasoning_tokens = int(details["reasoning_tokens"])
        result.content_tokens = total - result.reasoning_tokens
        result.token_split_source = "usage-details"
    elif per_chunk_usage:
        result.reasoning_tokens, result.content_tokens = reasoning_tok, content_tok
        result.token_split_source = "per-chunk-usage"
    elif usage.get("reasoning_tokens"):  # SGLang's UsageInfo carries it at the top level
        result.reasoning_tokens = int(usage["reasoning_tokens"])
        result.content_tokens = total - result.reasoning_tokens
        result.token_split_source = "usage-details"
    else:
        result.reasoning_tokens, result.content_tokens = reasoning_chunks, content_chunks
        result.token_split_source = "chunk-count"
    if result.first_chunk_tokens is None or not per_chunk_usage:
        result.first_chunk_tokens, result.first_chunk_tokens_source = 1, "assumed-1"
        result.notes.append(
            "no per-chunk usage: the first chunk is assumed to hold 1 token for the decode rate"
        )
    decoded = total - result.first_chunk_tokens
    span = t_last - t_first
    if decoded > 0 and span > 0:
        result.decode_tok_s = decoded / span
    if t_last > t_send:
        result.e2e_tok_s = total / (t_last - t_send)


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0
