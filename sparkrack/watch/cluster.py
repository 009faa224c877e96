"""What the watchdog reads from and does to the cluster, through the Kubernetes API.

A deployment's objects are its rank StatefulSets (one per rank,
:mod:`sparkrack.serving.objects.ranks`), their pods and its OpenAI-API Service. ``sparkrack
status`` finds them by their labels (``sparkrack.io/deployment`` and the serving component); the
watchdog, whose Role names each object it may touch (``resourceNames``), reads them by name:
given the number of ranks, every name follows (:class:`~sparkrack.serving.names.ObjectNames`).
The watchdog's own state lives in the annotations of a ConfigMap of its own (named like the
watchdog, created by the render), so a restarted watchdog keeps its restart budget, ``sparkrack
status`` reads the same facts and the watchdog patches no StatefulSet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sparkrack import contract
from sparkrack.serving.agent_settings import name as state_name
from sparkrack.serving.names import ObjectNames

LOG_TAIL_LINES = 500


def _rank(obj: Any) -> int:
    labels = obj.metadata.labels or {}
    try:
        return int(labels.get(contract.LABEL_RANK, "0"))
    except ValueError:
        return 0


@dataclass
class DeploymentView:
    """One deployment as the API holds it now."""

    name: str
    statefulsets: list[Any]
    pods: list[Any]
    api_service: Any | None
    state: Any | None = None
    """The watchdog's state ConfigMap (None: the deployment has no watchdog)."""
    watchdog: Any | None = None
    """The watchdog's Deployment (None: none, or not read: the watchdog reads no Deployment)."""

    @property
    def head(self) -> Any | None:
        return self.statefulsets[0] if self.statefulsets else None

    def annotations(self) -> dict[str, str]:
        """The watchdog's state: the annotations of its ConfigMap."""
        state = self.state
        return dict((state.metadata.annotations or {}) if state is not None else {})

    def ranks_ready(self) -> tuple[int, int]:
        ready = sum(1 for p in self.pods if _pod_ready(p))
        return ready, len(self.statefulsets)

    def pod_restarts(self) -> int:
        return sum(
            cs.restart_count or 0 for p in self.pods for cs in (p.status.container_statuses or [])
        )

    def serving(self) -> bool:
        """Every rank Ready and the API Service routable: the gateway reaches an engine."""
        ready, ranks = self.ranks_ready()
        return ready == ranks > 0 and not self.quarantined()

    def watchdog_running(self) -> bool | None:
        """Whether the watchdog's Deployment has a Ready pod (None: the deployment has none)."""
        if self.watchdog is None:
            return None
        return bool((self.watchdog.status.ready_replicas or 0) > 0)

    def quarantined(self) -> bool:
        selector = (self.api_service.spec.selector or {}) if self.api_service else {}
        return contract.LABEL_QUARANTINE in selector


def _pod_ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _absent(exc: ApiException) -> bool:
    return bool(exc.status == 404)


class Cluster:
    """The API calls of one namespace. With ``ranks`` (the watchdog, whose Role names its
    objects), a deployment's objects are read by name, never listed."""

    def __init__(self, api: client.ApiClient, namespace: str, ranks: int | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.namespace = namespace
        self.ranks = ranks

    def _selector(self, name: str) -> str:
        """The deployment's serving objects: its ranks and Services, never its watchdog (which
        carries the deployment's label too, and must survive the group restart it makes)."""
        return (
            f"{contract.LABEL_DEPLOYMENT}={name},"
            f"{contract.LABEL_COMPONENT}={contract.COMPONENT_SERVING}"
        )

    def deployment_names(self) -> list[str]:
        sets: list[Any] = self.apps.list_namespaced_stateful_set(
            self.namespace, label_selector=contract.LABEL_DEPLOYMENT
        ).items
        return sorted({s.metadata.labels[contract.LABEL_DEPLOYMENT] for s in sets})

    def _get(self, read: Any, name: str, namespace: str | None = None) -> Any | None:
        try:
            return read(name, namespace or self.namespace)
        except ApiException as exc:
            if _absent(exc):
                return None
            raise

    def state(self, name: str) -> Any | None:
        """The watchdog's state ConfigMap of deployment ``name`` (None: none)."""
        return self._get(self.core.read_namespaced_config_map, state_name(name))

    def _named(self, name: str, ranks: int) -> DeploymentView:
        names = ObjectNames.of(name)
        sets = [
            self._get(self.apps.read_namespaced_stateful_set, names.statefulset(r))
            for r in range(ranks)
        ]
        pods = [self._get(self.core.read_namespaced_pod, names.pod(r)) for r in range(ranks)]
        api = self._get(self.core.read_namespaced_service, names.api)
        return DeploymentView(
            name,
            [s for s in sets if s is not None],
            [p for p in pods if p is not None],
            api,
            self.state(name),
        )

    def view(self, name: str) -> DeploymentView:
        if self.ranks is not None:
            return self._named(name, self.ranks)
        sel = self._selector(name)
        sets: list[Any] = self.apps.list_namespaced_stateful_set(
            self.namespace, label_selector=sel
        ).items
        pods: list[Any] = self.core.list_namespaced_pod(self.namespace, label_selector=sel).items
        services: list[Any] = self.core.list_namespaced_service(
            self.namespace, label_selector=sel
        ).items
        api = next((s for s in services if s.spec.cluster_ip != "None"), None)
        # The watchdog's Deployment runs in the agents' namespace.
        agents = contract.agents_namespace(self.namespace)
        watchdog = self._get(self.apps.read_namespaced_deployment, state_name(name), agents)
        return DeploymentView(
            name, sorted(sets, key=_rank), sorted(pods, key=_rank), api, self.state(name), watchdog
        )

    def fetch_jobs(self, name: str) -> list[dict[str, str]]:
        """The deployment's weight download and copy Jobs, each with its state
        (:mod:`sparkrack.k8s.waits`: done, waiting, failed) and its progress or reason."""
        from sparkrack.k8s.waits import job_verdict

        batch = client.BatchV1Api(self.core.api_client)
        selector = (
            f"{contract.LABEL_DEPLOYMENT}={name},"
            f"{contract.LABEL_COMPONENT}={contract.COMPONENT_FETCH}"
        )
        found: list[dict[str, str]] = []
        serialize = self.core.api_client.sanitize_for_serialization
        jobs: list[Any] = batch.list_namespaced_job(self.namespace, label_selector=selector).items
        for job in sorted(jobs, key=lambda j: str(j.metadata.name)):
            pods: list[Any] = self.core.list_namespaced_pod(
                self.namespace, label_selector=f"job-name={job.metadata.name}"
            ).items
            verdict = job_verdict(serialize(job), [serialize(p) for p in pods])
            started = job.status.start_time if job.status else None
            elapsed = ""
            if started is not None and verdict.state == "waiting":
                elapsed = f", running {_duration(now() - started.timestamp())}"
            state = {"done": "Complete", "failed": "FAILED", "waiting": "running"}[verdict.state]
            found.append(
                {
                    "job": str(job.metadata.name),
                    "state": state,
                    "progress": verdict.reason + elapsed,
                }
            )
        return found

    # -- evidence --------------------------------------------------------------------------------
    def capture(self, name: str) -> tuple[dict[str, str], list[Any], list[str], tuple[str, ...]]:
        """(logs by pod, events, notes, pod names) of the deployment, rank 0 first."""
        view = self.view(name)
        logs: dict[str, str] = {}
        notes: list[str] = []
        for pod in view.pods:
            pod_name = pod.metadata.name
            for container in pod.spec.containers:
                try:
                    text = self.core.read_namespaced_pod_log(
                        pod_name,
                        self.namespace,
                        container=container.name,
                        tail_lines=LOG_TAIL_LINES,
                        timestamps=True,
                        _request_timeout=10,
                    )
                except ApiException as exc:
                    notes.append(
                        f"log of {pod_name}/{container.name}: HTTP {exc.status} {exc.reason}"
                    )
                    continue
                logs[f"{pod_name}_{container.name}"] = str(text)
        names = {p.metadata.name for p in view.pods} | {s.metadata.name for s in view.statefulsets}
        events = []
        for ev in self.core.list_namespaced_event(self.namespace).items:
            if ev.involved_object.name in names:
                events.append(
                    {
                        "time": str(
                            ev.last_timestamp or ev.event_time or ev.metadata.creation_timestamp
                        ),
                        "object": f"{ev.involved_object.kind}/{ev.involved_object.name}",
                        "type": ev.type,
                        "reason": ev.reason,
                        "message": ev.message,
                        "count": ev.count,
                    }
                )
        return logs, events, notes, tuple(p.metadata.name for p in view.pods)

    # -- actions ---------------------------------------------------------------------------------
    def restart_group(self, name: str) -> list[str]:
        """Delete every rank pod of the deployment at once: their StatefulSets create a fresh
        group (a rank restarted alone could not rejoin the old NCCL group). Returns the pods."""
        pods = self.view(name).pods
        for pod in pods:
            try:
                self.core.delete_namespaced_pod(pod.metadata.name, self.namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return [p.metadata.name for p in pods]

    def annotate(self, name: str, values: dict[str, str | None]) -> None:
        """Write the watchdog's state into its ConfigMap (the render creates it; a deployment
        rendered without a watchdog has none, and nothing is written)."""
        try:
            self.core.patch_namespaced_config_map(
                state_name(name), self.namespace, {"metadata": {"annotations": values}}
            )
        except ApiException as exc:
            if not _absent(exc):
                raise

    def set_routable(self, name: str, routable: bool) -> bool:
        """Take the deployment's API Service out of routing (a selector no pod matches) or put it
        back. Returns whether anything changed."""
        service = self.view(name).api_service
        if service is None:
            return False
        quarantined = contract.LABEL_QUARANTINE in (service.spec.selector or {})
        if quarantined == (not routable):
            return False
        value = None if routable else "true"
        self.core.patch_namespaced_service(
            service.metadata.name,
            self.namespace,
            {"spec": {"selector": {contract.LABEL_QUARANTINE: value}}},
        )
        return True

    def ready_endpoints(self, service: str) -> list[str]:
        """Addresses of the Service's ready endpoints (its EndpointSlices)."""
        discovery = client.DiscoveryV1Api(self.core.api_client)
        slices = discovery.list_namespaced_endpoint_slice(
            self.namespace, label_selector=f"kubernetes.io/service-name={service}"
        ).items
        return sorted(
            addr
            for s in slices
            for ep in s.endpoints or []
            if ep.conditions is None or ep.conditions.ready is not False
            for addr in ep.addresses
        )


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def now() -> float:
    return time.time()
