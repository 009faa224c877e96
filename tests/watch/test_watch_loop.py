"""``watch`` without ``--once``: the verdicts are served as Prometheus metrics while it runs."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest

from sparkrack.bench.server import spawn
from sparkrack.diagnose import bundle
from sparkrack.watch.actions import Actions
from sparkrack.watch.loop import LoopConfig, run
from sparkrack.watch.metrics import Series
from sparkrack.watch.probe import ProbeConfig, ProbeResult
from sparkrack.watch.supervisor import Budget, Supervisor

pytestmark = pytest.mark.tools  # serves or probes HTTP on loopback


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_during_run(url: str, probes: int) -> tuple[list[str], list[str]]:
    """(verdicts seen, /metrics text after each probe) of a loop run against ``url``."""
    port = free_port()
    pages: list[str] = []
    verdicts: list[str] = []

    async def on_verdict(result: ProbeResult, _: Series) -> None:
        verdicts.append(str(result.verdict))
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            pages.append(await resp.text())

    cfg = ProbeConfig(url=url, stall_s=1.5, max_tokens=4)
    loop_cfg = LoopConfig(target="alpha", interval_s=0.2, metrics_port=port, probes=probes)
    asyncio.run(run(cfg, loop_cfg, on_verdict, printer=lambda _: None))
    return verdicts, pages


@pytest.mark.parametrize(
    ("server", "verdict"), [([], "healthy"), (["--stall-after", "2"], "stalled")]
)
def test_verdict_metrics_follow_the_probe(server: list[str], verdict: str) -> None:
    with spawn(["--rate", "100", *server]) as url:
        verdicts, pages = scrape_during_run(url, probes=2)
    assert verdicts == [verdict, verdict]
    page = pages[-1]
    assert f'sparkrack_watch_verdict{{target="alpha",verdict="{verdict}"}} 1' in page
    other = "stalled" if verdict == "healthy" else "healthy"
    assert f'sparkrack_watch_verdict{{target="alpha",verdict="{other}"}} 0' in page
    assert 'sparkrack_watch_probes_total{target="alpha"} 2' in page
    assert 'sparkrack_watch_state{target="alpha",state="watching"} 1' in page
    bad = 2 if verdict == "stalled" else 0
    assert f'sparkrack_watch_bad_probes_total{{target="alpha",verdict="stalled"}} {bad}' in page


def test_the_loop_hands_each_verdict_to_the_actions(tmp_path: Path) -> None:
    """Loop + actions without a cluster: one bundle for the stall, the state in the metrics."""
    actions = Actions("alpha", "", evidence=tmp_path, supervisor=Supervisor(Budget(3, 600, 0)))
    with spawn(["--rate", "100", "--stall-after", "2"]) as url:
        cfg = ProbeConfig(url=url, stall_s=1.0, max_tokens=4)
        loop_cfg = LoopConfig(target="alpha", interval_s=0.1, metrics_port=free_port(), probes=2)
        series = asyncio.run(run(cfg, loop_cfg, actions.on_verdict, printer=lambda _: None))
    assert series.state == "restarting" and series.restarts == 2
    assert len(bundle.bundles(tmp_path)) == 2  # grace 0: each stalled probe is a new restart
