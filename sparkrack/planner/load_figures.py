"""The published weight loads on GB10 ranks that set the engine-load rate, and the fit.

The model (:func:`sparkrack.planner.switch.load_seconds`) has one physical term: each rank
pulls its share of the checkpoint through the engine's default safetensors loader, which on a
GB10 copies every tensor out of memory-mapped file pages into the GPU's allocation. That copy,
not the NVMe, sets the pace: the same Spark reads a 65 GB file in 22 s when nothing is mapped
(llama.cpp ``--no-mmap``) and the same vLLM loads an 82 GB checkpoint 6x faster when it reads
the files eagerly instead of mapping them (the NVIDIA forum thread "Very slow mmap on DGX Spark
that affects model loading"). SGLang and vLLM load the same way by default, so one rate per
rank, in MB/s, serves both; fit here:
:func:`fitted_rate` pools the figures (their bytes over their seconds), so a long load counts
for what it weighs.

Only :data:`FIT` is fit. The figures that check it are data of the tests, which nothing in this
package reads (``tests/planner/test_outage.py`` holds that, and lists every figure's error).

What the figures cannot support, and is left out: a fixed engine start (two fit figures give
an intercept of -681 s, which no process has), a term per quantization format (every figure is
an already-quantized checkpoint loaded as stored: NVFP4 or FP8, no repacking reported), and
CUDA graph capture (every figure times the weights alone; capture comes after).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class LoadFigure:
    """A published weight load: the bytes each rank loaded, how long, and its conditions."""

    model: str
    engine: str
    ranks: int
    gb_per_rank: float
    seconds: float
    source: str
    conditions: str

    @property
    def mbyte_s(self) -> float:
        return self.gb_per_rank * 1000 / self.seconds


FIT: Final = (
    LoadFigure(
        "MiniMax-M2.7 NVFP4-GB10-AC (compressed-tensors, 141 GB, 29 shards)",
        "SGLang 0.5.12",
        2,
        67.0,
        300.0,
        'al-engr.com, "Getting MiniMax M2.7 Running on 2× DGX Spark: Every Wall We Hit"',
        "TP=2 over a direct QSFP link; 67 GB of weights per rank in about 5 minutes, the "
        "checkpoint rsync'd onto the node just before; graph capture after (it deadlocked)",
    ),
    LoadFigure(
        "Qwen3-Next-80B-A3B FP8 (82.1 GB checkpoint)",
        "vLLM",
        1,
        82.1,
        521.0,
        'NVIDIA Developer Forums, "Very slow mmap on DGX Spark that affects model loading"',
        "one Spark, kernel 6.17.1, default load (safetensors mapped): 8 min 41 s, against "
        "1 min 28 s with the eager (unmapped) load; page cache state not given",
    ),
)
"""The figures the rate is fit on: the published loads of models the source posts do not serve,
one per engine, on the kernel line the source posts' cluster runs (6.17). The source posts' own
figure (Nemotron-3-Ultra, src:ultra-post) only checks the fit."""


def fitted_rate(figures: tuple[LoadFigure, ...] = FIT) -> float:
    """MB/s per rank: the figures' bytes over their seconds."""
    return sum(f.gb_per_rank * 1000 for f in figures) / sum(f.seconds for f in figures)
