"""The rank rehearsal in the converged lab: each rank of the lab's multi-rank deployment runs
SGLang's own dist-init and message-queue broadcaster in its Spark's network namespace, behind
the kube-router stand-in built from the rendered NetworkPolicies (lab/lab.py ``rehearse``).

The rendered ranks must pass. The controls: with SGLANG_HOST_IP removed the policy drops the
broadcaster's connection and the failure names it; with the filter removed the same ranks pass,
so the filter is what caught it. The same deployment switched to vLLM across Sparks (the
lifecycle test's one-line switch) runs vLLM's multi-node init: the head and its headless worker
meet at the TCPStore of --master-addr/--master-port and exchange one broadcast over vLLM's
message queue, bound on VLLM_HOST_IP; without it, the policy drops the queue's connection.
"""

from __future__ import annotations

import re

from conftest import lab


def test_the_rendered_ranks_finish_init_and_receive_rank_0s_broadcast() -> None:
    result = lab().rehearse_ranks()
    assert result["ok"], "\n".join(result["lines"])
    assert any("broadcast received" in line for line in result["lines"])


def test_without_host_ip_the_dropped_connection_is_named() -> None:
    result = lab().rehearse_ranks("unset")
    assert not result["ok"]
    dropped = [line for line in result["lines"] if "dropped by" in line]
    assert dropped, result["lines"]
    assert re.match(r"gemma rank 1 -> [\d.]+:\d+, dropped by sparkrack-gemma ", dropped[0])


def test_without_the_filter_the_same_ranks_pass() -> None:
    result = lab().rehearse_ranks("unset", filtered=False)
    assert result["ok"], "\n".join(result["lines"])


VLLM_SWITCH = {"gemma": "nemotron-3-super-120b-a12b-nvfp4-vllm4"}


def test_vllm_head_and_headless_worker_finish_init_and_receive_the_broadcast() -> None:
    result = lab().rehearse_ranks(switch=VLLM_SWITCH)
    assert result["ok"], "\n".join(result["lines"])
    assert any(line.startswith("gemma rank 1") and "broadcast received" in line
               for line in result["lines"]), result["lines"]  # fmt: skip


def test_vllm_without_host_ip_the_dropped_message_queue_is_named() -> None:
    result = lab().rehearse_ranks("unset", switch=VLLM_SWITCH)
    assert not result["ok"]
    dropped = [line for line in result["lines"] if "dropped by" in line]
    assert dropped, result["lines"]
    assert re.match(r"gemma rank 1 -> [\d.]+:\d+, dropped by sparkrack-gemma ", dropped[0])
