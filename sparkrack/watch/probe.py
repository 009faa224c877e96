"""One probe of a serving endpoint, the way a user meets it: a short streamed chat completion.

The stream decides the verdict (:class:`Verdict`); ``/health`` and the engine's generated-token
counter on ``/metrics`` are read beside it as evidence, because a wedged tensor-parallel group
keeps answering ``/health`` while no token comes out.

* **healthy** — the first token came within ``stall_s`` of sending, no gap between tokens
  exceeded ``stall_s`` and the stream ended properly. A slow but progressing stream is healthy.
* **slow** — healthy, but the decode rate was below ``min_rate`` (only when one is asked for).
* **stalled** — no token for ``stall_s`` seconds (before the first, or after the last one).
* **erroring** — the server answered, but wrongly: an HTTP error, an error event, a broken
  stream, something that is not an event stream of JSON chunks, a redirect.
* **config-error** — the server refused the probe's key (HTTP 401 or 403): the watchdog's
  configuration, not the deployment, is wrong. Never a reason to restart or unroute.
* **down** — nothing answers at that address (refused, no route, no such host).
* **wrong-answers** — with the answer canary as the probe (``ProbeConfig.canary``): the stream
  was healthy but its answer to the canary question is wrong (:mod:`sparkrack.bench.canary`).

Time bound: a probe returns within :meth:`ProbeConfig.deadline_s` seconds, and a stall is
reported at most ``stall_s`` (plus the event loop's lateness) after the last token.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from sparkrack.bench import canary as answer_canary
from sparkrack.bench.client import StreamError, choice_texts, clip, decode_event, token_count
from sparkrack.bench.mtp import generated_tokens

PROMPT = "Count from one to twenty in words, separated by spaces."
"""The probe's question: any working model answers it with many tokens and little thought."""


class Verdict(enum.StrEnum):
    HEALTHY = "healthy"
    SLOW = "slow"
    STALLED = "stalled"
    ERRORING = "erroring"
    CONFIG = "config-error"
    DOWN = "down"
    WRONG = "wrong-answers"


@dataclass(frozen=True)
class ProbeConfig:
    url: str
    """Base URL of the OpenAI-compatible server, without ``/v1``."""
    model: str | None = None
    """Model to ask; None: the first one ``GET /v1/models`` lists."""
    api_key: str | None = field(default=None, repr=False)
    stall_s: float = 10.0
    max_tokens: int = 8
    min_rate: float = 0.0
    """Decode tokens/s below which a progressing stream is ``slow`` (0: never)."""
    connect_s: float = 5.0
    """Connecting, ``/health``, ``/metrics`` and ``/v1/models`` each get at most this long."""
    canary: int | None = None
    """Ask canary question number ``canary`` (taken in turn) instead of :data:`PROMPT` and judge
    the answer; None: any tokens will do."""

    def deadline_s(self) -> float:
        """Upper bound of one probe: the side requests, then the first token and every further
        one each within ``stall_s``, plus one second of slack."""
        return 3 * self.connect_s + self.stall_s * (self.max_tokens + 1) + 1.0

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


@dataclass
class ProbeResult:
    verdict: Verdict
    detail: str
    """One line of why, in the words of the verdict."""
    url: str
    model: str | None = None
    started: float = 0.0
    """Wall-clock time (Unix seconds) the probe started."""
    elapsed_s: float = 0.0
    tokens: int = 0
    ttft_s: float | None = None
    max_gap_s: float | None = None
    since_last_token_s: float | None = None
    """For a stall: seconds from the last token (or from sending) to the verdict."""
    rate: float | None = None
    """Decode tokens/s between the first and the last token."""
    health_status: int | None = None
    health_error: str | None = None
    engine_tokens: float | None = None
    """How far the engine's generated-token counter moved during the probe (None: no metrics)."""

    def line(self) -> str:
        """The one-line verdict ``watch --once`` prints."""
        health = (
            f"/health {self.health_status}"
            if self.health_status is not None
            else f"/health {self.health_error or 'not read'}"
        )
        extra = (
            f"; engine counter +{self.engine_tokens:g}" if self.engine_tokens is not None else ""
        )
        return f"{self.verdict}: {self.detail} ({health}{extra}; {self.elapsed_s:.1f} s) {self.url}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = str(self.verdict)
        return data


AUTH_STATUSES = (401, 403)
"""What an engine's auth middleware answers a missing or wrong key with."""


def _http_error(what: str, status: int, text: str) -> _Verdict:
    """An HTTP error's verdict: a refused key is a configuration error, anything else erroring."""
    if status in AUTH_STATUSES:
        return _Verdict(
            Verdict.CONFIG,
            f"{what}HTTP {status}: the server refused the probe's key (give the deployment's "
            "engine key through --api-key-env)",
        )
    return _Verdict(Verdict.ERRORING, f"{what}HTTP {status}: {clip(text, 160)}")


class _Verdict(Exception):
    def __init__(self, verdict: Verdict, detail: str) -> None:
        super().__init__(detail)
        self.verdict = verdict
        self.detail = detail


def _down_or_erroring(exc: BaseException) -> _Verdict:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _Verdict(Verdict.DOWN, f"unreachable: {clip(str(exc.os_error or exc), 160)}")
    if isinstance(exc, aiohttp.InvalidURL):
        return _Verdict(Verdict.DOWN, f"not a URL: {clip(str(exc), 160)}")
    return _Verdict(
        Verdict.ERRORING, f"{type(exc).__name__}: {clip(str(exc) or 'no message', 160)}"
    )


async def _get(session: aiohttp.ClientSession, url: str, cfg: ProbeConfig) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=cfg.connect_s)
    async with session.get(
        url, headers=cfg.headers(), timeout=timeout, allow_redirects=False
    ) as resp:
        return resp.status, await resp.text(errors="replace")


async def _health(session: aiohttp.ClientSession, cfg: ProbeConfig, result: ProbeResult) -> None:
    try:
        result.health_status, _ = await _get(session, cfg.url + "/health", cfg)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        result.health_error = clip(str(exc) or type(exc).__name__, 80)


async def _counter(session: aiohttp.ClientSession, cfg: ProbeConfig) -> float | None:
    try:
        status, text = await _get(session, cfg.url + "/metrics", cfg)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    return generated_tokens(text) if status == 200 else None


async def _model(session: aiohttp.ClientSession, cfg: ProbeConfig) -> str:
    if cfg.model:
        return cfg.model
    try:
        status, text = await _get(session, cfg.url + "/v1/models", cfg)
    except TimeoutError:
        raise _Verdict(
            Verdict.STALLED, f"GET /v1/models: no answer in {cfg.connect_s:g} s"
        ) from None
    except (aiohttp.ClientError, ValueError) as exc:
        raise _down_or_erroring(exc) from None
    if status != 200:
        raise _http_error("GET /v1/models: ", status, text)
    try:
        obj = decode_event(text.encode())
        models = [m["id"] for m in obj.get("data") or [] if isinstance(m, dict) and "id" in m]
    except (StreamError, TypeError, KeyError):
        raise _Verdict(Verdict.ERRORING, "GET /v1/models: not a model list") from None
    if not models:
        raise _Verdict(Verdict.ERRORING, "GET /v1/models lists no model: pass --model")
    return str(models[0])


class _Stream:
    """Reads the probe's stream and keeps its timings."""

    def __init__(self, cfg: ProbeConfig, result: ProbeResult) -> None:
        self.cfg, self.result = cfg, result
        self.t_send = time.monotonic()
        self.t_first: float | None = None
        self.t_last = self.t_send
        self.first_tokens = 0
        self.ended = False
        self.content: list[str] = []
        self.reasoning: list[str] = []

    def _stalled(self) -> _Verdict:
        r = self.result
        r.since_last_token_s = time.monotonic() - self.t_last
        where = "before the first token" if r.tokens == 0 else f"after {r.tokens} tokens"
        return _Verdict(
            Verdict.STALLED,
            f"stalled {where} and {self.t_last - self.t_send:.1f} s; "
            f"nothing for {r.since_last_token_s:.1f} s (limit {self.cfg.stall_s:g} s)",
        )

    def _token(self, count: int | None) -> None:
        now, r = time.monotonic(), self.result
        new = r.tokens + 1 if count is None else count
        if new <= r.tokens:
            return
        r.tokens = new
        if self.t_first is None:
            self.t_first, self.first_tokens = now, r.tokens
            r.ttft_s = now - self.t_send
        else:
            gap = now - self.t_last
            r.max_gap_s = gap if r.max_gap_s is None else max(r.max_gap_s, gap)
        self.t_last = now

    async def read(self, session: aiohttp.ClientSession, model: str) -> None:
        cfg = self.cfg
        prompt = PROMPT if cfg.canary is None else answer_canary.question(cfg.canary).prompt
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": cfg.max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if cfg.canary is not None:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(cfg.stall_s):
                resp = await session.post(
                    cfg.url + "/v1/chat/completions",
                    json=body,
                    headers=cfg.headers(),
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=cfg.connect_s),
                )
        except TimeoutError:
            raise self._stalled() from None
        except (aiohttp.ClientError, ValueError) as exc:
            raise _down_or_erroring(exc) from None
        async with resp:
            if 300 <= resp.status < 400:
                where = resp.headers.get("Location", "?")
                raise _Verdict(
                    Verdict.ERRORING,
                    f"HTTP {resp.status} redirect to {clip(where, 80)}: give the server's own URL",
                )
            if resp.status != 200:
                text = ""
                try:
                    async with asyncio.timeout(cfg.connect_s):
                        text = await resp.text(errors="replace")
                except (TimeoutError, aiohttp.ClientError):
                    pass
                raise _http_error("", resp.status, text)
            ctype = resp.headers.get("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                raise _Verdict(
                    Verdict.ERRORING,
                    f"answered {clip(ctype, 40) or 'no Content-Type'}, not an event stream",
                )
            while True:
                try:
                    async with asyncio.timeout_at(self._deadline(loop)):
                        raw = await resp.content.readline()
                except TimeoutError:
                    raise self._stalled() from None
                except aiohttp.ClientError as exc:
                    raise _Verdict(
                        Verdict.ERRORING,
                        f"stream broken after {self.result.tokens} tokens: "
                        f"{clip(str(exc) or type(exc).__name__, 100)}",
                    ) from None
                if not raw:
                    break
                if self._event(raw.rstrip(b"\r\n")):
                    return
        if not self.ended:
            raise _Verdict(
                Verdict.ERRORING,
                f"stream ended after {self.result.tokens} tokens without finishing",
            )

    def _deadline(self, loop: asyncio.AbstractEventLoop) -> float:
        return loop.time() + (self.t_last + self.cfg.stall_s - time.monotonic())

    def _event(self, line: bytes) -> bool:
        """Handle one SSE line; True when the stream is complete."""
        if not line.startswith(b"data:"):
            return False
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.ended = True
            return True
        try:
            obj = decode_event(payload)
            count = token_count(obj.get("usage"))
            reasoning, content, finish = choice_texts(obj)
        except StreamError as exc:
            raise _Verdict(Verdict.ERRORING, f"after {self.result.tokens} tokens: {exc}") from None
        if reasoning or content or (count is not None and count > self.result.tokens):
            self._token(count)
        self.content.append(content)
        self.reasoning.append(reasoning)
        if finish:
            self.ended = True
        return False

    def finish(self) -> None:
        r = self.result
        if self.t_first is not None and r.tokens > self.first_tokens and self.t_last > self.t_first:
            r.rate = (r.tokens - self.first_tokens) / (self.t_last - self.t_first)


async def probe(cfg: ProbeConfig) -> ProbeResult:
    """One probe; never raises for anything the server does."""
    result = ProbeResult(Verdict.HEALTHY, "", cfg.url.rstrip("/"), cfg.model, time.time())
    cfg = ProbeConfig(**{**asdict(cfg), "url": result.url})
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as session:
        health = asyncio.create_task(_health(session, cfg, result))
        before = await _counter(session, cfg)
        stream = _Stream(cfg, result)
        try:
            result.model = await _model(session, cfg)
            stream.t_send = stream.t_last = time.monotonic()
            await stream.read(session, result.model)
            stream.finish()
            result.detail = _healthy_detail(result)
            if cfg.min_rate and result.rate is not None and result.rate < cfg.min_rate:
                result.verdict = Verdict.SLOW
                result.detail = (
                    f"{result.rate:.2f} tok/s, below the floor of {cfg.min_rate:g} tok/s "
                    f"({result.tokens} tokens)"
                )
            if cfg.canary is not None:
                _judge(cfg.canary, stream, result)
        except _Verdict as v:
            stream.finish()
            result.verdict, result.detail = v.verdict, v.detail
        await health
        after = await _counter(session, cfg) if before is not None else None
        if before is not None and after is not None:
            result.engine_tokens = after - before
    result.elapsed_s = time.monotonic() - t0
    return result


def _judge(index: int, stream: _Stream, result: ProbeResult) -> None:
    """A healthy stream's answer to canary question ``index``: wrong makes it wrong-answers."""
    q = answer_canary.question(index)
    answer = answer_canary.judge(q, "".join(stream.content), "".join(stream.reasoning))
    if answer.right:
        result.detail = f"canary {q.id} right; {result.detail}"
    else:
        result.verdict = Verdict.WRONG
        result.detail = f"canary {q.id}: {answer.why}; answered {answer.text!r}"


def _healthy_detail(r: ProbeResult) -> str:
    rate = f", {r.rate:.1f} tok/s" if r.rate is not None else ""
    gap = f", longest gap {r.max_gap_s:.2f} s" if r.max_gap_s is not None else ""
    ttft = f"first token {r.ttft_s:.2f} s" if r.ttft_s is not None else "no token"
    return f"{r.tokens} tokens, {ttft}{gap}{rate}"


async def bounded_probe(cfg: ProbeConfig) -> ProbeResult:
    try:
        async with asyncio.timeout(cfg.deadline_s()):
            return await probe(cfg)
    except TimeoutError:
        return ProbeResult(
            Verdict.STALLED,
            f"no verdict within the probe's deadline of {cfg.deadline_s():.0f} s",
            cfg.url,
            cfg.model,
            time.time(),
            cfg.deadline_s(),
        )


def run_probe(cfg: ProbeConfig) -> ProbeResult:
    """:func:`bounded_probe` from synchronous code."""
    return asyncio.run(bounded_probe(cfg))
