"""Per-request and per-level statistics of a benchmark run (the seeds' methodology).

Definitions (used everywhere, written into results.json's schema descriptions):

* TTFT = arrival of the first chunk that carries generated text (content or reasoning) minus the
  moment the request was sent.
* decode tok/s = tokens generated after the first text chunk / (last text chunk - first text
  chunk).  TTFT is excluded, so this is the steady-state decode rate of that stream.
* end-to-end tok/s = output tokens / (last text chunk - request sent).
* peak = Σ decode tok/s over the *successful* requests of a level (src:super-mtp-post, src:ultra-post, src:roce-post: "peak = Σ
  per-request tok/s", the steady-state aggregate decode rate) -> ``peak_tok_s``.
* aggregate = output tokens of the successful requests / wall time of the level (first request
  sent -> last request finished) -> ``aggregate_tok_s``.  Not the same number: it includes TTFT
  and the tail, which is why src:ultra-post warns about mixing them up.
* overlap: peak assumes the n requests decoded at the same time.  Each request's streaming
  interval runs from its first to its last text chunk; ``all_streaming_fraction`` is the share of
  the level's wall time during which all n intervals overlap, ``mean_concurrent_streams`` the
  time-average number of open intervals.  When the mean is below ``OVERLAP_WARN_SHARE`` x n (a
  server that serialises requests), the level carries ``overlap_warning``: its peak is not backed
  by concurrency and the aggregate is the figure to use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

OVERLAP_WARN_SHARE = 0.5
NO_TOKEN_COUNTS = "NO-TOKEN-COUNTS"
"""Level status when successful requests carried no usage and no tokenizer counted them."""
FAILED = "FAILED"
"""Level status when no request of the level succeeded."""
WRONG_ANSWERS = "WRONG-ANSWERS"
"""Level status when an answer-canary question was answered wrong (see bench.canary)."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for an empty sequence."""
    if not values:
        return None
    data = sorted(values)
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


@dataclass
class RequestResult:
    index: int
    prompt_id: str
    status: str = "ok"  # ok | failed
    error: str | None = None
    guard: str = "clean"  # clean | tripped | off
    guard_reason: str | None = None
    ttft_s: float | None = None
    decode_tok_s: float | None = None
    e2e_tok_s: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p90: float | None = None
    itl_ms_p99: float | None = None
    output_tokens: int | None = None
    output_tokens_source: str = "missing"  # usage | missing | tokenizer:NAME
    first_chunk_tokens: int | None = None
    first_chunk_tokens_source: str = "usage"  # usage | assumed-1 | tokenizer:NAME
    finish_reason: str | None = None
    reasoning_tokens: int | None = None
    content_tokens: int | None = None
    token_split_source: str | None = None  # usage-details | per-chunk-usage | None (unknown)
    text_chunks: int = 0
    response_id: str | None = None
    """The server's id of this completion (the ``id`` of its first chunk), to find it in its logs."""
    stream_start_s: float | None = None
    """First text chunk, seconds after the level started."""
    stream_end_s: float | None = None
    """Last text chunk, seconds after the level started."""
    content_chars: int = 0
    reasoning_chars: int = 0
    tail: str = ""
    """The last 200 characters of the stream (content or reasoning), for the eye of the reader."""
    notes: list[str] = field(default_factory=list)
    text: str = field(default="", repr=False)
    """Full generated text; kept in memory for the garbage fingerprint, not written out."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("text")
        return data


@dataclass
class LevelResult:
    concurrency: int
    requests: list[RequestResult]
    wall_s: float
    client_cpu_s: float
    peak_tok_s: float = 0.0
    aggregate_tok_s: float = 0.0
    ok: int = 0
    failed: int = 0
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    decode_tok_s_p50: float | None = None
    accept_len: float | None = None
    accept_len_source: str | None = None
    server_tokens: float | None = None
    """Generated tokens the engine counted during the level (``--from-metrics``)."""
    server_tok_s: float | None = None
    """``server_tokens`` / the level's wall time: the server-side aggregate."""
    status: str = "ok"  # ok | GARBAGE | FAILED | NO-TOKEN-COUNTS | WRONG-ANSWERS
    garbage_reasons: list[str] = field(default_factory=list)
    client_cpu_s_per_1k_tok: float | None = None
    """Client CPU seconds per 1 000 received tokens (= cores the client keeps busy per 1 000 tok/s)."""
    all_streaming_fraction: float | None = None
    mean_concurrent_streams: float | None = None
    overlap_warning: str | None = None
    notes: list[str] = field(default_factory=list)
    canary: dict[str, Any] | None = None
    """The answer canary asked after the level (``bench.canary.CanaryResult`` as JSON)."""

    def summarize(self) -> None:
        """Fill the level aggregates from ``requests`` (call after the level finished)."""
        good = [r for r in self.requests if r.status == "ok"]
        self.ok = len(good)
        self.failed = len(self.requests) - self.ok
        self.peak_tok_s = sum(r.decode_tok_s or 0.0 for r in good)
        tokens = sum(r.output_tokens or 0 for r in good)
        self.aggregate_tok_s = tokens / self.wall_s if self.wall_s > 0 else 0.0
        ttfts = [r.ttft_s for r in good if r.ttft_s is not None]
        self.ttft_p50_s = percentile(ttfts, 50)
        self.ttft_p95_s = percentile(ttfts, 95)
        self.decode_tok_s_p50 = percentile([r.decode_tok_s for r in good if r.decode_tok_s], 50)
        received = sum(r.output_tokens or 0 for r in self.requests)
        if received:
            self.client_cpu_s_per_1k_tok = self.client_cpu_s / received * 1000.0
        self._overlap()
        if self.ok == 0:
            self.status = "FAILED"
        missing = [r.index for r in good if r.output_tokens_source == "missing"]
        counted = sorted({r.output_tokens_source for r in good} - {"usage", "missing"})
        if missing:
            self.notes.append(
                f"no token counts: requests {missing} reported no usage; their output tokens "
                "are unknown and excluded from the token sums (never estimated from characters)"
            )
            if self.status == "ok":
                self.status = NO_TOKEN_COUNTS
        if counted:
            self.notes.append(
                f"the server sent no usage: output tokens counted by {', '.join(counted)}"
            )

    def _overlap(self) -> None:
        spans = [
            (r.stream_start_s, r.stream_end_s)
            for r in self.requests
            if r.stream_start_s is not None and r.stream_end_s is not None
        ]
        if not spans or self.wall_s <= 0:
            return
        events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        open_now = 0
        last = events[0][0]
        all_open = busy = 0.0
        for t, step in events:
            if open_now >= self.concurrency:
                all_open += t - last
            busy += open_now * (t - last)
            open_now += step
            last = t
        self.all_streaming_fraction = all_open / self.wall_s
        self.mean_concurrent_streams = busy / self.wall_s
        n = self.concurrency
        if n >= 2 and self.mean_concurrent_streams < OVERLAP_WARN_SHARE * n:
            self.overlap_warning = (
                f"peak not backed by concurrency: {self.mean_concurrent_streams:.2f} of {n} "
                f"streams open on average, all {n} open {100 * self.all_streaming_fraction:.0f}% "
                f"of the time; use aggregate ({self.aggregate_tok_s:.2f} tok/s), not peak "
                f"({self.peak_tok_s:.2f} tok/s)"
            )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["requests"] = [r.to_json() for r in self.requests]
        return data
