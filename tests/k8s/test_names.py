"""The API server's rules beyond the schemas: names per kind, labels, images, ports, and no
name taken twice; each rule with a planted violation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sparkrack.k8s.names import name_problems
from sparkrack.serving.deployments.bundle import from_inventory, in_apply_order, render_serving


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return in_apply_order(render_serving(from_inventory("inventories/lab")))


def kind(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return copy.deepcopy(next(d for d in docs if d["kind"] == name))


def test_the_lab_renders_pass(docs: list[dict[str, Any]]) -> None:
    assert name_problems(docs, "lab") == []


def planted(doc: dict[str, Any], change: Any) -> list[str]:
    change(doc)
    return [f"{p.key}: {p.message}" for p in name_problems([doc], "x")]


def test_planted_violations_are_found(docs: list[dict[str, Any]]) -> None:
    sts = kind(docs, "StatefulSet")
    long_name = "sparkrack-" + "a" * 40 + "-r0"  # 53 characters
    assert "never gets a pod" in planted(sts, lambda d: d["metadata"].update(name=long_name))[0]
    svc = kind(docs, "Service")
    assert (
        "DNS label starting with a letter"
        in planted(svc, lambda d: d["metadata"].update(name="9svc"))[0]
    )
    pod = kind(docs, "StatefulSet")
    containers = pod["spec"]["template"]["spec"]["containers"]
    assert "image '' is empty" in planted(pod, lambda d: containers[0].update(image=""))[0]
    job = kind(docs, "Job") if any(d["kind"] == "Job" for d in docs) else kind(docs, "ConfigMap")
    assert "label" in planted(job, lambda d: d["metadata"]["labels"].update(x="v" * 64))[0]
    port = kind(docs, "Service")
    assert (
        "IANA service name"
        in planted(port, lambda d: d["spec"]["ports"][0].update(name="a-very-long-port-name"))[0]
    )


def test_a_name_taken_twice_names_both_owners(docs: list[dict[str, Any]]) -> None:
    svc = kind(docs, "Service")
    twin = copy.deepcopy(svc)
    twin["metadata"]["labels"]["sparkrack.io/deployment"] = "other"
    [problem] = name_problems([svc, twin], "inv.yml")
    assert "rendered twice" in problem.message and "deployment other" in problem.message
