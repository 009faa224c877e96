"""Rendered objects against what a live Kubernetes API holds: the decisions the cluster plays
make before they change anything, in one place.

* :func:`dry_run_objects` — what a play sends to the API server as a server-side dry run before
  anything is removed: every object except Jobs (immutable, so replaced rather than patched;
  they are checked through their pod template) plus one Pod per workload template, because Pod
  Security admission and pod validation judge pods, not the controllers that create them.
* :func:`refusals` — one line per object the API refused: ``Kind/namespace/name: reason``.
* :func:`job_plan` — Jobs stamped with the hash of their rendered form, and the live Jobs to
  delete first: another hash, a Failed condition, or no longer rendered. An unchanged Complete
  Job is left alone, so a rerun changes nothing.
* :func:`stale_serving` — serving objects to remove: those of a deployment that left the list or
  whose profile changed (a StatefulSet's selector carries the profile and cannot change in
  place).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkrack import contract

WORKLOADS = ("StatefulSet", "Deployment", "DaemonSet", "Job")
DRY_RUN_SUFFIX = "-dry-run"
PRUNE_ORDER = contract.SERVING_PRUNE_KINDS
WATCHDOG_KINDS = (
    "DaemonSet",
    "Deployment",
    "NetworkPolicy",
    "ConfigMap",
    "RoleBinding",
    "Role",
    "ServiceAccount",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
)
"""Kinds of the watchdogs and the memory guard, in removal order (the pods first, their rights
next, then the evidence volume they wrote to, the admission policy that bounds those rights
last)."""
_MESSAGE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") or {}
    return meta if isinstance(meta, Mapping) else {}


def _ident(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    ns = meta.get("namespace")
    return f"{obj.get('kind', '?')}/{ns + '/' if ns else ''}{meta.get('name', '?')}"


def template_pod(workload: Mapping[str, Any]) -> dict[str, Any]:
    """The pod a workload's controller would create, named ``<workload>-dry-run``."""
    template = workload["spec"]["template"]
    meta = _meta(workload)
    pod_meta: dict[str, Any] = {
        "name": f"{meta['name']}{DRY_RUN_SUFFIX}",
        "labels": dict((template.get("metadata") or {}).get("labels") or {}),
    }
    if meta.get("namespace"):
        pod_meta["namespace"] = meta["namespace"]
    annotations = (template.get("metadata") or {}).get("annotations")
    if annotations:
        pod_meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template["spec"]}


def dry_run_objects(
    manifests: Iterable[Mapping[str, Any]], replaced: Iterable[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Every object to dry-run: the manifests minus Jobs, Namespaces and the objects about to be
    removed and created anew (``replaced``: ``{"kind", "name"}``), then one Pod per workload
    template (those of replaced workloads included)."""
    skip = {(str(r.get("kind")), str(r.get("name"))) for r in replaced}
    docs = [dict(m) for m in manifests]
    objects = [
        d
        for d in docs
        if d.get("kind") not in ("Job", "Namespace")
        and (str(d.get("kind")), str(_meta(d).get("name"))) not in skip
    ]
    accounts = {str(_meta(d).get("name")) for d in docs if d.get("kind") == "ServiceAccount"}
    return objects + [
        _own_account(template_pod(d), accounts) for d in docs if d.get("kind") in WORKLOADS
    ]


def _own_account(pod: dict[str, Any], applied: set[str]) -> dict[str, Any]:
    """A dry-run pod whose ServiceAccount is applied in the same run runs as the namespace's
    default one: the API refuses a pod whose account does not exist yet."""
    spec = pod["spec"]
    if spec.get("serviceAccountName") in applied:
        pod = {**pod, "spec": {**spec, "serviceAccountName": "default"}}
    return pod


def _results(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The per-object results of one kubernetes.core.k8s run (one object or a list)."""
    inner = result.get("result")
    if isinstance(inner, Mapping) and isinstance(inner.get("results"), list):
        return list(inner["results"])
    return [result]


def api_reason(message: str) -> str:
    """The API server's own words from a kubernetes.core error message."""
    found = _MESSAGE.search(message)
    if found:
        return str(json.loads(f'"{found.group(1)}"'))
    return message.strip()


def refusals(definitions: Sequence[Mapping[str, Any]], result: Mapping[str, Any]) -> list[str]:
    """``Kind/namespace/name: reason`` for every object of a ``continue_on_error`` run that the
    API refused (the results come back in the order of the definitions)."""
    lines = []
    for definition, item in zip(definitions, _results(result), strict=False):
        error = item.get("error")
        if error:
            message = str(error.get("msg", error)) if isinstance(error, Mapping) else str(error)
            lines.append(f"{_ident(definition)}: {api_reason(message)}")
    if result.get("failed") and not lines:
        lines.append(f"the API run failed: {api_reason(str(result.get('msg', '')))}")
    return lines


def spec_hash(obj: Mapping[str, Any]) -> str:
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _stamped(job: Mapping[str, Any]) -> dict[str, Any]:
    stamped = json.loads(json.dumps(job))
    meta = stamped.setdefault("metadata", {})
    meta.setdefault("annotations", {})[contract.SPEC_HASH_ANNOTATION] = spec_hash(job)
    return dict(stamped)


def _failed(job: Mapping[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)


def job_plan(
    rendered: Iterable[Mapping[str, Any]], live: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """``{"apply": [stamped Jobs and the other objects as given], "delete": [Job names]}``."""
    stamped = [_stamped(d) if d.get("kind") == "Job" else dict(d) for d in rendered]
    wanted = {
        _meta(d)["name"]: _meta(d)["annotations"][contract.SPEC_HASH_ANNOTATION]
        for d in stamped
        if d.get("kind") == "Job"
    }
    delete = []
    for job in live:
        meta = _meta(job)
        name = meta.get("name")
        current = (meta.get("annotations") or {}).get(contract.SPEC_HASH_ANNOTATION)
        if name not in wanted or current != wanted[name] or _failed(job):
            delete.append(str(name))
    return {"apply": stamped, "delete": sorted(delete)}


def _pair(obj: Mapping[str, Any]) -> tuple[str | None, str | None]:
    labels = _meta(obj).get("labels") or {}
    return labels.get(contract.LABEL_DEPLOYMENT), labels.get(contract.LABEL_PROFILE)


def stale_serving(
    rendered: Iterable[Mapping[str, Any]],
    live: Mapping[str, Iterable[Mapping[str, Any]]],
    applied_first: Iterable[Mapping[str, Any]] = (),
) -> list[dict[str, str]]:
    """Live serving objects (``live``: kind -> objects as the API lists them) whose
    (deployment, profile) labels no rendered object carries (a Secret: whose deployment no rendered
    object names), in :data:`PRUNE_ORDER`:
    ``[{"kind", "namespace", "name"}]``. Objects the play applies before it removes anything
    (``applied_first``: the switch's ConfigMaps, shared with the ranks) are updated in place,
    never removed."""
    component = {contract.LABEL_COMPONENT: contract.COMPONENT_SERVING}
    wanted = {
        _pair(d)
        for d in rendered
        if dict(_meta(d).get("labels") or {}).items() >= component.items()
    }
    kept = {(str(d.get("kind")), str(_meta(d).get("name"))) for d in applied_first}
    listed = {deployment for deployment, _ in wanted}

    def gone(kind: str, obj: Mapping[str, Any]) -> bool:
        deployment, _ = _pair(obj)
        if kind == "Secret":
            return deployment is not None and deployment not in listed
        return _pair(obj) not in wanted and (kind, str(_meta(obj).get("name"))) not in kept

    stale = [
        {
            "kind": kind,
            "namespace": str(_meta(obj).get("namespace", "")),
            "name": str(_meta(obj).get("name")),
        }
        for kind in PRUNE_ORDER
        for obj in live.get(kind, [])
        if gone(kind, obj)
    ]
    return sorted(stale, key=lambda o: (PRUNE_ORDER.index(o["kind"]), o["name"]))


def stale_watchdogs(
    live: Mapping[str, Iterable[Mapping[str, Any]]],
    deployments: Iterable[str],
    guard: bool,
    namespaces: Iterable[str] = (),
    *,
    evidence: bool,
) -> list[dict[str, str]]:
    """Live watchdog and memory-guard objects (``live``: kind -> objects, listed in every
    namespace) to remove, in :data:`WATCHDOG_KINDS` order: the watchdogs of deployments not in
    ``deployments`` (those that keep a watchdog: none when the watchdogs are off), the memory
    guard's unless ``guard``, and the evidence volume the watchdogs share (the one watchdog
    object of no deployment) unless ``evidence``. Only objects of ``namespaces`` (the serving
    namespace and the agents') and cluster-wide ones are considered; with no ``namespaces``,
    every one. A kept one is updated in place. The bundles stay on the control-plane node's
    disk: the volume is ``Retain``."""
    kept = set(deployments)
    ours = set(namespaces)

    def stale(obj: Mapping[str, Any]) -> bool:
        namespace = _meta(obj).get("namespace")
        if ours and namespace and namespace not in ours:
            return False
        labels = _meta(obj).get("labels") or {}
        if labels.get(contract.LABEL_COMPONENT) == contract.COMPONENT_MEMGUARD:
            return not guard
        if contract.LABEL_DEPLOYMENT not in labels:
            return not evidence
        return labels[contract.LABEL_DEPLOYMENT] not in kept

    return [
        {
            "kind": kind,
            "namespace": str(_meta(obj).get("namespace", "")),
            "name": str(_meta(obj).get("name")),
        }
        for kind in WATCHDOG_KINDS
        for obj in live.get(kind, [])
        if stale(obj)
    ]
