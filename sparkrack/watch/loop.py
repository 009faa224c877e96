"""``sparkrack watch`` without ``--once``: probe at an interval, serve the verdicts as metrics and
hand every verdict to the actions (evidence, restart, routing) of :mod:`.actions`."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from aiohttp import web

from sparkrack.watch.metrics import Series, exposition
from sparkrack.watch.probe import ProbeConfig, ProbeResult, Verdict, bounded_probe

OnVerdict = Callable[[ProbeResult, Series], Awaitable[None]]


@dataclass(frozen=True)
class LoopConfig:
    target: str
    """The name the metrics carry (the deployment's name, or the URL)."""
    interval_s: float = 10.0
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9464
    probes: int | None = None
    """Stop after this many probes (None: until signalled)."""


async def run(
    probe_cfg: ProbeConfig,
    loop_cfg: LoopConfig,
    on_verdict: OnVerdict | None = None,
    printer: Callable[[str], None] = print,
) -> Series:
    """Probe until stopped (SIGTERM/SIGINT or ``loop_cfg.probes``); return what was seen."""
    series = Series()
    app = web.Application()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            text=exposition({loop_cfg.target: series}),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, loop_cfg.metrics_host, loop_cfg.metrics_port)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    printer(
        f"watching {loop_cfg.target}; metrics on {loop_cfg.metrics_host}:{loop_cfg.metrics_port}"
    )
    previous: Verdict | None = None
    try:
        while not stop.is_set():
            t0 = loop.time()
            cfg = probe_cfg
            if cfg.canary is not None:  # the canary questions in turn, one per probe
                cfg = replace(cfg, canary=cfg.canary + series.probes)
            result = await bounded_probe(cfg)
            series.record(result)
            if result.verdict is not previous:
                printer(result.line())
                previous = result.verdict
            if on_verdict is not None:
                await on_verdict(result, series)
            if loop_cfg.probes is not None and series.probes >= loop_cfg.probes:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    stop.wait(), max(0.0, t0 + loop_cfg.interval_s - loop.time())
                )
    finally:
        await runner.cleanup()
    return series
