"""What a wait of the serve play sees: done, still going, or failed for a reason that waiting
will not cure.

The serve play waits for Jobs (pre-pull, fetch, receivers) to complete, for the ranks to be
Ready and for the gateway to be Available. A plain ``wait_condition`` waits out its whole
time limit when the image cannot be pulled or the container crashes in a loop; :func:`verdict`
reads the object and its pods as the API server returns them (``k8s_info`` resources) and says
``failed`` with the object and the reason as soon as one of these shows:

* a container waiting in ``ErrImagePull``, ``ImagePullBackOff``, ``InvalidImageName``,
  ``CreateContainerConfigError`` or ``CreateContainerError`` (an image or configuration
  that will not start);
* a container in ``CrashLoopBackOff`` (it started and keeps exiting);
* a Job with the condition ``Failed`` (its backoff limit or deadline reached);
* a pod ``Failed`` that no controller will replace (a bare pod).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

PULL_FAILURES: Final = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
START_FAILURES: Final = frozenset({"CreateContainerConfigError", "CreateContainerError"})
CRASH_LOOP: Final = "CrashLoopBackOff"

State = Literal["done", "waiting", "failed"]


@dataclass(frozen=True)
class Verdict:
    state: State
    object: str
    """``Kind/name`` of what the wait is about."""
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"state": self.state, "object": self.object, "reason": self.reason}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "?"))


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = (obj.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): c for c in found if isinstance(c, Mapping)}


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    return str(_conditions(obj).get(kind, {}).get("status")) == "True"


def pod_failure(pod: Mapping[str, Any]) -> str | None:
    """Why ``pod`` will not become Ready by waiting, in one line; None while it may."""
    status = pod.get("status") or {}
    containers = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for c in containers:
        waiting = (c.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        message = " ".join(str(waiting.get("message") or "").split())[:300]
        name = c.get("name", "?")
        image = c.get("image", "?")
        if reason in PULL_FAILURES:
            return f"container {name}: {reason} for image {image}: {message}".rstrip(": ")
        if reason in START_FAILURES:
            return f"container {name}: {reason}: {message}".rstrip(": ")
        if reason == CRASH_LOOP:
            last = (c.get("lastState") or {}).get("terminated") or {}
            exit_code = last.get("exitCode", "?")
            return (
                f"container {name}: CrashLoopBackOff after {c.get('restartCount', 0)} restarts, "
                f"last exit code {exit_code} ({last.get('reason', 'unknown')})"
            )
    return None


def _pod_line(pod: Mapping[str, Any], why: str) -> str:
    node = (pod.get("spec") or {}).get("nodeName") or "no node yet"
    return f"pod {_name(pod)} on {node}: {why}"


def job_verdict(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]] = ()) -> Verdict:
    """A Job: ``done`` when Complete, ``failed`` when Failed or one of its pods cannot start."""
    where = f"Job/{_name(job)}"
    if _true(job, "Complete"):
        return Verdict("done", where, "Complete")
    if _true(job, "Failed"):
        cond = _conditions(job)["Failed"]
        return Verdict(
            "failed", where, f"Failed: {cond.get('reason', '')} {cond.get('message', '')}".strip()
        )
    for pod in pods:
        why = pod_failure(pod)
        if why:
            return Verdict("failed", where, _pod_line(pod, why))
    return Verdict("waiting", where, _progress(job))


def _progress(job: Mapping[str, Any]) -> str:
    status = job.get("status") or {}
    return (
        f"{status.get('active', 0)} active, {status.get('succeeded', 0)} succeeded, "
        f"{status.get('failed', 0)} failed pod(s)"
    )


def pod_verdict(pod: Mapping[str, Any]) -> Verdict:
    """A pod (a rank): ``done`` when Ready, ``failed`` when it cannot start or has failed."""
    where = f"Pod/{_name(pod)}"
    if _true(pod, "Ready"):
        return Verdict("done", where, "Ready")
    why = pod_failure(pod)
    if why:
        return Verdict("failed", where, _pod_line(pod, why))
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    owned = (pod.get("metadata") or {}).get("ownerReferences")
    if phase in ("Failed", "Succeeded") and not owned:
        return Verdict("failed", where, f"phase {phase}: it will not become Ready")
    return Verdict("waiting", where, f"phase {phase}")


def deployment_verdict(
    deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]] = ()
) -> Verdict:
    """A Deployment (the gateway): ``done`` when Available, ``failed`` when a pod cannot start."""
    where = f"Deployment/{_name(deployment)}"
    if _true(deployment, "Available"):
        return Verdict("done", where, "Available")
    for pod in pods:
        why = pod_failure(pod)
        if why:
            return Verdict("failed", where, _pod_line(pod, why))
    return Verdict("waiting", where, "not Available yet")


def verdict(
    objects: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]] = (), name: str = ""
) -> dict[str, str]:
    """``objects`` (what ``k8s_info`` returned for one name: one object, or none yet) and the
    pods it owns -> :meth:`Verdict.to_dict`. No object yet is ``waiting``."""
    if not objects:
        return Verdict("waiting", name or "object", "not created yet").to_dict()
    obj = objects[0]
    kind = obj.get("kind")
    if kind == "Job":
        return job_verdict(obj, pods).to_dict()
    if kind == "Pod":
        return pod_verdict(obj).to_dict()
    if kind == "Deployment":
        return deployment_verdict(obj, pods).to_dict()
    return Verdict("failed", f"{kind}/{_name(obj)}", "no wait rule for this kind").to_dict()
