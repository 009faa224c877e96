"""The rank rehearsal in the converged lab: each rank of the lab's multi-rank deployment runs
SGLang's own dist-init and message-queue broadcaster in its Spark's network namespace, behind
the kube-router stand-in built from the rendered NetworkPolicies (lab/lab.py ``rehearse``).

The rendered ranks must pass. The controls: with SGLANG_HOST_IP removed the policy drops the
broadcaster's connection and the failure names it; with the filter removed the same ranks pass,
so the filter is what caught it.
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
