"""What ``sparkrack check`` accepts, the real API server accepts (``kube_api``, server-side dry run).

The corpus (tests/preflight/test_hostile_inventories.py) shows that hostile inventories are refused
before anything renders. This is the other side of the same line: inventories at the edge of what
``check`` accepts (the bases, and one with every limit taken to its end: a 39-character deployment
name, a 63-character namespace, port 65535, a 253-character Secret name, the longest timeouts,
pre-pull Jobs) render objects that the API server creates without a word, each object and the pod
each workload would make (Pod Security and pod validation judge pods), with ``fieldValidation=
Strict`` so an unknown or duplicated field is refused too. The negative controls send the same
render with one value the corpus refuses (port 99999, a 64-character name, a namespace with an
upper-case letter, a field the API does not know) and the API server refuses it.
"""

from __future__ import annotations

import copy
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hostile_inventory_corpus import DIGEST, Entry, build, chain, mixed, setv
from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import DynamicApiError

from sparkrack import contract
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k8s.reconcile import dry_run_objects
from sparkrack.preflight.check import check_inventory
from sparkrack.serving.deployments.bundle import from_inventory, render_serving


def unique(prefix: str, length: int | None = None) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return name if length is None else (name + "x" * length)[:length]


def rendered(inv: Path) -> dict[str, Any]:
    """The objects the serve play would apply for ``inv``, after ``check`` accepted it."""
    inventory = load_inventory(inv)
    report = check_inventory(inventory, engine_check=False)
    assert report.ok, "\n".join(report.text())
    return render_serving(from_inventory(inventory, check_memory=False))


def every_object(render: dict[str, Any]) -> list[dict[str, Any]]:
    """The namespace first, then every object, every Job and every workload's pod."""
    docs = [*render["manifests"], *render["fetch"], *render["prepull"]]
    namespace = [d for d in docs if d["kind"] == "Namespace"]
    jobs = [d for d in docs if d["kind"] == "Job"]
    return namespace + dry_run_objects(docs) + jobs


def dry_run(api: client.ApiClient, objects: list[dict[str, Any]]) -> list[str]:
    """Create each object as a server-side dry run (the Namespace for real, so the namespaced
    objects have one); ``Kind/name: reason`` for each object the API server refused."""
    dyn = dynamic.DynamicClient(api)
    refused = []
    for obj in objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace")
        query = [("fieldValidation", "Strict")]
        if obj["kind"] != "Namespace":
            query.append(("dryRun", "All"))
        try:
            dyn.request("post", resource.path(namespace=namespace), body=obj, query_params=query)
        except DynamicApiError as exc:
            refused.append(f"{obj['kind']}/{obj['metadata'].get('name')}: {exc.status} {exc.body}")
            continue
        if obj["kind"] == "Namespace":
            service_account(api, obj["metadata"]["name"])
    return refused


def service_account(api: client.ApiClient, namespace: str) -> None:
    """Wait for the namespace's default ServiceAccount: pods are refused until it exists."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(namespace).items:
        assert time.monotonic() < deadline, f"{namespace}: no default ServiceAccount in 30 s"
        time.sleep(0.2)


def limits(namespace: str) -> Entry:
    """Every value at the end of its accepted form, on the 2+1+1."""
    change = chain(
        mixed(name="g" * 39),
        setv("serving_namespace", namespace),
        setv("serving_api_port", 65535),
        setv("serving_dist_port", 1),
        setv("serving_fetch_port", 64536),
        setv("serving_shm_size", "119Gi"),
        setv("serving_hf_token_secret", "s" * 253),
        setv("serving_gateway_key_secret", "k." + "k" * 251),
        setv("serving_fetch_secret", "f" * 253),
        setv("serving_startup_timeout", 604800),
        setv("serving_liveness_timeout", 1),
        setv("serving_fetch_timeout", 604800),
        setv("serving_prepull", True),
        setv("serving_prepull_timeout", 604800),
        setv("serving_fetch_image", f"registry.owner.lan:5000/sparkrack/fetch:1.0@{DIGEST}"),
        setv("serving_hf_cache", "/data/hf.cache_2+x"),
    )
    return Entry("limits", "api", "", "", change)


def base(name: str, namespace: str) -> Entry:
    return Entry(name, "api", "", "", setv("serving_namespace", namespace), base=name)


@pytest.mark.parametrize("case", ["example", "mixed", "limits"])
def test_what_check_accepts_the_api_server_creates(
    case: str, kube_api: Any, tmp_path: Path
) -> None:
    # The longest serving namespace whose agents' namespace is still a DNS label.
    longest = 63 - len(contract.AGENTS_SUFFIX)
    namespace = unique("limits", longest) if case == "limits" else unique(case)
    entry = limits(namespace) if case == "limits" else base(case, namespace)
    render = rendered(build(entry, tmp_path))
    assert render["namespace"] == namespace
    objects = every_object(render)
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "StatefulSet", "Service", "ConfigMap", "Deployment", "Pod"} <= kinds
    if case == "limits":
        assert "Job" in kinds and any(len(o["metadata"]["name"]) == 52 for o in objects)
    assert dry_run(kube_api.client(), objects) == []
    # A dry run stores nothing.
    apps = client.AppsV1Api(kube_api.client())
    assert apps.list_namespaced_stateful_set(namespace).items == []


def _set_port(objects: list[dict[str, Any]]) -> None:
    service = next(o for o in objects if o["kind"] == "Service")
    service["spec"]["ports"][0]["port"] = 99999


def _long_name(objects: list[dict[str, Any]]) -> None:
    service = next(o for o in objects if o["kind"] == "Service")
    service["metadata"]["name"] = "sparkrack-" + "g" * 54


def _unknown_field(objects: list[dict[str, Any]]) -> None:
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    sts["spec"]["template"]["spec"]["containers"][0]["shmSize"] = "32Gi"


def _bad_namespace(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        obj["metadata"]["namespace"] = "Bad_NS"


@pytest.mark.parametrize(
    ("case", "change", "reason"),
    [
        ("port 99999", _set_port, "must be between 1 and 65535"),
        ("a 64-character Service name", _long_name, "must be no more than 63 characters"),
        ("a field the API does not know", _unknown_field, "strict decoding error: unknown field"),
        ("namespace Bad_NS", _bad_namespace, "Bad_NS"),
    ],
)
def test_the_dry_run_refuses_what_the_corpus_refuses(
    case: str, change: Any, reason: str, kube_api: Any, tmp_path: Path
) -> None:
    """Negative controls: one value ``check`` refuses, put into the accepted render, is refused
    by the API server, so the dry run above can fail."""
    namespace = unique("neg")
    objects = every_object(rendered(build(base("mixed", namespace), tmp_path)))
    api = kube_api.client()
    assert dry_run(api, objects[:1]) == []  # the namespace, for real
    bad = copy.deepcopy(objects[1:])
    change(bad)
    refused = dry_run(api, bad)
    assert refused, case
    assert any(reason in line for line in refused), "\n".join(refused)
