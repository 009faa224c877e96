"""Prometheus recording and alert rules for the cluster sparkrack builds.

One source, two files: :func:`rule_groups` is written as a plain rules file
(``data/observe/sparkrack-rules.yml``, for ``promtool`` and any Prometheus) and wrapped in a
``PrometheusRule`` (``data/observe/prometheusrule.yml``, for the Prometheus Operator).

Recording rules put the engines' metrics under one name per quantity (``sparkrack:*``), each
keyed by ``namespace``, ``deployment`` and ``profile`` (:mod:`.scrape`); the alerts read those.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from sparkrack import contract
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.observe.metrics import s
from sparkrack.observe.scrape import DEPLOYMENT, GROUP_BY, PROFILE
from sparkrack.planner.memory import DEFAULT_OS_HEADROOM_GB
from sparkrack.serving import list_profiles, load_profile
from sparkrack.serving.engines import ENGINES
from sparkrack.serving.engines.facts import AcceptRatio, Quantity
from sparkrack.watch.metrics import PREFIX as WATCH
from sparkrack.watch.probe import Verdict

THROUGHPUT_FRACTION: Final = 0.7
"""Alert when generation throughput falls below this fraction of the profile's measured figure
at the same concurrency (a chosen margin, not a measurement)."""
TTFT_P95_BOUND_S: Final = 30.0
"""Alert bound on the 95th percentile time to first token (a chosen default)."""
POOL_FULL: Final = 0.95
"""KV / Mamba pool usage above which the engine starts to queue or retract requests."""
GPU_TEMP_C: Final = 85.0
"""GPU temperature alert bound (a chosen default)."""
RESTARTS_PER_HOUR: Final = 3
PSI_SOME_SHARE: Final = 0.2
"""Share of wall time some task waited for memory (PSI ``some``) that warns: reclaim is eating
into the engine's time (a chosen default)."""
PSI_FULL_SHARE: Final = 0.05
"""Share of wall time all tasks stalled on memory (PSI ``full``) that is critical: on unified
memory the next step is a host that no longer answers (a chosen default)."""
RULE_NAME: Final = "sparkrack"

BY: Final = ", ".join(GROUP_BY)
RANK_STS: Final = f"{contract.OBJECT_PREFIX}-.+-r[0-9]+"
"""StatefulSet names of the serving ranks (``manifests.statefulset_name``)."""
HEAD_POD: Final = f"{contract.OBJECT_PREFIX}-.+-r0-0"

# -- recording rules: one name per quantity, whatever the engine --------------------------------
GEN_RATE: Final = "sparkrack:generation_tokens:rate5m"
RUNNING: Final = "sparkrack:requests_running"
QUEUED: Final = "sparkrack:requests_waiting"
TTFT_P95: Final = "sparkrack:time_to_first_token_seconds:p95_5m"
ITL_P95: Final = "sparkrack:inter_token_latency_seconds:p95_5m"
KV_USAGE: Final = "sparkrack:kv_cache_usage:ratio"
MAMBA_USAGE: Final = "sparkrack:mamba_cache_usage:ratio"
ACCEPT_LENGTH: Final = "sparkrack:spec_accept_length"


def _either(*exprs: str) -> str:
    return "\nor ".join(f"({e})" for e in exprs)


def _rate(counter: str) -> str:
    return f"sum by ({BY}) (rate({s(counter)}[5m]))"


def _p95(histogram: str) -> str:
    return f"sum by (le, {BY}) (rate({s(histogram, '_bucket')}[5m]))"


def _sum(gauge: str) -> str:
    return f"sum by ({BY}) ({s(gauge)})"


def _max(gauge: str) -> str:
    return f"max by ({BY}) ({s(gauge)})"


def _accept(source: str | AcceptRatio) -> str:
    """An acceptance length the engine reports (a gauge) or counts (``1 + accepted / drafts``)."""
    if isinstance(source, AcceptRatio):
        return f"1 + {_rate(source.accepted)}\n  / {_rate(source.drafts)}"
    return _max(source)


def _named(source: str | AcceptRatio) -> str:
    if isinstance(source, AcceptRatio):
        raise TypeError(f"{source} is a ratio, not a metric")
    return source


# Each recording rule: its name, the engines' quantity, and how a quantity's series are aggregated.
RECORDS: Final[tuple[tuple[str, Quantity, Callable[[str | AcceptRatio], str]], ...]] = (
    (GEN_RATE, Quantity.GENERATED, lambda m: _rate(_named(m))),
    (RUNNING, Quantity.RUNNING, lambda m: _sum(_named(m))),
    (QUEUED, Quantity.QUEUED, lambda m: _sum(_named(m))),
    (TTFT_P95, Quantity.TTFT, lambda m: _p95(_named(m))),
    (ITL_P95, Quantity.ITL, lambda m: _p95(_named(m))),
    (KV_USAGE, Quantity.KV_USAGE, lambda m: _max(_named(m))),
    (MAMBA_USAGE, Quantity.MAMBA_USAGE, lambda m: _max(_named(m))),
    (ACCEPT_LENGTH, Quantity.ACCEPT_LENGTH, _accept),
)
QUANTILE: Final = frozenset({TTFT_P95, ITL_P95})
"""Recording rules whose engines' bucket rates go through one ``histogram_quantile``."""


def recording_rules() -> list[dict[str, Any]]:
    """One rule per quantity: every engine's metric of it, the first that has series wins."""
    rules = []
    for record, quantity, aggregate in RECORDS:
        parts = [
            aggregate(eng.recorded[quantity])
            for eng in ENGINES.values()
            if quantity in eng.recorded
        ]
        expr = _either(*parts) if len(parts) > 1 else parts[0]
        if record in QUANTILE:
            expr = f"histogram_quantile(0.95, {expr})"
        rules.append({"record": record, "expr": expr})
    return rules


def mamba_pool_keys() -> str:
    """The profile key that sizes the Mamba pool, of every engine that reports the pool's usage."""
    return " or ".join(
        knob.key
        for eng in ENGINES.values()
        if Quantity.MAMBA_USAGE in eng.recorded
        for knob in eng.knobs
        if knob.name == "max_mamba_cache_size"
    )


def _alert(
    name: str,
    expr: str,
    duration: str,
    severity: str,
    summary: str,
    action: str,
    **labels: str,
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": duration,
        "labels": {"severity": severity, **labels},
        "annotations": {"summary": summary, "action": action},
    }


def measured_levels(data: dict[str, Any]) -> list[tuple[int, float]]:
    """``provenance.measured`` of a profile as (concurrency, tok/s), by concurrency."""
    measured = (data.get("provenance") or {}).get("measured") or {}
    levels = []
    for key, value in measured.items():
        match = re.fullmatch(r"n(\d+)", str(key))
        if match and isinstance(value, int | float):
            levels.append((int(match.group(1)), float(value)))
    return sorted(levels)


def throughput_alerts() -> list[dict[str, Any]]:
    """One alert per shipped profile with measured figures: throughput below
    ``THROUGHPUT_FRACTION`` of the figure measured at the concurrency now running (the band from
    one measured level up to the next)."""
    out = []
    for path in list_profiles():
        profile = load_profile(path.stem)
        levels = measured_levels(profile.data)
        if not levels:
            continue
        label = contract.label_value(profile.name)
        sel = f'{{{PROFILE}="{label}"}}'
        bands = []
        for i, (level, tps) in enumerate(levels):
            upper = f" < {levels[i + 1][0]}" if i + 1 < len(levels) else ""
            bands.append(
                f"({GEN_RATE}{sel} < {THROUGHPUT_FRACTION * tps:.6g}"
                f"\n  and on({BY})\n  ({RUNNING}{sel} >= {level}{upper}))"
            )
        out.append(
            _alert(
                "SparkrackThroughputBelowMeasured",
                "\nor ".join(bands),
                "15m",
                "warning",
                f'{{{{ $labels.{DEPLOYMENT} }}}} ({profile.name}) generates {{{{ $value | printf "%.1f" }}}} tok/s, '
                f"below {THROUGHPUT_FRACTION:.0%} of the figure measured at this concurrency",
                "compare `sparkrack bench` with provenance.measured; check the MTP accept length "
                "panel, the fabric transport (fabric-check) and Spark memory pressure",
                **{PROFILE: label},
            )
        )
    return out


def alert_rules() -> list[dict[str, Any]]:
    headroom_bytes = DEFAULT_OS_HEADROOM_GB * 1e9
    return [
        _alert(
            "SparkrackRankDown",
            f'kube_statefulset_status_replicas_ready{{statefulset=~"{RANK_STS}"}}'
            f'\n< kube_statefulset_replicas{{statefulset=~"{RANK_STS}"}}',
            "10m",
            "critical",
            "serving rank {{ $labels.statefulset }} has no ready pod",
            "kubectl describe/logs the rank's pod; `sparkrack diagnose` the log",
        ),
        _alert(
            "SparkrackGroupRestartLoop",
            f'increase({s("kube_pod_container_status_restarts_total")}{{pod=~"{RANK_STS}-0"}}[1h])'
            f" >= {RESTARTS_PER_HOUR}",
            "0m",
            "critical",
            f"{{{{ $labels.pod }}}} restarted at least {RESTARTS_PER_HOUR} times in an hour",
            "read the previous container log (kubectl logs --previous) and `sparkrack diagnose` it",
        ),
        _alert(
            "SparkrackHealthGenerateFailing",
            f'increase({s("prober_probe_total")}{{probe_type="Liveness",result="failed",'
            f'pod=~"{HEAD_POD}"}}[10m]) > 0',
            "0m",
            "critical",
            "liveness probe (SGLang: /health_generate) of {{ $labels.pod }} failing",
            "the API answers but generation stalls: read the head log; the group restarts "
            "after serving_liveness_timeout",
        ),
        _alert(
            "SparkrackTTFTHigh",
            f"{TTFT_P95} > {TTFT_P95_BOUND_S:g}",
            "10m",
            "warning",
            f"p95 time to first token of {{{{ $labels.{DEPLOYMENT} }}}} is {{{{ $value }}}} s",
            "requests queue: check the running/queued panel and KV usage; lower concurrency "
            "or add a deployment",
        ),
        _alert(
            "SparkrackKVCacheNearFull",
            f"{KV_USAGE} > {POOL_FULL}",
            "10m",
            "warning",
            f"KV cache of {{{{ $labels.{DEPLOYMENT} }}}} is {{{{ $value }}}} full",
            "the engine will queue or retract requests: cap max_running_requests or give "
            "the pool more memory (`sparkrack plan`)",
        ),
        _alert(
            "SparkrackMambaPoolNearFull",
            f"{MAMBA_USAGE} > {POOL_FULL}",
            "10m",
            "warning",
            f"Mamba state pool of {{{{ $labels.{DEPLOYMENT} }}}} is {{{{ $value }}}} full",
            f"raise {mamba_pool_keys()} or lower max_running_requests (`sparkrack plan`)",
        ),
        _alert(
            "SparkrackNodeMemoryLow",
            f"{s('node_memory_MemFree_bytes')} < {headroom_bytes:.0f}",
            "5m",
            "critical",
            "{{ $labels.instance }} has {{ $value | humanize1024 }}B free, below the "
            f"planner's OS headroom of {DEFAULT_OS_HEADROOM_GB:g} GB",
            "unified memory is shared with the GPU: lower the engine's memory fraction or "
            "stop what else runs on the Spark",
        ),
        _alert(
            "SparkrackGPUXidError",
            f"max_over_time({s('DCGM_FI_DEV_XID_ERRORS')}[5m]) > 0",
            "0m",
            "critical",
            "GPU on {{ $labels.Hostname }} reported XID {{ $value }}",
            "look the XID up in NVIDIA's XID table; check dmesg; drain the Spark if it repeats",
        ),
        _alert(
            "SparkrackGPUTemperatureHigh",
            f"{s('DCGM_FI_DEV_GPU_TEMP')} > {GPU_TEMP_C:g}",
            "5m",
            "warning",
            "GPU on {{ $labels.Hostname }} at {{ $value }} C",
            "check airflow around the Spark; sustained heat throttles throughput",
        ),
        _alert(
            "SparkrackServingStalled",
            f'{WATCH}_verdict{{verdict=~"stalled|erroring"}} == 1',
            "1m",
            "critical",
            "{{ $labels.target }}: the watchdog's probe is {{ $labels.verdict }}",
            "`sparkrack status`; `sparkrack diagnose` the newest evidence bundle",
        ),
        _alert(
            "SparkrackServingWrongAnswers",
            f'{WATCH}_verdict{{verdict="{Verdict.WRONG}"}} == 1',
            "2m",
            "critical",
            "{{ $labels.target }}: tokens flow but the answer canary gets wrong answers",
            "`sparkrack bench` it (WRONG-ANSWERS per level); suspect kernels, patches, "
            "quantization or the image; the watchdog keeps it out of routing",
        ),
        _alert(
            "SparkrackWatchdogKeyRefused",
            f'{WATCH}_verdict{{verdict="{Verdict.CONFIG}"}} == 1',
            "2m",
            "warning",
            "{{ $labels.target }}: the engine refuses the watchdog's key (HTTP 401/403)",
            "a configuration error, not sickness: the watchdog restarts nothing and keeps the "
            "routing; give it the deployment's engine key (its Secret and --api-key-env)",
        ),
        _alert(
            "SparkrackNodeMemoryPressure",
            f"rate({s('node_pressure_memory_waiting_seconds_total')}[2m]) > {PSI_SOME_SHARE:g}",
            "5m",
            "warning",
            "{{ $labels.instance }}: tasks wait for memory {{ $value | humanizePercentage }} "
            "of the time (PSI some)",
            "unified memory is short: lower the engine's memory fraction or stop what else "
            "runs on the Spark before the memory guard has to",
        ),
        _alert(
            "SparkrackNodeMemoryStalled",
            f"rate({s('node_pressure_memory_stalled_seconds_total')}[2m]) > {PSI_FULL_SHARE:g}",
            "1m",
            "critical",
            "{{ $labels.instance }}: all tasks stalled on memory {{ $value | humanizePercentage }} "
            "of the time (PSI full)",
            "the host is close to wedging: the memory guard stops the largest engine pod; "
            "read its event and `sparkrack plan` the deployment with more headroom",
        ),
        _alert(
            "SparkrackRestartBudgetSpent",
            f'{WATCH}_state{{state="failed"}} == 1',
            "0m",
            "critical",
            "{{ $labels.target }}: restart budget spent, the watchdog stopped restarting",
            "`sparkrack diagnose` its evidence bundles, fix the cause, then redeploy it",
        ),
        *throughput_alerts(),
    ]


def rule_groups() -> dict[str, Any]:
    """The plain rules file."""
    return {
        "groups": [
            {"name": "sparkrack.serving.records", "rules": recording_rules()},
            {"name": "sparkrack.alerts", "rules": alert_rules()},
        ]
    }


def prometheus_rule(
    namespace: str = SERVING_DEFAULTS["serving_namespace"],
) -> dict[str, Any]:
    """The same groups as a Prometheus Operator ``PrometheusRule``."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": RULE_NAME,
            "namespace": namespace,
            "labels": {**contract.PART_OF},
        },
        "spec": rule_groups(),
    }
