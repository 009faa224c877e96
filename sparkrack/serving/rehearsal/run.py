"""Run the rehearsal: the filter in each Spark's namespace, one rank process per Spark, a verdict.

Each rank starts as ``nsenter --net=<the Spark's netns> unshare -m`` with a private tmpfs on
/dev/shm (SGLang decides "same node" through shared memory), then the engine-check interpreter
with ``sparkrack/data/rehearsal/rank.py`` (SGLang's or vLLM's init, by the rank's engine). While the ranks run, every connection a rank reports
it is about to open towards a filtered address gets a counting rule in the drop chain of the
policy that refuses it; a count above zero is proof that the policy dropped that connection, and
the rehearsal stops at once with ``rank N -> address:port, dropped by <policy>``. Otherwise it
passes when every rank has received rank 0's broadcast, and fails ``timeout_s`` after every rank
has imported the engine (the connections' bound; the import has its own, ``IMPORT_TIMEOUT_S``,
since a loaded machine slows it), naming the stage each unfinished rank is stuck in.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sparkrack.serving.enginecheck import upstream as enginecheck
from sparkrack.serving.rehearsal.plan import RankRun, Rehearsal
from sparkrack.serving.rehearsal.policy import (
    STANDIN,
    Filter,
    drop_chain,
    spark_filter,
    witness,
    witness_count,
)

DATA = resources.files("sparkrack") / "data"
TIMEOUT_S = 40.0
IMPORT_TIMEOUT_S = 90.0
POLL_S = 0.25
# Imported at module level by the engine's utilities, never on the connection path: inert here.
IMPORT_ONLY = ("requests", "PIL", "aiohttp", "msgspec")
SHM_SIZE = "64m"


@dataclass
class Outcome:
    ok: bool
    lines: list[str] = field(default_factory=list)
    seconds: float = 0.0
    dropped: list[str] = field(default_factory=list)
    """``rank N -> address:port, dropped by <policy>`` for each proven drop."""


NetnsOf = Callable[[str], str]
"""Node name -> path of its network namespace (``/proc/<pid>/ns/net``, ``/run/netns/<name>``)."""


def iptables(netns: str, *words: str, check: bool = True) -> str:
    proc = subprocess.run(
        ["nsenter", f"--net={netns}", "iptables", "-w", *words],
        capture_output=True,
        text=True,
        check=False,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(words)} in {netns}: {proc.stderr.strip()}")
    return proc.stdout


def _bootstrap(paths: list[str], script: str) -> str:
    return (
        f"import sys; sys.path[:0] = {paths!r}; sys.argv = [{script!r}]; "
        f"exec(compile(open({script!r}).read(), {script!r}, 'exec'), "
        "{'__name__': '__main__', '__file__': " + repr(script) + "})"
    )


@dataclass
class _Proc:
    run: RankRun
    proc: subprocess.Popen[str]
    status: Path
    log: Path
    stages: list[dict[str, Any]] = field(default_factory=list)
    offset: int = 0

    def poll(self) -> None:
        text = self.status.read_text(encoding="utf-8") if self.status.exists() else ""
        new, self.offset = text[self.offset :], len(text)
        for line in new.splitlines():
            if line.strip():
                self.stages.append(json.loads(line))

    def last(self) -> dict[str, Any]:
        return self.stages[-1] if self.stages else {"stage": "not started"}

    def reached(self, stage: str) -> bool:
        return any(s["stage"] == stage for s in self.stages)

    def finished(self) -> bool:
        return self.reached("done")


def rehearse(
    rehearsal: Rehearsal,
    netns_of: NetnsOf,
    *,
    filtered: bool = True,
    timeout_s: float = TIMEOUT_S,
    offline: bool = True,
    say: Callable[[str], None] = print,
) -> Outcome:
    """Start every rank of ``rehearsal`` in its Spark's namespace and judge the result."""
    start = time.monotonic()
    if not rehearsal.ranks:
        return Outcome(True, ["no multi-rank deployment to rehearse"])
    filters: dict[str, Filter] = {}
    if filtered:
        filters = {node: spark_filter(adm) for node, adm in rehearsal.by_node().items()}
    installed: list[str] = []
    procs: list[_Proc] = []
    with tempfile.TemporaryDirectory(prefix="sparkrack-rehearsal-") as tmp:
        try:
            for node, filt in filters.items():
                for words in filt.teardown:  # a leftover of an interrupted run
                    iptables(netns_of(node), *words, check=False)
                installed.append(node)
                for words in filt.commands:
                    iptables(netns_of(node), *words)
                say(
                    f"rehearsal: {STANDIN} on {node}: "
                    + ", ".join(f"{c} for NetworkPolicy {p}" for c, p in filt.chains.items())
                )
            nonce = secrets.token_hex(8)
            for run in rehearsal.ranks:
                procs.append(_start(run, netns_of(run.node), Path(tmp), nonce, offline))
            outcome = _watch(rehearsal, procs, filters, netns_of, timeout_s, say)
        finally:
            for p in procs:
                _stop(p.proc)
            for node in installed:
                for words in filters[node].teardown:
                    iptables(netns_of(node), *words, check=False)
        if not outcome.ok:
            for p in procs:
                tail = p.log.read_text(encoding="utf-8", errors="replace")[-1500:]
                for secret in p.run.secret_values:
                    tail = tail.replace(secret, "<secret>")
                if tail.strip() and not p.finished():
                    outcome.lines.append(f"{p.run.label} output (tail):\n{tail}")
    outcome.seconds = round(time.monotonic() - start, 1)
    return outcome


def _start(run: RankRun, netns: str, tmp: Path, nonce: str, offline: bool) -> _Proc:
    env_dir = enginecheck.ensure_env(run.engine, run.version, offline=offline)
    recipe = enginecheck.recipes()["engines"][run.engine]
    extensions = json.loads((env_dir / "engine" / "extensions.json").read_text(encoding="utf-8"))
    paths = [
        str(env_dir / "engine"),
        str(enginecheck.deps_dir(run.engine, run.version)),
        str(enginecheck.cache_dir() / "enginecheck" / "base"),
    ]
    home = tmp / f"{run.deployment}-{run.rank}"
    home.mkdir()
    status, log = home / "status.jsonl", home / "output.log"
    request = {
        "engine": run.engine,
        "argv": list(run.argv),
        "env": run.env,
        "status": str(status),
        "nonce": nonce,
        "harness": str(DATA / "enginecheck" / "harness.py"),
        "standins": [*recipe["standins"], *extensions, *IMPORT_ONLY],
        "torch_preimport": recipe.get("torch_preimport", []),
    }
    script = str(DATA / "rehearsal" / "rank.py")
    inner = (
        f"mount -t tmpfs -o size={SHM_SIZE},mode=1777 tmpfs /dev/shm && "
        f"exec {shlex.quote(sys.executable)} -I -c {shlex.quote(_bootstrap(paths, script))}"
    )
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "SGL", "VLLM", "HOST_IP"))
    }
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["nsenter", f"--net={netns}", "unshare", "-m", "sh", "-c", inner],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env={**clean, "HOME": str(home)},
            cwd=home,
            start_new_session=True,
        )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(request))
    proc.stdin.close()
    return _Proc(run, proc, status, log)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _watch(
    rehearsal: Rehearsal,
    procs: list[_Proc],
    filters: Mapping[str, Filter],
    netns_of: NetnsOf,
    timeout_s: float,
    say: Callable[[str], None],
) -> Outcome:
    start = time.monotonic()
    imported: float | None = None
    node_of = {r.pod.ip: r.node for r in rehearsal.ranks}
    policy_of = {(a.source.ip, a.dest.ip): a for a in rehearsal.admissions()}
    witnesses: dict[tuple[int, str, int], tuple[_Proc, str, str, str]] = {}
    while True:
        for p in procs:
            p.poll()
            for s in p.stages:
                if s["stage"] != "connect" or s.get("local") or s.get("port") is None:
                    continue
                key = (id(p), str(s["host"]), int(s["port"]))
                node = node_of.get(str(s["host"]))
                adm = policy_of.get((p.run.pod.ip, str(s["host"])))
                if key in witnesses or node is None or node not in filters:
                    continue
                if adm is None or not adm.policies:
                    continue
                if adm.admits(int(s["port"])):
                    continue
                chain = drop_chain(adm.policy)
                iptables(netns_of(node), *witness(chain, p.run.pod.ip, str(s["host"]), key[2]))
                witnesses[key] = (p, chain, adm.policy, str(s["what"]))
        dropped = []
        for (_pid, host, port), (p, chain, policy, what) in witnesses.items():
            listing = iptables(netns_of(node_of[host]), "-L", chain, "-nvx")
            if witness_count(listing, p.run.pod.ip, host, port) > 0:
                dropped.append(
                    f"{p.run.label} -> {host}:{port}, dropped by {policy} "
                    f"({what}; NetworkPolicy enforced by the {STANDIN})"
                )
        if dropped:
            lines = [*dropped, *_stuck(procs)]
            return Outcome(False, lines, dropped=dropped)
        if all(p.finished() for p in procs):
            lines = [f"{p.run.label} ({p.run.node}): {_summary(p)}" for p in procs]
            return Outcome(True, lines)
        failed = [p for p in procs if p.proc.poll() is not None and not p.finished()]
        if failed:
            return Outcome(False, _stuck(procs))
        now = time.monotonic()
        if imported is None and all(p.reached("parsed") for p in procs):
            imported = now
        if imported is None and now - start > IMPORT_TIMEOUT_S:
            lines = [f"the engine not imported within {IMPORT_TIMEOUT_S:.0f} s", *_stuck(procs)]
            return Outcome(False, lines)
        if imported is not None and now - imported > timeout_s:
            lines = [f"no verdict {timeout_s:.0f} s after the engine was imported", *_stuck(procs)]
            return Outcome(False, lines)
        time.sleep(POLL_S)


def _summary(p: _Proc) -> str:
    by = {s["stage"]: s for s in p.stages}
    if "bind" in by:
        b = by["bind"]
        return f"bound the broadcaster at {b['host']}:{b['port']}, broadcast sent"
    c = [s for s in p.stages if s["stage"] == "connect"][-1]
    return f"connected to {c['host']}:{c['port']}, broadcast received"


def _stuck(procs: list[_Proc]) -> list[str]:
    out = []
    for p in procs:
        if p.finished():
            continue
        last = p.last()
        where = ""
        connects = [s for s in p.stages if s["stage"] == "connect"]
        if connects:
            where = f", last connection {connects[-1]['what']} -> {connects[-1]['host']}:{connects[-1]['port']}"
        error = f": {last['error']}" if last.get("error") else ""
        out.append(f"{p.run.label} ({p.run.node}) stuck after stage {last['stage']}{where}{error}")
    return out
