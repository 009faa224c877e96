"""Where a switch's time went: the serve play's timeline of one deployment, measured vs predicted.

Sources, each named in the table:

* **API** - what the play waited on, from the objects' own times: the pre-pull Jobs and the fetch
  Job (``status.startTime`` -> ``completionTime``), each rank's engine load (its container's
  ``startedAt`` -> the pod's ``Ready`` condition);
* **pod** - the phases the fetch step measured inside its containers (download, verify, copy per
  peer and rail, peer-verify per peer, wait-weights, wait-memory): its phase records in the
  containers' termination messages (:func:`sparkrack.serving.scripts.fetch_base.read_phases`);
  in a chain also each relaying receiver's hop (``relay`` from the API: the first peer's verdict,
  which ends the fetch Job, to the last receiver Job's end).
  A container that left no record (a KWOK pod runs no container) shows ``not measured``, never a
  number;
* **play** - ``ready``: from the moment the play started the switch to the last rank Ready.

The predicted column is the switch estimate the render carries (``predicted``,
:func:`sparkrack.serving.switch.plan.estimate`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sparkrack.planner.switch import CHAIN, total_seconds
from sparkrack.serving.scripts.fetch_base import read_phases

NOT_MEASURED = "not measured"
EARLIER_S = 5.0
"""A Job that started this long before the play's switch began ran in an earlier switch."""


@dataclass(frozen=True)
class Row:
    phase: str
    where: str
    seconds: float | None
    """None: not measured (``note`` says why)."""
    source: str
    nbytes: int | None = None
    note: str = ""
    predicted: float | None = None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _span(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else max(0.0, (end - start).total_seconds())


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _statuses(pod: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    status = pod.get("status") or {}
    yield from status.get("initContainerStatuses") or []
    yield from status.get("containerStatuses") or []


def _records(pod: Mapping[str, Any], container: str) -> list[dict[str, object]]:
    for cs in _statuses(pod):
        if cs.get("name") == container:
            terminated = (cs.get("state") or {}).get("terminated") or {}
            return read_phases(str(terminated.get("message") or ""))
    return []


def _job_pods(pods: Sequence[Mapping[str, Any]], job: str) -> list[Mapping[str, Any]]:
    """The pods of Job ``job``, newest last (a retried Job has several)."""
    mine = [
        p
        for p in pods
        if (
            ((p.get("metadata") or {}).get("labels") or {}).get("batch.kubernetes.io/job-name")
            or ((p.get("metadata") or {}).get("labels") or {}).get("job-name")
        )
        == job
    ]
    return sorted(mine, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")))


def _predicted(deployment: Mapping[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for item in deployment.get("predicted") or []:
        seconds = item.get("seconds")
        out[str(item.get("phase"))] = None if seconds is None else float(seconds)
    return out


def rows(
    deployment: Mapping[str, Any],
    jobs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    prepull: Sequence[str] = (),
    started: str | None = None,
) -> list[Row]:
    """The timeline of one deployment (its render facts: ``fetch_job``, ``copy_to``, ``pods``,
    ``predicted``) from the live Jobs and Pods and the time the play started the switch."""
    predicted = _predicted(deployment)
    begun = _time(started)
    by_name = {_name(j): j for j in jobs}
    out: list[Row] = []

    def job_span(names: Sequence[str]) -> tuple[float | None, str]:
        found = [by_name[n] for n in names if n in by_name]
        starts = [_time((j.get("status") or {}).get("startTime")) for j in found]
        ends = [_time((j.get("status") or {}).get("completionTime")) for j in found]
        if not found or None in starts or None in ends:
            return None, "no completed Job found"
        first = min(s for s in starts if s is not None)
        seconds = _span(first, max(e for e in ends if e is not None))
        earlier = begun is not None and (begun - first).total_seconds() > EARLIER_S
        return seconds, "unchanged: ran in an earlier switch" if earlier else ""

    if prepull:
        seconds, note = job_span(prepull)
        out.append(Row("pre-pull", f"{len(prepull)} Job(s)", seconds, "API", note=note))
    else:
        out.append(Row("pre-pull", "-", None, "play", note="off (serving_prepull: false)"))
    fetch_job = str(deployment.get("fetch_job", ""))
    seconds, note = job_span([fetch_job])
    out.append(Row("fetch Job", fetch_job, seconds, "API", note=note or "download + verify + copy"))
    fetch_pods = _job_pods(pods, fetch_job)
    head = fetch_pods[-1] if fetch_pods else {}
    for phase in ("download", "verify"):
        got = [r for r in _records(head, "download") if r["phase"] == phase]
        out.append(_from_records(phase, "head", got, predicted.get(phase)))
    peers = [str(p) for p in deployment.get("copy_to") or []]
    chain = deployment.get("copy_shape") == CHAIN
    receivers = [str(j) for j in deployment.get("receiver_jobs") or []]
    if peers:
        push = _records(head, "push")
        if chain:
            for job in receivers:
                pods_of = _job_pods(pods, job)
                push += _records(pods_of[-1], "receive") if pods_of else []
        for phase, estimate in (("copy", "copy rail 0"), ("peer-verify", "peer-verify")):
            if not any(r["phase"] == phase for r in push):
                out.append(
                    Row(
                        phase,
                        ", ".join(peers),
                        None,
                        "pod",
                        note=f"{NOT_MEASURED}: the push left no phase record",
                        predicted=predicted.get(estimate),
                    )
                )
        copies = [r for r in push if r["phase"] == "copy"]
        for r in sorted(copies, key=lambda r: (int(str(r.get("rail", 0))), str(r.get("peer")))):
            rail = int(str(r.get("rail", 0)))
            out.append(
                Row(
                    f"copy rail {rail}",
                    _hop(r),
                    float(str(r["seconds"])),
                    "pod",
                    int(str(r.get("bytes", 0))),
                    predicted=predicted.get(f"copy rail {rail}"),
                )
            )
        checks = [r for r in push if r["phase"] == "peer-verify"]
        for r in sorted(checks, key=lambda r: str(r.get("peer"))):
            out.append(
                Row(
                    "peer-verify",
                    _hop(r),
                    float(str(r["seconds"])),
                    "pod",
                    predicted=predicted.get("peer-verify"),
                )
            )
        if chain:
            out.append(_relay_row(by_name, fetch_job, receivers, peers, predicted.get("relay")))
    ranks = [p for p in pods if _name(p) in set(deployment.get("pods") or [])]
    for phase, container in (("wait-weights", "wait-weights"), ("wait-memory", "wait-memory")):
        waits = [
            (r, _name(p)) for p in ranks for r in _records(p, container) if r["phase"] == phase
        ]
        if waits:
            record, where = max(waits, key=lambda g: float(str(g[0]["seconds"])))
            out.append(
                Row(
                    phase,
                    f"{where} (longest of {len(waits)})",
                    float(str(record["seconds"])),
                    "pod",
                    predicted=predicted.get(phase),
                )
            )
        else:
            out.append(
                Row(
                    phase,
                    "ranks",
                    None,
                    "pod",
                    note=f"{NOT_MEASURED}: no rank left a phase record",
                    predicted=predicted.get(phase),
                )
            )
    loads, readies = [], []
    for p in ranks:
        ready = next(
            (
                _time(c.get("lastTransitionTime"))
                for c in (p.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready" and c.get("status") == "True"
            ),
            None,
        )
        running = next(
            (
                _time(((cs.get("state") or {}).get("running") or {}).get("startedAt"))
                for cs in (p.get("status") or {}).get("containerStatuses") or []
            ),
            None,
        )
        if ready is not None:
            readies.append(ready)
            span = _span(running, ready)
            if span is not None:
                loads.append((span, _name(p)))
    if loads:
        seconds, where = max(loads)
        out.append(
            Row(
                "engine load",
                f"{where} (longest of {len(loads)})",
                seconds,
                "API",
                predicted=predicted.get("engine load"),
            )
        )
    else:
        out.append(
            Row(
                "engine load",
                "ranks",
                None,
                "API",
                note=f"{NOT_MEASURED}: no rank Ready with a running container",
                predicted=predicted.get("engine load"),
            )
        )
    total = total_seconds(predicted) if predicted else None
    if begun is not None and readies and len(readies) == len(ranks):
        out.append(
            Row("ready", "every rank Ready", _span(begun, max(readies)), "play", predicted=total)
        )
    else:
        out.append(
            Row(
                "ready",
                "-",
                None,
                "play",
                note=f"{NOT_MEASURED}: not every rank Ready",
                predicted=total,
            )
        )
    return out


def _hop(record: Mapping[str, object]) -> str:
    """Where a copy went: the peer, and in a chain the Spark that relayed it there."""
    peer, via = str(record.get("peer", "")), str(record.get("via", ""))
    return f"{via} -> {peer}" if via else peer


def _relay_row(
    jobs: Mapping[str, Mapping[str, Any]],
    fetch_job: str,
    receivers: Sequence[str],
    peers: Sequence[str],
    predicted: float | None,
) -> Row:
    """A chain's relay: from the fetch Job's end (the first peer's verdict) to the last
    receiver Job's end (the last peer verified)."""
    where = " -> ".join(peers)

    def done(name: str) -> datetime | None:
        return _time(((jobs.get(name) or {}).get("status") or {}).get("completionTime"))

    ends = [done(n) for n in receivers]
    first = done(fetch_job)
    if not receivers or first is None or None in ends:
        note = f"{NOT_MEASURED}: not every receiver Job completed"
        return Row("relay", where, None, "API", note=note, predicted=predicted)
    last = max(e for e in ends if e is not None)
    return Row("relay", where, _span(first, last), "API", predicted=predicted)


def _from_records(
    phase: str, where: str, got: list[dict[str, object]], predicted: float | None
) -> Row:
    if not got:
        return Row(
            phase,
            where,
            None,
            "pod",
            note=f"{NOT_MEASURED}: the container left no phase record",
            predicted=predicted,
        )
    return Row(
        phase,
        where,
        sum(float(str(r["seconds"])) for r in got),
        "pod",
        sum(int(str(r.get("bytes", 0))) for r in got),
        predicted=predicted,
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def table(name: str, timeline: Sequence[Row]) -> list[str]:
    """The timeline as the play prints it: one line per phase."""
    lines = [
        f"switch timeline of {name}:",
        f"  {'phase':<12} {'measured':>12} {'predicted':>10}  {'source':<6} where / note",
    ]
    for row in timeline:
        extra = [row.where] if row.where and row.where != "-" else []
        if row.nbytes:
            extra.append(f"{row.nbytes / 1e9:.2f} GB")
            if row.seconds:
                extra.append(f"{row.nbytes / row.seconds / 1e6:.0f} MB/s")
        if row.note:
            extra.append(row.note)
        measured = NOT_MEASURED if row.seconds is None else _seconds(row.seconds)
        lines.append(
            f"  {row.phase:<12} {measured:>12} {_seconds(row.predicted):>10}  {row.source:<6} "
            + "; ".join(extra)
        )
    return lines


def timelines(
    deployments: Sequence[Mapping[str, Any]],
    jobs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    prepull: Sequence[str] = (),
    started: str | None = None,
) -> list[str]:
    """Every deployment's timeline, one block after another (what the serve play prints)."""
    lines: list[str] = []
    for d in deployments:
        lines += table(str(d.get("name", "")), rows(d, jobs, pods, prepull, started))
    return lines
