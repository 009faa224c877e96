"""Run a benchmark: preflight the endpoint, then each concurrency level in turn."""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import aiohttp
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sparkrack import __version__
from sparkrack.bench import canary as answer_canary
from sparkrack.bench.client import LiveCounters, RequestSpec, clip, run_request
from sparkrack.bench.fingerprint import FingerprintConfig, fingerprint_level
from sparkrack.bench.mtp import (
    ACCEPT_GAUGES,
    GENERATED_SERIES,
    LogFollower,
    generated_tokens,
    parse_metrics,
)
from sparkrack.bench.stats import FAILED, LevelResult
from sparkrack.errors import Problem, SparkrackError

SCHEMA_VERSION = 1
WARMUP_TOKENS = 16
PROMPT_SET = "prompts-v1.json"


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


def load_prompts(name: str = PROMPT_SET) -> tuple[str, list[Prompt]]:
    """The versioned prompt set shipped as package data: (version, prompts)."""
    raw = resources.files("sparkrack.bench").joinpath("data", name).read_text(encoding="utf-8")
    data = json.loads(raw)
    return str(data["version"]), [Prompt(p["id"], p["text"]) for p in data["prompts"]]


@dataclass
class BenchConfig:
    spec: RequestSpec
    concurrency: Sequence[int] = (1, 4, 8)
    label: str = ""
    metrics_url: str | None = None  # None: no metrics scraping
    logs_from: str | None = None  # file path or "-" (stdin)
    fingerprint: FingerprintConfig = field(default_factory=FingerprintConfig)
    progress: bool | None = None  # None: auto (only on a terminal)
    metrics_interval_s: float = 1.0
    warmup: int = 1
    """Requests sent (concurrently) before the first level and left out of the results."""
    skip_model_check: bool = False
    """Do not refuse a model that GET /v1/models does not list (servers serving a folder)."""
    from_metrics: bool = False
    """Read the engine's generated-token counter before and after each level."""
    canary: bool = True
    """Ask the answer canary after each level (a wrong answer: WRONG-ANSWERS)."""
    canary_max_tokens: int = answer_canary.MAX_TOKENS


@dataclass
class RunResult:
    meta: dict[str, Any]
    levels: list[LevelResult]

    @property
    def label(self) -> str:
        return str(self.meta["label"])

    def level(self, n: int) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.concurrency == n), None)

    def to_json(self) -> dict[str, Any]:
        return {"meta": self.meta, "levels": [lv.to_json() for lv in self.levels]}


@dataclass(frozen=True)
class Endpoint:
    url: str
    """Base URL without credentials and without a trailing /v1."""
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)


def parse_url(url: str) -> Endpoint:
    """Validate ``--url``; take user:password out of it (sent as Basic auth, never printed)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise SparkrackError(
            Problem(
                "--url",
                "--url",
                f"not a valid URL ({exc})",
                "e.g. http://127.0.0.1:30000",
                "bench-url",
            )
        ) from None
    if parts.scheme not in ("http", "https") or not host:
        raise SparkrackError(
            Problem(
                "--url",
                "--url",
                f"not an http(s) URL with a host: {redact_url(url)!r}",
                "e.g. http://127.0.0.1:30000",
                "bench-url",
            )
        )
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    auth = None
    if parts.username is not None or parts.password is not None:
        auth = (
            urllib.parse.unquote(parts.username or ""),
            urllib.parse.unquote(parts.password or ""),
        )
    return Endpoint(urllib.parse.urlunsplit((parts.scheme, netloc, path, "", "")), auth)


def redact_url(url: str) -> str:
    """``url`` with any user:password replaced by ``***``."""
    head, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    return head + sep + netloc + slash + tail


def normalize_url(url: str) -> str:
    return parse_url(url).url


async def preflight(
    session: aiohttp.ClientSession, spec: RequestSpec, skip_model_check: bool = False
) -> list[str]:
    """Check the endpoint answers and serves ``spec.model``; return the served model ids.

    With ``skip_model_check`` an unlisted model (or a server without ``/v1/models``) is accepted;
    an unreachable endpoint or a refused API key is still an error.
    """
    url = spec.url + "/v1/models"
    served: list[str] = []
    problem: str | None = None
    try:
        async with session.get(
            url,
            headers=spec.headers(),
            timeout=aiohttp.ClientTimeout(
                total=min(spec.stall_timeout_s, 60.0),
                sock_connect=spec.connect_timeout_s,
                sock_read=spec.connect_timeout_s,
            ),
        ) as resp:
            if resp.status in (401, 403):
                raise SparkrackError(
                    Problem(
                        url,
                        "api key",
                        f"the endpoint refused the API key (HTTP {resp.status})",
                        "export the key in the variable named by --api-key-env",
                        "bench-auth",
                    )
                )
            body = await resp.text(errors="replace")
            if resp.status != 200:
                problem = f"GET /v1/models answered HTTP {resp.status}: {clip(body, 200)}"
            else:
                served, problem = _served_models(body)
    except SparkrackError:
        raise
    except Exception as exc:  # noqa: BLE001 - any transport failure means "not reachable"
        raise SparkrackError(
            Problem(
                url,
                "--url",
                f"endpoint not reachable ({type(exc).__name__}: {clip(str(exc), 200)})",
                "check the address/port (kubectl port-forward?) and that the serving pod is Ready",
                "bench-endpoint-down",
            )
        ) from None
    if skip_model_check:
        return served
    if problem is not None:
        raise SparkrackError(
            Problem(
                url,
                "--url",
                problem,
                "point --url at an OpenAI-compatible server (SGLang: http://HOST:30000), "
                "or pass --skip-model-check",
                "bench-endpoint",
            )
        )
    if spec.model not in served:
        raise SparkrackError(
            Problem(
                url,
                "--model",
                f"model {spec.model!r} is not served here; served: {', '.join(served) or 'none'}",
                "pass --model with one of the served names (SGLang: --served-model-name), "
                "or --skip-model-check for a server that does not list it",
                "bench-model-unknown",
            )
        )
    return served


def _served_models(body: str) -> tuple[list[str], str | None]:
    """(model ids, problem) of a /v1/models answer."""
    try:
        data = json.loads(body)
    except ValueError:
        return [], f"GET /v1/models did not answer JSON: {clip(body, 120)!r}"
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return [], "GET /v1/models answered JSON without a 'data' list"
    return [str(m.get("id")) for m in entries if isinstance(m, dict) and m.get("id")], None


async def _sample_metrics(
    session: aiohttp.ClientSession,
    url: str,
    interval: float,
    out: list[float],
    state: dict[str, str],
) -> None:
    while True:
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                if resp.status != 200:
                    state["error"] = f"HTTP {resp.status}"
                    return
                value = parse_metrics(await resp.text(errors="replace"))
                if value is not None:
                    out.append(value)
        except Exception as exc:  # noqa: BLE001 - metrics are optional: record and stop sampling
            state["error"] = f"{type(exc).__name__}"
            return
        await asyncio.sleep(interval)


async def _counter(session: aiohttp.ClientSession, url: str) -> tuple[float | None, str | None]:
    """(the engine's generated-token count now, why it could not be read)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
            if resp.status != 200:
                return None, f"HTTP {resp.status}"
            value = generated_tokens(await resp.text(errors="replace"))
    except Exception as exc:  # noqa: BLE001 - metrics are optional: record why and go on
        return None, type(exc).__name__
    if value is None:
        return None, "no generated-token counter (" + ", ".join(GENERATED_SERIES) + ")"
    return value, None


async def run_level(
    session: aiohttp.ClientSession,
    config: BenchConfig,
    n: int,
    prompts: list[Prompt],
    progress: Progress | None = None,
    follower: LogFollower | None = None,
) -> LevelResult:
    spec = config.spec
    counters = LiveCounters()
    samples: list[float] = []
    state: dict[str, str] = {}
    sampler = None
    if config.metrics_url:
        sampler = asyncio.create_task(
            _sample_metrics(session, config.metrics_url, config.metrics_interval_s, samples, state)
        )
    task_id = None
    ticker = None
    if progress is not None:
        task_id = progress.add_task(f"n={n}", total=n * spec.max_tokens, status="")

        async def tick() -> None:
            while True:
                progress.update(
                    task_id,
                    completed=counters.tokens,
                    status=f"{counters.done}/{n} done, {counters.failed} failed",
                )
                await asyncio.sleep(0.25)

        ticker = asyncio.create_task(tick())
    before: tuple[float | None, str | None] = (None, None)
    if config.from_metrics and config.metrics_url:
        before = await _counter(session, config.metrics_url)
    start_mono = time.monotonic()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    results = await asyncio.gather(
        *(
            run_request(
                session,
                spec,
                i,
                prompts[(spec.seed + i) % len(prompts)].id,
                prompts[(spec.seed + i) % len(prompts)].text,
                counters,
                t0,
            )
            for i in range(n)
        )
    )
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    end_mono = time.monotonic()
    for task in (sampler, ticker):
        if task is not None:
            task.cancel()
    if progress is not None and task_id is not None:
        progress.update(task_id, completed=n * spec.max_tokens, status=f"{counters.done}/{n} done")
    level = LevelResult(concurrency=n, requests=list(results), wall_s=wall, client_cpu_s=cpu)
    level.summarize()
    if config.from_metrics and config.metrics_url:
        after = await _counter(session, config.metrics_url)
        if before[0] is not None and after[0] is not None and after[0] >= before[0]:
            level.server_tokens = after[0] - before[0]
            level.server_tok_s = level.server_tokens / wall if wall > 0 else None
        else:
            why = before[1] or after[1] or "the counter went backwards (server restarted?)"
            level.notes.append(f"server-side figures unavailable: {why}")
    if samples:
        level.accept_len = statistics.median(samples)
        level.accept_len_source = (
            f"metrics ({len(samples)} samples of {' or '.join(ACCEPT_GAUGES)})"
        )
    elif follower is not None:
        values = follower.between(start_mono, end_mono)
        if values:
            level.accept_len = statistics.fmean(values)
            level.accept_len_source = f"logs ({len(values)} 'accept len' lines during the level)"
    if config.metrics_url and not samples and state:
        level.notes.append(f"metrics endpoint unavailable: {state['error']}")
    fingerprint_level(level, config.fingerprint)
    if config.canary and level.status != FAILED:  # nothing answers: nothing to ask
        answer_canary.mark(
            level, await answer_canary.ask_level(session, spec, n, config.canary_max_tokens)
        )
    return level


async def warm_up(
    session: aiohttp.ClientSession, config: BenchConfig, prompts: list[Prompt]
) -> dict[str, Any]:
    """Send ``config.warmup`` short requests at once (cold start, graph capture, caches)."""
    # No guard: a warm-up answer is thrown away, only transport failures are worth recording.
    spec = replace(
        config.spec,
        max_tokens=min(config.spec.max_tokens, WARMUP_TOKENS),
        guard=replace(config.spec.guard, enabled=False),
    )
    t0 = time.perf_counter()
    results = await asyncio.gather(
        *(
            run_request(
                session, spec, i, prompts[i % len(prompts)].id, prompts[i % len(prompts)].text
            )
            for i in range(config.warmup)
        )
    )
    failed = [r.error or r.status for r in results if r.status != "ok"]
    info: dict[str, Any] = {
        "requests": config.warmup,
        "max_tokens": spec.max_tokens,
        "wall_s": round(time.perf_counter() - t0, 3),
        "failed": len(failed),
    }
    if failed:
        info["errors"] = sorted(set(failed))[:3]
    return info


async def run_bench_async(config: BenchConfig, console: Console | None = None) -> RunResult:
    console = console or Console(stderr=True)
    show = console.is_terminal if config.progress is None else config.progress
    version, prompts = load_prompts()
    spec = config.spec
    follower = LogFollower(config.logs_from) if config.logs_from else None
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": f"sparkrack {__version__}",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "label": config.label or spec.model,
        "url": spec.url,
        "skip_model_check": config.skip_model_check,
        "stall_timeout_s": spec.stall_timeout_s,
        "token_counter": spec.token_counter.name if spec.token_counter else None,
        "model": spec.model,
        "concurrency": list(config.concurrency),
        "max_tokens": spec.max_tokens,
        "seed": spec.seed,
        "thinking": spec.thinking,
        "temperature": spec.temperature,
        "prompt_set": {"file": PROMPT_SET, "version": version, "prompts": len(prompts)},
        "guard": asdict(spec.guard),
        "canary": {
            "questions": [q.id for q in answer_canary.QUESTIONS],
            "max_tokens": config.canary_max_tokens,
        }
        if config.canary
        else None,
        "fingerprint": asdict(config.fingerprint),
        "metrics_url": config.metrics_url,
        "logs_from": config.logs_from,
        "client_host": {"python": platform.python_version(), "machine": platform.machine()},
        "definitions": {
            "peak_tok_s": "sum of per-request decode tok/s over the successful requests",
            "aggregate_tok_s": "output tokens of successful requests / level wall time",
            "decode_tok_s": "(output tokens - first-chunk tokens) / (last - first text chunk)",
            "ttft_s": "first text chunk arrival - request sent",
            "mean_concurrent_streams": "time-average number of requests between their first "
            "and last text chunk, over the level's wall time",
            "all_streaming_fraction": "share of the level's wall time with all n requests "
            "between their first and last text chunk",
        },
    }
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    levels: list[LevelResult] = []
    async with aiohttp.ClientSession(connector=connector) as session:
        meta["served_models"] = await preflight(session, spec, config.skip_model_check)
        if config.warmup > 0:
            meta["warmup"] = await warm_up(session, config, prompts)
        if follower is not None:
            follower.start()
        progress = None
        if show:
            progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("tokens  {task.fields[status]}"),
                TimeElapsedColumn(),
                console=console,
            )
            progress.start()
        try:
            for n in config.concurrency:
                levels.append(await run_level(session, config, n, prompts, progress, follower))
        finally:
            if progress is not None:
                progress.stop()
            if follower is not None:
                follower.stop()
    if follower is not None and not any(lv.accept_len for lv in levels):
        whole = follower.whole_file()
        if whole:
            meta["accept_len_whole_log"] = statistics.fmean(whole)
            meta["accept_len_note"] = (
                f"{config.logs_from} did not grow during the run; mean over its "
                f"{len(whole)} 'accept len' lines (not attributable to a level)"
            )
    meta["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return RunResult(meta=meta, levels=levels)


def run_bench(config: BenchConfig, console: Console | None = None) -> RunResult:
    return asyncio.run(run_bench_async(config, console))
