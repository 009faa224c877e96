"""The shipped Prometheus rules: valid for the real promtool, and every alert fires on a
synthetic series that should fire it and stays quiet on one that should not."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.observe import rules
from sparkrack.observe.files import DATA, PROMETHEUS_RULE_FILE, RULES_FILE, rendered
from sparkrack.planner.memory import DEFAULT_OS_HEADROOM_GB

pytestmark = pytest.mark.tools  # promtool

NS = 'namespace="sparkrack"'
SUPER = "nemotron-3-super-120b-a12b-nvfp4"
SERVE = f'{NS},deployment="super",profile="{SUPER}"'
OTHER = f'{NS},deployment="other",profile="{SUPER}"'


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool not found: install Debian's prometheus package (apt-get install -y prometheus)"
        )
    return found


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120)


@functools.cache
def shipped_alerts() -> tuple[dict[str, Any], ...]:
    """The shipped alert rules, built once for the expectations below: each build loads every
    shipped profile, and the tables call for an alert's action and severity at import."""
    return tuple(rules.alert_rules())


def action(alert: str) -> str:
    for rule in shipped_alerts():
        if rule["alert"] == alert:
            return str(rule["annotations"]["action"])
    raise KeyError(alert)


def fires(alert: str, labels: dict[str, str], summary: str) -> dict[str, Any]:
    return {
        "exp_labels": {**labels, "severity": severity(alert)},
        "exp_annotations": {"summary": summary, "action": action(alert)},
    }


def severity(alert: str) -> str:
    return next(str(r["labels"]["severity"]) for r in shipped_alerts() if r["alert"] == alert)


def counter(per_minute: float, minutes: int = 40) -> str:
    return f"0+{per_minute:g}x{minutes}"


SERVE_LABELS = {"namespace": "sparkrack", "deployment": "super", "profile": SUPER}
BUCKETS = ("1", "10", "60", "+Inf")


def ttft(labels: str, slow: bool) -> list[dict[str, str]]:
    """A TTFT histogram: 10 requests a minute, all under 1 s (fast) or between 10 and 60 s."""
    out = []
    for le in BUCKETS:
        rate = 10 if (not slow or le in ("60", "+Inf")) else 0
        series = f'sglang:time_to_first_token_seconds_bucket{{{labels},le="{le}"}}'
        out.append({"series": series, "values": counter(rate)})
    return out


# alert -> (input series, eval time, expected alerts) for a firing and a quiet case each
CASES: list[tuple[str, str, list[dict[str, str]], str, list[dict[str, Any]]]] = [
    (
        "SparkrackServingStalled",
        "fires",
        [
            {
                "series": f'sparkrack_watch_verdict{{{NS},target="alpha",verdict="stalled"}}',
                "values": "1x10",
            },
            {
                "series": f'sparkrack_watch_verdict{{{NS},target="alpha",verdict="healthy"}}',
                "values": "0x10",
            },
        ],
        "5m",
        [
            fires(
                "SparkrackServingStalled",
                {"namespace": "sparkrack", "target": "alpha", "verdict": "stalled"},
                "alpha: the watchdog's probe is stalled",
            )
        ],
    ),
    (
        "SparkrackServingStalled",
        "quiet",
        [
            {
                "series": f'sparkrack_watch_verdict{{{NS},target="alpha",verdict="stalled"}}',
                "values": "0x10",
            },
            {
                "series": f'sparkrack_watch_verdict{{{NS},target="alpha",verdict="slow"}}',
                "values": "1x10",
            },
        ],
        "5m",
        [],
    ),
    (
        "SparkrackRestartBudgetSpent",
        "fires",
        [
            {
                "series": f'sparkrack_watch_state{{{NS},target="alpha",state="failed"}}',
                "values": "0 0 1x8",
            }
        ],
        "5m",
        [
            fires(
                "SparkrackRestartBudgetSpent",
                {"namespace": "sparkrack", "target": "alpha", "state": "failed"},
                "alpha: restart budget spent, the watchdog stopped restarting",
            )
        ],
    ),
    (
        "SparkrackRestartBudgetSpent",
        "quiet",
        [
            {
                "series": f'sparkrack_watch_state{{{NS},target="alpha",state="failed"}}',
                "values": "0x10",
            },
            {
                "series": f'sparkrack_watch_state{{{NS},target="alpha",state="restarting"}}',
                "values": "1x10",
            },
        ],
        "5m",
        [],
    ),
    (
        "SparkrackRankDown",
        "fires",
        [
            {
                "series": f'kube_statefulset_status_replicas_ready{{{NS},statefulset="sparkrack-super-r1"}}',
                "values": "0x20",
            },
            {
                "series": f'kube_statefulset_replicas{{{NS},statefulset="sparkrack-super-r1"}}',
                "values": "1x20",
            },
        ],
        "15m",
        [
            fires(
                "SparkrackRankDown",
                {"namespace": "sparkrack", "statefulset": "sparkrack-super-r1"},
                "serving rank sparkrack-super-r1 has no ready pod",
            )
        ],
    ),
    (
        "SparkrackRankDown",
        "quiet",
        [
            {
                "series": f'kube_statefulset_status_replicas_ready{{{NS},statefulset="sparkrack-super-r1"}}',
                "values": "1x20",
            },
            {
                "series": f'kube_statefulset_replicas{{{NS},statefulset="sparkrack-super-r1"}}',
                "values": "1x20",
            },
            # not a serving rank: ignored
            {
                "series": f'kube_statefulset_status_replicas_ready{{{NS},statefulset="grafana"}}',
                "values": "0x20",
            },
            {
                "series": f'kube_statefulset_replicas{{{NS},statefulset="grafana"}}',
                "values": "1x20",
            },
        ],
        "15m",
        [],
    ),
    (
        "SparkrackGroupRestartLoop",
        "fires",
        [
            {
                "series": f'kube_pod_container_status_restarts_total{{{NS},pod="sparkrack-super-r2-0",container="sglang"}}',
                "values": "0 0 1 1 2 2 3 3 4 4",
            }
        ],
        "9m",
        [
            fires(
                "SparkrackGroupRestartLoop",
                {"namespace": "sparkrack", "pod": "sparkrack-super-r2-0", "container": "sglang"},
                "sparkrack-super-r2-0 restarted at least 3 times in an hour",
            )
        ],
    ),
    (
        "SparkrackGroupRestartLoop",
        "quiet",
        [
            {
                "series": f'kube_pod_container_status_restarts_total{{{NS},pod="sparkrack-super-r2-0",container="sglang"}}',
                "values": "0 0 1 1 1 1 1 1 1 1",
            }
        ],
        "9m",
        [],
    ),
    (
        "SparkrackHealthGenerateFailing",
        "fires",
        [
            {
                "series": f'prober_probe_total{{{NS},pod="sparkrack-super-r0-0",container="sglang",probe_type="Liveness",result="failed"}}',
                "values": "0 0 0 1 2 3",
            }
        ],
        "5m",
        [
            fires(
                "SparkrackHealthGenerateFailing",
                {
                    "namespace": "sparkrack",
                    "pod": "sparkrack-super-r0-0",
                    "container": "sglang",
                    "probe_type": "Liveness",
                    "result": "failed",
                },
                "liveness probe (SGLang: /health_generate) of sparkrack-super-r0-0 failing",
            )
        ],
    ),
    (
        "SparkrackHealthGenerateFailing",
        "quiet",
        [
            {
                "series": f'prober_probe_total{{{NS},pod="sparkrack-super-r0-0",container="sglang",probe_type="Liveness",result="failed"}}',
                "values": "0x5",
            },
            {
                "series": f'prober_probe_total{{{NS},pod="sparkrack-super-r0-0",container="sglang",probe_type="Liveness",result="successful"}}',
                "values": "0+2x5",
            },
            # a worker rank's guard probe failing is the restart alert's business, not this one
            {
                "series": f'prober_probe_total{{{NS},pod="sparkrack-super-r1-0",container="sglang",probe_type="Liveness",result="failed"}}',
                "values": "0+1x5",
            },
        ],
        "5m",
        [],
    ),
    (
        "SparkrackTTFTHigh",
        "fires",
        ttft(SERVE, slow=True),
        "25m",
        [fires("SparkrackTTFTHigh", SERVE_LABELS, "p95 time to first token of super is 57.5 s")],
    ),
    ("SparkrackTTFTHigh", "quiet", ttft(SERVE, slow=False), "25m", []),
    (
        "SparkrackKVCacheNearFull",
        "fires",
        [
            {"series": f'sglang:token_usage{{{SERVE},tp_rank="0"}}', "values": "0.97x20"},
            {"series": f'vllm:kv_cache_usage_perc{{{OTHER},engine="0"}}', "values": "0.99x20"},
        ],
        "15m",
        [
            fires("SparkrackKVCacheNearFull", SERVE_LABELS, "KV cache of super is 0.97 full"),
            fires(
                "SparkrackKVCacheNearFull",
                {**SERVE_LABELS, "deployment": "other"},
                "KV cache of other is 0.99 full",
            ),
        ],
    ),
    (
        "SparkrackKVCacheNearFull",
        "quiet",
        [
            {"series": f'sglang:token_usage{{{SERVE},tp_rank="0"}}', "values": "0.97x5 0.5x15"},
            {"series": f'vllm:kv_cache_usage_perc{{{OTHER},engine="0"}}', "values": "0.9x20"},
        ],
        "15m",
        [],
    ),
    (
        "SparkrackMambaPoolNearFull",
        "fires",
        [{"series": f'sglang:mamba_usage{{{SERVE},tp_rank="0"}}', "values": "0.96x20"}],
        "15m",
        [
            fires(
                "SparkrackMambaPoolNearFull", SERVE_LABELS, "Mamba state pool of super is 0.96 full"
            )
        ],
    ),
    (
        "SparkrackMambaPoolNearFull",
        "quiet",
        [{"series": f'sglang:mamba_usage{{{SERVE},tp_rank="0"}}', "values": "0.6x20"}],
        "15m",
        [],
    ),
    (
        "SparkrackNodeMemoryLow",
        "fires",
        [
            {
                "series": 'node_memory_MemFree_bytes{instance="spark-1:9100"}',
                "values": f"{(DEFAULT_OS_HEADROOM_GB - 4) * 1e9:.0f}x10",
            }
        ],
        "8m",
        [
            fires(
                "SparkrackNodeMemoryLow",
                {"instance": "spark-1:9100"},
                f"spark-1:9100 has 3.725GiB free, below the planner's OS headroom of {DEFAULT_OS_HEADROOM_GB:g} GB",
            )
        ],
    ),
    (
        "SparkrackNodeMemoryLow",
        "quiet",
        [
            {
                "series": 'node_memory_MemFree_bytes{instance="spark-1:9100"}',
                "values": f"{(DEFAULT_OS_HEADROOM_GB + 1) * 1e9:.0f}x10",
            }
        ],
        "8m",
        [],
    ),
    (
        "SparkrackGPUXidError",
        "fires",
        [{"series": 'DCGM_FI_DEV_XID_ERRORS{Hostname="spark-1",gpu="0"}', "values": "0 0 79 0 0"}],
        "4m",
        [
            fires(
                "SparkrackGPUXidError",
                {"Hostname": "spark-1", "gpu": "0"},
                "GPU on spark-1 reported XID 79",
            )
        ],
    ),
    (
        "SparkrackGPUXidError",
        "quiet",
        [{"series": 'DCGM_FI_DEV_XID_ERRORS{Hostname="spark-1",gpu="0"}', "values": "0x5"}],
        "4m",
        [],
    ),
    (
        "SparkrackGPUTemperatureHigh",
        "fires",
        [{"series": 'DCGM_FI_DEV_GPU_TEMP{Hostname="spark-1",gpu="0"}', "values": "91x10"}],
        "8m",
        [
            fires(
                "SparkrackGPUTemperatureHigh",
                {"Hostname": "spark-1", "gpu": "0"},
                "GPU on spark-1 at 91 C",
            )
        ],
    ),
    (
        "SparkrackGPUTemperatureHigh",
        "quiet",
        [{"series": 'DCGM_FI_DEV_GPU_TEMP{Hostname="spark-1",gpu="0"}', "values": "70x10"}],
        "8m",
        [],
    ),
]


def verdicts(now: str, minutes: int = 10) -> list[dict[str, str]]:
    """The watchdog's verdict series of target alpha, ``now`` being 1 for ``minutes``."""
    return [
        {
            "series": f'sparkrack_watch_verdict{{{NS},target="alpha",verdict="{v}"}}',
            "values": f"{int(v == now)}x{minutes}",
        }
        for v in ("healthy", "stalled", "wrong-answers", "config-error")
    ]


def psi(kind: str, share: float, minutes: int = 10) -> list[dict[str, str]]:
    """A node's PSI counter growing by ``share`` seconds per second (60 x share a minute)."""
    name = {"some": "waiting", "full": "stalled"}[kind]
    series = f'node_pressure_memory_{name}_seconds_total{{instance="spark-1:9100"}}'
    return [{"series": series, "values": counter(60 * share, minutes)}]


NODE = {"instance": "spark-1:9100"}
CASES += [
    (
        "SparkrackServingWrongAnswers",
        "fires",
        verdicts("wrong-answers"),
        "5m",
        [
            fires(
                "SparkrackServingWrongAnswers",
                {"namespace": "sparkrack", "target": "alpha", "verdict": "wrong-answers"},
                "alpha: tokens flow but the answer canary gets wrong answers",
            )
        ],
    ),
    # a stall is the stall alert's, a healthy stream nobody's
    ("SparkrackServingWrongAnswers", "quiet", verdicts("stalled"), "5m", []),
    (
        "SparkrackWatchdogKeyRefused",
        "fires",
        verdicts("config-error"),
        "5m",
        [
            fires(
                "SparkrackWatchdogKeyRefused",
                {"namespace": "sparkrack", "target": "alpha", "verdict": "config-error"},
                "alpha: the engine refuses the watchdog's key (HTTP 401/403)",
            )
        ],
    ),
    # a refused key is not a stall, and a stall is not a refused key
    ("SparkrackServingStalled", "quiet", verdicts("config-error"), "5m", []),
    ("SparkrackWatchdogKeyRefused", "quiet", verdicts("stalled"), "5m", []),
    ("SparkrackServingWrongAnswers", "quiet", verdicts("healthy"), "5m", []),
    (
        "SparkrackNodeMemoryPressure",
        "fires",
        psi("some", 0.5),
        "9m",
        [
            fires(
                "SparkrackNodeMemoryPressure",
                NODE,
                "spark-1:9100: tasks wait for memory 50% of the time (PSI some)",
            )
        ],
    ),
    ("SparkrackNodeMemoryPressure", "quiet", psi("some", 0.1), "9m", []),
    (
        "SparkrackNodeMemoryStalled",
        "fires",
        psi("full", 0.25),
        "5m",
        [
            fires(
                "SparkrackNodeMemoryStalled",
                NODE,
                "spark-1:9100: all tasks stalled on memory 25% of the time (PSI full)",
            )
        ],
    ),
    ("SparkrackNodeMemoryStalled", "quiet", psi("full", 0.02), "5m", []),
    # "some" pressure alone is not a stall of every task
    ("SparkrackNodeMemoryStalled", "quiet", psi("some", 0.9), "5m", []),
]


def throughput_case(running: int, tok_s: float) -> list[dict[str, str]]:
    return [
        {"series": f'sglang:num_running_reqs{{{SERVE},tp_rank="0"}}', "values": f"{running}x40"},
        {"series": f"sglang:generation_tokens_total{{{SERVE}}}", "values": counter(tok_s * 60)},
    ]


def throughput_fires(value: str) -> dict[str, Any]:
    summary = f"super ({SUPER}) generates {value} tok/s, below 70% of the figure measured at this concurrency"
    return fires("SparkrackThroughputBelowMeasured", {**SERVE_LABELS}, summary)


# The profile's measured figures (n1 53.99, n4 136.8, n8 199.7 tok/s): at 4 running requests
# 80 tok/s is under 70% of 136.8; at 2 running the n1 band applies and 40 tok/s is fine.
CASES += [
    (
        "SparkrackThroughputBelowMeasured",
        "fires",
        throughput_case(4, 80),
        "25m",
        [throughput_fires("80.0")],
    ),
    ("SparkrackThroughputBelowMeasured", "quiet", throughput_case(4, 120), "25m", []),
    ("SparkrackThroughputBelowMeasured", "quiet", throughput_case(2, 40), "25m", []),
    (
        "SparkrackThroughputBelowMeasured",
        "fires",
        throughput_case(9, 120),
        "25m",
        [throughput_fires("120.0")],
    ),
]


def unit_tests(
    cases: list[tuple[str, str, list[dict[str, str]], str, list[dict[str, Any]]]],
) -> dict[str, Any]:
    return {
        "rule_files": [str(DATA / RULES_FILE)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": f"{alert} {kind} #{i}",
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}],
            }
            for i, (alert, kind, series, at, expected) in enumerate(cases)
        ],
    }


def test_shipped_files_are_what_the_generator_renders() -> None:
    for rel, text in rendered().items():
        assert (DATA / rel).read_text() == text, f"{rel} is stale: run python -m sparkrack.observe"


def test_promtool_accepts_the_rules_file() -> None:
    proc = run_promtool("check", "rules", str(DATA / RULES_FILE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        f"SUCCESS: {sum(len(g['rules']) for g in rules.rule_groups()['groups'])} rules"
        in proc.stdout
    )


def test_prometheusrule_carries_the_same_groups(tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all((DATA / PROMETHEUS_RULE_FILE).read_text()) if d]
    [doc] = docs
    assert doc["kind"] == "PrometheusRule"
    assert doc["spec"] == yaml.safe_load((DATA / RULES_FILE).read_text())
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(doc["spec"]))
    assert run_promtool("check", "rules", str(spec)).returncode == 0


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    """Negative control: the check can fail."""
    groups = rules.rule_groups()
    groups["groups"][1]["rules"][0]["expr"] = "sum by (deployment (broken"
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump(groups))
    proc = run_promtool("check", "rules", str(bad))
    assert proc.returncode != 0


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = {r["alert"] for r in rules.alert_rules()}
    for kind in ("fires", "quiet"):
        assert {a for a, k, *_ in CASES if k == kind} == alerts


def test_alerts_fire_and_stay_quiet_on_synthetic_series(tmp_path: Path) -> None:
    spec = tmp_path / "tests.yml"
    spec.write_text(yaml.safe_dump(unit_tests(CASES), sort_keys=False))
    proc = run_promtool("test", "rules", str(spec))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_promtool_test_fails_when_an_expected_alert_is_absent(tmp_path: Path) -> None:
    """Negative control: a quiet series with a firing expectation fails promtool test."""
    quiet = [c for c in CASES if c[0] == "SparkrackKVCacheNearFull" and c[1] == "quiet"][0]
    firing = [c for c in CASES if c[0] == "SparkrackKVCacheNearFull" and c[1] == "fires"][0]
    spec = tmp_path / "tests.yml"
    spec.write_text(
        yaml.safe_dump(unit_tests([(quiet[0], quiet[1], quiet[2], quiet[3], firing[4])]))
    )
    assert run_promtool("test", "rules", str(spec)).returncode != 0


def test_node_memory_bound_is_the_planner_headroom() -> None:
    [rule] = [r for r in rules.alert_rules() if r["alert"] == "SparkrackNodeMemoryLow"]
    assert rule["expr"].endswith(f"< {DEFAULT_OS_HEADROOM_GB * 1e9:.0f}")


def test_every_profile_with_measured_figures_has_a_throughput_alert() -> None:
    from sparkrack.serving import list_profiles, load_profile

    measured = {
        load_profile(p.stem).name
        for p in list_profiles()
        if rules.measured_levels(load_profile(p.stem).data)
    }
    alerted = {r["labels"]["profile"] for r in rules.throughput_alerts()}
    assert measured and alerted == measured
