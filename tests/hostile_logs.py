"""Hostile server logs for ``sparkrack diagnose``: huge lines and many near-matches.

Shared by tests/diagnose/test_diagnose_hostile.py and the benchmark tests/diagnose_benchmark.py.
"""

from __future__ import annotations

NCCL_SPAM = "NCCL INFO Channel 00/0 : 0[0] -> 1[1] "  # starts like a signature, never ends like one


def huge_line(size: int) -> str:
    """One line of ``size`` characters that keeps almost matching the NCCL transport signature."""
    return (NCCL_SPAM * (size // len(NCCL_SPAM) + 1))[:size]


def near_matches(lines: int) -> list[str]:
    """Illegal-instruction lines, each surrounded by context that two signatures look for."""
    block = [
        "RuntimeError: CUDA error: an illegal instruction was encountered",
        '  File "scheduler.py", line 1, in process_batch_result_decode',
        '  File "cuda_graph_runner.py", line 2, in capture_one_batch',
        "Speculative decoding for " + "x" * 200 + " is not compatible with radix cache",
        "Network is unreachable",
    ]
    return [block[i % len(block)] for i in range(lines)]


def dense_matches(size: int) -> str:
    """``size`` characters of illegal-instruction lines: every line matches, none has context."""
    line = "RuntimeError: CUDA error: an illegal instruction was encountered\n"
    return (line * (size // len(line) + 1))[:size]


def hostile_log(size: int) -> str:
    """``size`` characters: a third in one huge line, the rest spam lines and near-matches."""
    third = size // 3
    parts = [huge_line(third), huge_line(third // 64)]
    parts += [huge_line(4000) for _ in range(third // 2 // 4000)]
    budget = size - sum(len(p) + 1 for p in parts)
    parts += near_matches(max(budget // 80, 1))
    return ("\n".join(parts) + "\n")[:size]
