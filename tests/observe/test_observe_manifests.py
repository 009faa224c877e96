"""Rendered manifests of every shipped profile expose the engine's metrics to Prometheus."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrack import contract
from sparkrack.inputs.inventory import load_inventory
from sparkrack.observe.scrape import DEPLOYMENT, PROFILE, scrape_config
from sparkrack.serving import (
    ServingContext,
    context_from_vars,
    engine_of,
    list_profiles,
    load_profile,
    render_manifests,
    resolve,
)
from sparkrack.serving.objects.ranks import pod_monitor

SHIPPED = [p.stem for p in list_profiles()]


@pytest.fixture(scope="module")
def ctx() -> ServingContext:
    return context_from_vars(load_inventory("inventories/example").plan(), {})


def rank_pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["labels"][contract.LABEL_RANK]: d["spec"]["template"]
        for d in docs
        if d["kind"] == "StatefulSet"
    }


@pytest.mark.parametrize("name", SHIPPED)
def test_head_pod_is_annotated_for_scraping(name: str, ctx: ServingContext) -> None:
    profile = load_profile(name)
    eng = engine_of(profile.data)
    pods = rank_pods(render_manifests(profile, ctx))
    head = pods.pop("0")
    notes = head["metadata"].get("annotations", {})
    if eng.metrics_path is None:
        assert contract.PROMETHEUS_SCRAPE_ANNOTATION not in notes
        assert pod_monitor(resolve(profile, ctx)) is None
        return
    assert notes[contract.PROMETHEUS_SCRAPE_ANNOTATION] == "true"
    assert notes[contract.PROMETHEUS_PATH_ANNOTATION] == eng.metrics_path
    # the port of any container of the pod (a gated engine's gate names the API port)
    ports = {p["name"]: p["containerPort"] for c in head["spec"]["containers"] for p in c["ports"]}
    assert notes[contract.PROMETHEUS_PORT_ANNOTATION] == str(ports[eng.metrics_port])
    # workers run no HTTP server: never a scrape target
    for pod in pods.values():
        assert contract.PROMETHEUS_SCRAPE_ANNOTATION not in pod["metadata"].get("annotations", {})


@pytest.mark.parametrize("name", SHIPPED)
def test_metrics_are_switched_on(name: str, ctx: ServingContext) -> None:
    """SGLang serves /metrics only with --enable-metrics; vLLM always does."""
    profile = load_profile(name)
    eng = engine_of(profile.data)
    head = rank_pods(render_manifests(profile, ctx))["0"]
    argv = head["spec"]["containers"][0]["args"]
    switches = [k.flag for k in eng.knobs if k.key == "runtime.metrics"]
    assert all(flag in argv for flag in switches)
    assert ("--enable-metrics" in argv) == (eng.name == "sglang")


def test_every_engine_is_scraped(ctx: ServingContext) -> None:
    engines = {
        engine_of(load_profile(n).data).name: engine_of(load_profile(n).data) for n in SHIPPED
    }
    assert {n for n, e in engines.items() if e.metrics_path} == {"sglang", "trtllm", "vllm"}


@pytest.mark.parametrize("name", SHIPPED)
def test_pod_monitor_selects_the_head_and_labels_series(name: str, ctx: ServingContext) -> None:
    profile = load_profile(name)
    monitor = pod_monitor(resolve(profile, ctx))
    if monitor is None:
        return
    docs = render_manifests(profile, ctx)
    head = rank_pods(docs)["0"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= head["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    targets = {r["targetLabel"] for r in endpoint["relabelings"]}
    assert {DEPLOYMENT, PROFILE} <= targets


def test_scrape_job_keeps_annotated_pods_and_copies_labels() -> None:
    job = scrape_config()
    keep = job["relabel_configs"][0]
    assert keep["action"] == "keep" and keep["source_labels"] == [
        "__meta_kubernetes_pod_annotation_prometheus_io_scrape"
    ]
    copied = {r["target_label"]: r["source_labels"][0] for r in job["relabel_configs"][3:]}
    assert copied[DEPLOYMENT] == "__meta_kubernetes_pod_label_sparkrack_io_deployment"
    assert copied[PROFILE] == "__meta_kubernetes_pod_label_sparkrack_io_profile"


TRTLLM = "nemotron-3-super-120b-a12b-nvfp4-trtllm"


def test_trtllm_is_scraped_on_its_prometheus_path_with_the_switch_on(ctx: ServingContext) -> None:
    """trtllm-serve's /metrics is JSON; its Prometheus endpoint is /prometheus/metrics and exists
    only with return_perf_metrics in its LLM API config: the annotation, the PodMonitor and the
    rendered config agree."""
    import yaml

    profile = load_profile(TRTLLM)
    eng = engine_of(profile.data)
    assert eng.name == "trtllm" and eng.metrics_path == "/prometheus/metrics"
    docs = render_manifests(profile, ctx)
    head = rank_pods(docs)["0"]
    assert head["metadata"]["annotations"][contract.PROMETHEUS_PATH_ANNOTATION] == (
        "/prometheus/metrics"
    )
    monitor = pod_monitor(resolve(profile, ctx))
    assert monitor is not None
    assert [e["path"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["/prometheus/metrics"]
    [config_map] = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and any(k.endswith(".yml") for k in d.get("data", {}))
    ]
    [text] = [v for k, v in config_map["data"].items() if k.endswith(".yml")]
    assert yaml.safe_load(text)["return_perf_metrics"] is True
    assert eng.table_problems(head["spec"]["containers"][0]["args"], profile) == []


def test_the_metrics_switch_is_checked_against_the_release_table() -> None:
    """Negative control: a misspelt switch is refused by the source table of the release."""
    from sparkrack.serving.engines.trtllm import table_check

    assert table_check([], {"return_perf_metrics": True}) == []
    [problem] = table_check([], {"return_perf_metric": True})
    assert "unknown key 'return_perf_metric'" in problem
