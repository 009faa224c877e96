"""The rehearsal end to end in two network namespaces made here, shaped like the lab's two Sparks
of the gemma deployment: SGLang 0.5.11's own dist-init and message-queue broadcaster, one process
per rank, behind the kube-router stand-in built from the rendered policies. The same deployment
switched to vLLM across Sparks (molecule's one-line switch) runs vLLM 0.19.0's multi-node init:
the head and its headless worker parse their rendered argv with vLLM's parser, meet at the
TCPStore vLLM picks from --master-addr/--master-port, and exchange one broadcast over vLLM's
message queue.

The engine-check environment comes from the repository's ``.cache`` (the engine-check tests build
it; a missing one is built the same way). Needs root, ip, iptables, nsenter and unshare.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from rehearsal_netns import available, sparks

from sparkrack.serving.context import context_from_inventory
from sparkrack.serving.deployments.bundle import from_vars
from sparkrack.serving.enginecheck.upstream import ensure_env
from sparkrack.serving.rehearsal.plan import HostIp, plan_inventory
from sparkrack.serving.rehearsal.plan import plan as rehearsal_plan
from sparkrack.serving.rehearsal.run import Outcome, rehearse

ROOT = Path(__file__).resolve().parents[3]
WHY = available()
pytestmark = [
    pytest.mark.tools,  # network namespaces
    pytest.mark.skipif(bool(WHY), reason=f"network namespaces: {WHY}"),
]


@pytest.fixture(scope="module", autouse=True)
def engine_env() -> None:
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(ROOT / ".cache"))
    ensure_env("sglang", "0.5.11")
    ensure_env("vllm", "0.19.0")


VLLM_SWITCH = {"gemma": "nemotron-3-super-120b-a12b-nvfp4-vllm4"}


def _rehearse(host_ip: HostIp, *, filtered: bool, switch: dict[str, str] | None = None) -> Outcome:
    plan = plan_inventory("inventories/lab", host_ip=host_ip, switch=switch)
    with sparks(plan, f"srt{os.getpid()}") as netns:
        return rehearse(plan, netns.__getitem__, filtered=filtered, say=lambda _l: None)


def test_ranks_that_announce_their_fabric_address_pass_the_filter() -> None:
    out = _rehearse("fabric", filtered=True)
    assert out.ok, out.lines
    assert out.lines[0].startswith("gemma rank 0 (spark1): bound the broadcaster at 10.77.0.33:")
    assert "broadcast received" in out.lines[1]


@pytest.mark.parametrize("switch", [None, VLLM_SWITCH], ids=["sglang", "vllm"])
def test_without_host_ip_the_policy_drops_the_broadcaster_and_says_so(
    switch: dict[str, str] | None,
) -> None:
    out = _rehearse("unset", filtered=True, switch=switch)
    assert not out.ok
    # Proven by the drop chain's counter, not by the timeout. Without its host-ip variable each
    # engine binds the default route's address (the cluster network), which the policy filters.
    assert len(out.dropped) == 1, out.lines
    assert re.fullmatch(
        r"gemma rank 1 -> 172\.28\.250\.11:\d+, dropped by sparkrack-gemma "
        r"\(message-queue broadcaster; NetworkPolicy enforced by the kube-router stand-in "
        r"\(iptables\)\)",
        out.dropped[0],
    ), out.dropped


@pytest.mark.parametrize("switch", [None, VLLM_SWITCH], ids=["sglang", "vllm"])
def test_without_the_filter_the_same_ranks_pass(switch: dict[str, str] | None) -> None:
    out = _rehearse("unset", filtered=False, switch=switch)
    assert out.ok, out.lines
    assert "bound the broadcaster at 172.28.250.11:" in out.lines[0]


def test_vllm_head_and_headless_worker_meet_on_the_fabric_as_rendered() -> None:
    out = _rehearse("render", filtered=True, switch=VLLM_SWITCH)
    assert out.ok, out.lines
    assert out.lines[0].startswith("gemma rank 0 (spark1): bound the broadcaster at 10.77.0.33:")
    assert out.lines[1].startswith("gemma rank 1 (spark2): connected to 10.77.0.33:")


def test_vllm_on_four_sparks_every_headless_worker_receives_the_heads_broadcast() -> None:
    ctx = context_from_inventory("inventories/lab")
    four = {
        "name": "super-4",
        "profile": VLLM_SWITCH["gemma"],
        "sparks": ["spark1", "spark2", "spark3", "spark4"],
    }
    plan = rehearsal_plan(from_vars({"serving_deployments": [four]}, ctx, "lab.yml"))
    with sparks(plan, f"srt{os.getpid()}") as netns:
        out = rehearse(plan, netns.__getitem__, say=lambda _l: None)
    assert out.ok, out.lines
    head = ctx.node("spark1").serving_vf.address
    assert out.lines[0].startswith(f"super-4 rank 0 (spark1): bound the broadcaster at {head}:")
    assert [line.split(":")[0] for line in out.lines[1:]] == [
        f"super-4 rank {r} (spark{r + 1})" for r in (1, 2, 3)
    ]
    assert all(f"connected to {head}:" in line for line in out.lines[1:])
