"""Read one figure back from Prometheus' HTTP API: tokens/s per deployment for ``sparkrack status``.

The figure is the recording rule :data:`~sparkrack.observe.rules.GEN_RATE` (every engine's
generated-token counter, one name whatever the engine), so status names no engine metric itself.
An answer that is not Prometheus' instant-query format is a one-line reason, never a traceback.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from sparkrack.observe.rules import GEN_RATE
from sparkrack.observe.scrape import DEPLOYMENT, NAMESPACE

TIMEOUT_S = 5.0
MAX_BYTES = 4 * 1024 * 1024


@dataclass
class Rates:
    """Tokens/s by deployment, or why there are none."""

    by_deployment: dict[str, float] = field(default_factory=dict)
    error: str = ""


def instant_query(base_url: str, query: str, timeout: float = TIMEOUT_S) -> list[dict[str, Any]]:
    """The vector of ``GET /api/v1/query`` (ValueError with the reason when the answer is not
    a successful vector)."""
    url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"{base_url}: not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (scheme checked)
            body = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise ValueError(f"HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ValueError(f"unreachable ({getattr(exc, 'reason', exc)})") from None
    if len(body) > MAX_BYTES:
        raise ValueError(f"answer over {MAX_BYTES} bytes")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the answer is not JSON (not Prometheus' API?)") from None
    if not isinstance(data, dict) or data.get("status") != "success":
        reason = data.get("error", "no status: success") if isinstance(data, dict) else "not a map"
        raise ValueError(f"query failed: {str(reason)[:200]}")
    result = data.get("data")
    if not isinstance(result, dict) or result.get("resultType") != "vector":
        raise ValueError("the answer is not an instant vector")
    vector = result.get("result")
    if not isinstance(vector, list) or not all(isinstance(s, dict) for s in vector):
        raise ValueError("the vector is not a list of samples")
    return vector


def tokens_per_s(base_url: str, namespace: str) -> Rates:
    """Generated tokens/s (5 min rate) of each deployment of ``namespace``."""
    query = f'{GEN_RATE}{{{NAMESPACE}="{namespace}"}}'
    try:
        vector = instant_query(base_url, query)
    except ValueError as exc:
        return Rates(error=str(exc))
    rates: dict[str, float] = {}
    for sample in vector:
        metric, value = sample.get("metric"), sample.get("value")
        if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
            return Rates(error="a sample without metric or [time, value]")
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            return Rates(error=f"a sample value is not a number: {str(value[1])[:40]!r}")
        name = metric.get(DEPLOYMENT)
        if isinstance(name, str) and math.isfinite(number):
            rates[name] = rates.get(name, 0.0) + number
    return Rates(rates)
