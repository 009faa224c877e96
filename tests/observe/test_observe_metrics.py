"""Every engine metric the rules and dashboards use is declared, with the same type, in the
real wheel of every engine version the shipped images run."""

from __future__ import annotations

import re
import zipfile

import pytest
from patch_fixtures import wheel_path

from sparkrack.observe.metrics import METRICS, Metric

pytestmark = pytest.mark.tools  # real engine wheels

ENGINE_METRICS = [m for m in METRICS if m.versions]
CONSTRUCTORS = {
    "counter": r"(?:Counter|_counter_cls)",
    "gauge": r"(?:Gauge|_gauge_cls)",
    "histogram": r"(?:Histogram|_histogram_cls)",
}


def declared(source: str, metric: Metric) -> bool:
    """True when ``source`` constructs a prometheus_client metric of ``metric``'s name and type."""
    ctor = CONSTRUCTORS[metric.kind]
    pattern = rf'{ctor}\(\s*name\s*=\s*"{re.escape(metric.name)}"'
    return re.search(pattern, source) is not None


def wheel_source(dist: str, version: str, path: str) -> str:
    with zipfile.ZipFile(wheel_path(dist, version)) as wheel:
        return wheel.read(path).decode()


CHECKS = sorted({(m.exporter, v, m.source) for m in ENGINE_METRICS for v in m.versions})


@pytest.mark.parametrize(("dist", "version", "path"), CHECKS)
def test_engine_metrics_are_declared_in_the_wheel(dist: str, version: str, path: str) -> None:
    source = wheel_source(dist, version, path)
    wanted = [m for m in ENGINE_METRICS if m.exporter == dist and m.source == path]
    missing = [f"{m.name} ({m.kind})" for m in wanted if not declared(source, m)]
    assert wanted and not missing, f"{dist}=={version} {path} lacks {missing}"


def test_the_check_refuses_a_name_or_type_the_wheel_lacks() -> None:
    """Negative controls: an invented name, and a real name under the wrong type."""
    source = wheel_source("sglang", "0.5.10", "sglang/srt/observability/metrics_collector.py")
    real = Metric("sglang:token_usage", "gauge", "sglang", "", ("0.5.10",))
    assert declared(source, real)
    assert not declared(source, Metric("sglang:tokens_per_joule", "gauge", "sglang", ""))
    assert not declared(source, Metric("sglang:token_usage", "counter", "sglang", ""))


def test_series_names_follow_prometheus_client() -> None:
    counter = Metric("vllm:generation_tokens", "counter", "vllm", "")
    assert counter.series() == ("vllm:generation_tokens_total",)
    assert Metric("sglang:generation_tokens_total", "counter", "sglang", "").series() == (
        "sglang:generation_tokens_total",
    )
    hist = Metric("x_seconds", "histogram", "vllm", "").series()
    assert hist == ("x_seconds_bucket", "x_seconds_sum", "x_seconds_count")


def test_engine_versions_cover_the_shipped_images() -> None:
    from sparkrack.serving.engines import ENGINES

    for eng in ENGINES.values():
        table = {v for m in eng.metrics for v in m.versions}
        if eng.metrics_path is None:
            assert not table  # no verified Prometheus endpoint: nothing read from it
            continue
        if not eng.metrics:  # scraped, but no series of it read by name (TRT-LLM)
            continue
        assert {facts.version for facts in eng.images.values()} <= table


def test_every_engine_metric_is_listed_once_and_every_recorded_one_is_a_metric() -> None:
    from sparkrack.serving.engines import ENGINES
    from sparkrack.serving.engines.facts import AcceptRatio

    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for eng in ENGINES.values():
        own = {m.name for m in eng.metrics}
        for source in eng.recorded.values():
            wanted = (
                [source.accepted, source.drafts] if isinstance(source, AcceptRatio) else [source]
            )
            assert set(wanted) <= own, f"{eng.name} records {wanted} it does not list"
