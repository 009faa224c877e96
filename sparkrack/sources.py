"""The published documents sparkrack's recipes, rules and signatures come from.

Code, data and docs cite a document as ``src:<slug>`` (``src:roce-post, Finding 1``); whatever
sparkrack prints goes through :func:`expand`, which writes the document's title and where it was
published in its place. This table is the only place a title or a place of publication is
written; ``docs/reference/sources.md`` is generated from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FORUMS = "NVIDIA Developer Forums"


@dataclass(frozen=True)
class Source:
    """One published document: its title and where it was published."""

    slug: str
    title: str
    published: str
    about: str

    def cite(self) -> str:
        return f"“{self.title}” ({self.published})"


SOURCES: dict[str, Source] = {
    s.slug: s
    for s in (
        Source(
            "super-mtp-post",
            "Multi-Token Prediction (MTP / EAGLE) on the NemotronH-NVFP4 Super works on DGX Spark"
            " (SM121)",
            FORUMS,
            "Nemotron-3-Super-120B NVFP4 with MTP on 4 Sparks over RoCE, SGLang 0.5.13-dev",
        ),
        Source(
            "gemma-mtp-post",
            "Gemma-4-31B-it with the -assistant MTP drafter on SGLang, 4-node DGX Spark",
            FORUMS,
            "Gemma-4-31B-it BF16 with the FROZEN_KV_MTP drafter, TP=4 over RoCE",
        ),
        Source(
            "ultra-post",
            "Nemotron-3-Ultra-550B-A55B-NVFP4 on 4× DGX Spark via SGLang (TP=4 EP=4, RoCE)"
            " — it works, ~42–43 tok/s n8 peak",
            FORUMS,
            "Nemotron-3-Ultra-550B NVFP4 at TP=4 EP=4 on the upstream image; two startup traps",
        ),
        Source(
            "roce-post",
            "Two multi-node DGX Spark wins: RoCE, 2× inference throughput, Qwen3.5-397B-A17B-NVFP4"
            " serving with SM121 CUTLASS patch",
            FORUMS,
            "RoCE vs TCP sockets for NCCL over SR-IOV VFs; Qwen3.5-397B and GLM-4.7 matrices, MTP",
        ),
        Source(
            "super-guide",
            "Nemotron 3 Super — DGX Spark Deployment Guide",
            "NVIDIA, Nemotron deployment guides",
            "Nemotron-3-Super on one Spark with vLLM (nightly) and TensorRT-LLM",
        ),
        Source(
            "super-topology-bench",
            "Nemotron-3-Super-120B: Topology Benchmark on DGX Spark",
            "kubis.ai, DGX series benchmarks",
            "Nemotron-3-Super-120B NVFP4 with vLLM on one Spark and on two at TP=2; decode c1-c64",
        ),
        Source(
            "gb10-memavailable-bug",
            "[Bug]: Engine startup on DGX Spark (GB10, unified memory) collapses host memory —"
            " NV_ERR_NO_MEMORY while MemAvailable reports ~22 GiB",
            "GitHub, the vLLM tracker, report 56824",
            "MemAvailable counts page cache the NVIDIA allocator cannot take back at engine start",
        ),
        Source(
            "spark-oom-page-cache",
            "Taming OOM on DGX Spark: Debugging Unified Memory Pressure in a 2-Node vLLM Cluster",
            "tobias-weiss.org",
            "page cache of a memory-mapped checkpoint against NV_ERR_NO_MEMORY at KV allocation",
        ),
    )
}

REFERENCE = re.compile(r"src:([a-z0-9-]+)")


def expand(text: str) -> str:
    """``text`` with every ``src:<slug>`` written as the document's title and place.

    An unknown slug is left as written; ``tests/test_sources.py`` holds every slug in the
    repository to this table."""
    return REFERENCE.sub(lambda m: s.cite() if (s := SOURCES.get(m[1])) else m[0], text)


def unknown(text: str) -> list[str]:
    """The ``src:`` slugs in ``text`` that name no document."""
    return [m[1] for m in REFERENCE.finditer(text) if m[1] not in SOURCES]
