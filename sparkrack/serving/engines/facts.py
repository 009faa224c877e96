"""Records of what an engine's pinned releases declare in their source: the Prometheus metrics
they export and the HTTP routes they serve besides the OpenAI API. Each engine module fills them
with its own facts; :mod:`sparkrack.serving.engines.base` and the observability code read them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

MetricKind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class Metric:
    """One Prometheus metric as its source declares it (an engine's, or an exporter's)."""

    name: str
    kind: MetricKind
    exporter: str
    """The engine's PyPI distribution, or an exporter's name."""
    source: str
    """File that declares it: a path inside the wheel, or ``repo:path`` of an exporter."""
    versions: tuple[str, ...] = ()
    """Wheel versions checked (engine metrics only)."""

    def series(self) -> tuple[str, ...]:
        """Names of the series Prometheus stores (prometheus_client appends ``_total`` to a
        counter and ``_bucket``/``_sum``/``_count`` to a histogram)."""
        if self.kind == "counter":
            return (self.name if self.name.endswith("_total") else f"{self.name}_total",)
        if self.kind == "histogram":
            return tuple(f"{self.name}{s}" for s in ("_bucket", "_sum", "_count"))
        return (self.name,)


@dataclass(frozen=True)
class AcceptRatio:
    """An acceptance length the engine counts rather than reports: ``1 + accepted / drafts``."""

    accepted: str
    """Counter of accepted draft tokens."""
    drafts: str
    """Counter of drafts (speculation steps)."""


class Quantity(StrEnum):
    """What an engine's metric measures: one name per quantity, each a ``sparkrack:*`` recording
    rule of :mod:`sparkrack.observe.rules` (which says how its series are aggregated)."""

    GENERATED = "generation_tokens"
    """Tokens generated (counter)."""
    RUNNING = "requests_running"
    QUEUED = "requests_waiting"
    TTFT = "time_to_first_token"
    """Time to first token (histogram, seconds)."""
    ITL = "inter_token_latency"
    KV_USAGE = "kv_cache_usage"
    """KV pool usage (gauge, 0..1)."""
    MAMBA_USAGE = "mamba_cache_usage"
    ACCEPT_LENGTH = "spec_accept_length"
    """Speculative-decoding acceptance length (a gauge, or an :class:`AcceptRatio`)."""


@dataclass(frozen=True)
class Route:
    """One HTTP route of an engine's pinned releases other than the OpenAI API, as read from
    their source: who may call it there, and when the release serves it at all."""

    path: str
    key: Literal["engine key", "none"]
    """What the release's own auth asks of a caller (``none``: anyone who reaches the port)."""
    served: str
    """When the release serves it: ``always``, or the setting that mounts it."""
    does: str
    source: str
    """File of the release that declares it."""
