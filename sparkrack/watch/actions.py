"""The watchdog's hands: for each verdict, what :class:`~.supervisor.Supervisor` decided, in
order — evidence first (while the sick group still exists), then routing, then the state
annotations ``sparkrack status`` reads (the restart counted before it happens: a watchdog that
dies mid-restart keeps its budget), then the restart."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparkrack import contract
from sparkrack.diagnose import bundle
from sparkrack.watch.cluster import Cluster
from sparkrack.watch.metrics import Series
from sparkrack.watch.probe import ProbeResult
from sparkrack.watch.supervisor import Decision, State, Supervisor


@dataclass
class Actions:
    deployment: str
    url: str
    cluster: Cluster | None = None
    evidence: Path | None = None
    alias: str = ""
    supervisor: Supervisor = field(default_factory=Supervisor)
    log: list[str] = field(default_factory=list)
    """What was done, one line per act (also printed by the CLI)."""
    bundles: list[Path] = field(default_factory=list)

    def load_state(self) -> None:
        """Take the state and the restart history from the cluster (a restarted watchdog keeps
        its budget)."""
        if self.cluster is None:
            return
        notes = self.cluster.view(self.deployment).annotations()
        times = notes.get(contract.WATCHDOG_RESTARTS_ANNOTATION, "")
        self.supervisor.restarts = [float(t) for t in times.split(",") if t.strip()]
        state = notes.get(contract.WATCHDOG_STATE_ANNOTATION)
        if state in {s.value for s in State}:
            self.supervisor.state = State(state)

    def write_evidence(self, result: ProbeResult) -> Path | None:
        if self.evidence is None:
            return None
        logs: dict[str, str] = {}
        events: list[object] = []
        notes: list[str] = []
        pods: tuple[str, ...] = ()
        namespace = ""
        if self.cluster is None:
            notes.append("no cluster access (no --namespace): pod logs and events not captured")
        else:
            namespace = self.cluster.namespace
            logs, events, notes, pods = self.cluster.capture(self.deployment)
        notes.append(
            "NCCL ranks' flight-recorder dumps (written on a collective timeout) stay on each "
            f"rank's Spark in {contract.flight_recorder_dir(self.deployment)}: copy them from "
            "each Spark into one folder DIR (playbooks/evidence.yml) and run "
            "sparkrack diagnose --add-dumps DIR <bundle>"
        )
        identity = bundle.Identity(self.deployment, namespace, self.alias, self.url, pods)
        path = bundle.write(self.evidence, identity, result.to_json(), logs, events, notes)
        self.bundles.append(path)
        return path

    def apply(self, result: ProbeResult, now: float | None = None) -> Decision:
        """Decide and act (synchronous: the Kubernetes client blocks)."""
        now = time.time() if now is None else now
        decision = self.supervisor.decide(result.verdict, now)
        if decision.capture:
            path = self.write_evidence(result)
            if path is not None:
                self.log.append(f"{self.deployment}: evidence {path}")
        if self.cluster is not None:
            if decision.routable is not None and self.cluster.set_routable(
                self.deployment, decision.routable
            ):
                where = "back into" if decision.routable else "out of"
                self.log.append(f"{self.deployment}: {where} the gateway's routing")
            self.cluster.annotate(
                self.deployment,
                {
                    contract.WATCHDOG_STATE_ANNOTATION: str(decision.state),
                    contract.WATCHDOG_VERDICT_ANNOTATION: (
                        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now))} "
                        f"{result.verdict}: {result.detail}"
                    )[:1000],
                    contract.WATCHDOG_RESTARTS_ANNOTATION: ",".join(
                        f"{t:.0f}" for t in self.supervisor.restarts
                    ),
                },
            )
            if decision.restart:
                pods = self.cluster.restart_group(self.deployment)
                self.log.append(f"{self.deployment}: restarted the group ({', '.join(pods)})")
        if decision.message:
            self.log.append(f"{self.deployment}: {decision.state}: {decision.message}")
        return decision

    async def on_verdict(self, result: ProbeResult, series: Series) -> None:
        """The loop's hook: act in a thread, count restarts and keep the state in the metrics."""
        before = len(self.log)
        decision = await asyncio.to_thread(self.apply, result)
        series.state = str(decision.state)
        if decision.restart:
            series.restarts += 1
        for line in self.log[before:]:
            print(line, flush=True)
