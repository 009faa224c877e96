"""The head's manifest digest on its way to the receivers (``sparkrack_head_manifest``): read
from the download container's termination message in the fetch Job's pods, written as the
deployment's manifest ConfigMap, which the receiver Jobs mount; nothing taken from any other
container or pod."""

from __future__ import annotations

from typing import Any

from sparkrack import contract
from sparkrack.adapters.ansible import FILTERS
from sparkrack.serving.switch.objects import FETCH_BACKOFF

read = FILTERS["sparkrack_head_manifest"]
DIGEST = "ab" * 32
OTHER = "cd" * 32
DEPLOYMENT = {
    "name": "gemma",
    "fetch_job": "sparkrack-gemma-fetch",
    "manifest_configmap": "sparkrack-gemma-fetch-manifest",
    "manifest_labels": {contract.LABEL_DEPLOYMENT: "gemma", contract.LABEL_PROFILE: "gemma-4"},
}


def pod(
    name: str,
    download: dict[str, Any] | None,
    push: dict[str, Any] | None = None,
    job: str = "sparkrack-gemma-fetch",
    created: str = "2026-11-26T10:00:00Z",
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if download is not None:
        status["initContainerStatuses"] = [{"name": "download", "state": download}]
    if push is not None:
        status["containerStatuses"] = [{"name": "push", "state": push}]
    return {
        "metadata": {"name": name, "labels": {"job-name": job}, "creationTimestamp": created},
        "status": status,
    }


def ended(code: int, message: str = "") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "message": message}}


def test_the_downloads_report_becomes_the_receivers_configmap() -> None:
    message = f"sparkrack-manifest {DIGEST}\nsparkrack-phase {{}}\n"
    got = read(DEPLOYMENT, [pod("p", ended(0, message))], "serving")
    assert got["state"] == "done"
    cm = got["configmap"]
    assert cm["metadata"] == {
        "name": "sparkrack-gemma-fetch-manifest",
        "namespace": "serving",
        "labels": {contract.LABEL_DEPLOYMENT: "gemma", contract.LABEL_PROFILE: "gemma-4"},
    }
    assert cm["data"] == {contract.FETCH_MANIFEST_KEY: DIGEST}


def test_only_the_download_container_of_the_deployments_fetch_job_counts() -> None:
    """The pusher (another container) and another Job's pods report nothing the play takes."""
    push_says = pod("p", {"running": {}}, push=ended(0, f"sparkrack-manifest {OTHER}"))
    other_job = pod("q", ended(0, f"sparkrack-manifest {OTHER}"), job="sparkrack-x-fetch")
    got = read(DEPLOYMENT, [push_says, other_job], "serving")
    assert got["state"] == "waiting" and got["configmap"] is None
    # Negative control: the same report from the download container is taken.
    done = pod("p", ended(0, f"sparkrack-manifest {DIGEST}"))
    assert read(DEPLOYMENT, [done, other_job], "serving")["configmap"]["data"] == {
        contract.FETCH_MANIFEST_KEY: DIGEST
    }


def test_a_download_without_a_report_or_failing_past_the_retries_fails() -> None:
    silent = read(DEPLOYMENT, [pod("p", ended(0, "sparkrack-manifest not-hex"))], "serving")
    assert silent["state"] == "failed" and "without reporting" in silent["why"]
    failing = [pod(f"p{i}", ended(1), created=f"2026-11-26T10:0{i}:00Z") for i in range(3)]
    assert read(DEPLOYMENT, failing[:FETCH_BACKOFF], "serving")["state"] == "waiting"
    assert read(DEPLOYMENT, failing[: FETCH_BACKOFF + 1], "serving")["state"] == "failed"
    # A retry that succeeds after failures is done.
    retried = [
        *failing[:2],
        pod("p9", ended(0, f"sparkrack-manifest {DIGEST}"), created="2026-11-26T11:00:00Z"),
    ]
    assert read(DEPLOYMENT, retried, "serving")["state"] == "done"


def test_the_lab_render_mounts_the_configmap_the_play_writes_and_the_prune_keeps_it() -> None:
    """Against the lab inventory's render: each receiver mounts the ConfigMap this filter
    writes and reads the key it carries, the head's download reports where the API shows it,
    and the prune of stale serving objects keeps the ConfigMap while its deployment is listed
    (negative control: once the deployment left the list, it goes)."""
    from sparkrack.k8s.reconcile import stale_serving
    from sparkrack.serving.deployments.bundle import from_inventory, render_serving

    rendered = render_serving(from_inventory("inventories/lab"))
    copying = [d for d in rendered["deployments"] if d["receiver_jobs"]]
    assert copying
    jobs = {j["metadata"]["name"]: j for j in rendered["fetch"] if j["kind"] == "Job"}
    for deployment in copying:
        head = jobs[deployment["fetch_job"]]["spec"]["template"]["spec"]
        download = next(c for c in head["initContainers"] if c["name"] == "download")
        argv = download.get("args") or download.get("command")
        assert argv[argv.index("--phases") + 1] == contract.PHASE_FILE
        for name in deployment["receiver_jobs"]:
            spec = jobs[name]["spec"]["template"]["spec"]
            volume = next(v for v in spec["volumes"] if v["name"] == "fetch-manifest")
            assert volume["configMap"] == {
                "name": deployment["manifest_configmap"],
                "optional": True,
            }
            receive = spec["containers"][0]
            argv = receive.get("args") or receive.get("command")
            path = argv[argv.index("--manifest-sha256-file") + 1]
            mount = next(m for m in receive["volumeMounts"] if m["name"] == "fetch-manifest")
            assert path == f"{mount['mountPath']}/{contract.FETCH_MANIFEST_KEY}"
        message = f"sparkrack-manifest {DIGEST}"
        made = read(deployment, [pod("p", ended(0, message), job=deployment["fetch_job"])], "ns")
        cm = made["configmap"]
        everything = rendered["manifests"] + rendered["fetch"]
        assert stale_serving(everything, {"ConfigMap": [cm]}) == []
        others = [
            d
            for d in everything
            if (d.get("metadata") or {}).get("labels", {}).get(contract.LABEL_DEPLOYMENT)
            != deployment["name"]
        ]
        assert stale_serving(others, {"ConfigMap": [cm]}) == [
            {"kind": "ConfigMap", "namespace": "ns", "name": deployment["manifest_configmap"]}
        ]
