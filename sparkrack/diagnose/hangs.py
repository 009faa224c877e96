"""A hang named across the logs of one NCCL group: who waited, who stopped, who died.

A rank that times out in a collective is the one that *waited*; the fault is with a rank that
never joined. Read together, the ranks' logs tell them apart (PyTorch 2.11 / NCCL 2.28.9, captured
in ``tests/data/nccl/captured/hangs``):

- a rank that waited logs ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=S,
  OpType=OP, NumelIn=N, ..., Timeout(ms)=T)``;
- a silent rank (alive, not calling the collective) logs no timeout but answers the waiting
  rank's dump signal: ``Received a dump signal due to a collective timeout from rank R ... Last
  enqueued NCCL work: E, last completed NCCL work: C`` with E below S;
- a dead rank's log just ends: no timeout, no answer to the dump signal; when it carries an error
  that ends a process (a signature marked ``ends_rank``, e.g. ``torch.OutOfMemoryError``), the
  last such error is named as the rank's own cause;
- when every rank times out, on different SeqNums, operations or sizes, the ranks called
  different collectives (a mismatch; NCCL checks neither sizes nor operations);
- a Gloo ``monitored_barrier`` (SGLang's loading barrier) names the late ranks itself, in rank
  0's log: ``[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in T ms`` (torch 2.13 Gloo,
  captured in ``tests/data/nccl/captured/gloo_barrier_late_rank``); a late rank whose own log ends
  in a process-ending error failed, one without was slow or stuck.

The verdicts' cause and fix are data (``hangs:`` in ``failure_signatures.yml``); this module only
reads the logs (and the flight-recorder summaries, when the dumps are there) and picks one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from sparkrack.diagnose.flightrecorder import DumpSummary
from sparkrack.diagnose.signatures import MAX_LINE_CHARS, SIGNATURES_FILE, diagnose, load_signatures
from sparkrack.errors import Problem, SparkrackError
from sparkrack.inputs import safeyaml
from sparkrack.sources import expand

_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
    r"(?:, NumelIn=(\d+))?(?:, NumelOut=\d+)?(?:, Timeout\(ms\)=(\d+))?\)"
)
_SIGNAL = re.compile(
    r"Received a dump signal due to a collective timeout from\s+rank (\d+).*?"
    r"Last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)"
)
_BARRIER = re.compile(
    r"\[Rank (\d+)\]: Ranks? (\d+(?:, \d+)*) failed to pass monitoredBarrier in (\d+) ms"
)
_RANK_IN_LOG = (
    re.compile(r"global rank: (\d+)"),
    re.compile(r"\[PG ID \d+ PG GUID \S+ Rank (\d+)\]"),
    re.compile(r"^\[rank(\d+)\]:"),
    re.compile(r"\[Rank (\d+)\] Watchdog caught"),
)
_RANK_IN_NAME = (
    re.compile(r"-r(\d+)-\d+(?=[_.]|$)"),  # a rank's pod (serving.names: <headless>-r<rank>-0)
    re.compile(r"rank[_-]?(\d+)", re.I),  # rank0.log, fr_dump_rank_0
)


@dataclass(frozen=True)
class Timeout:
    seq: int
    op: str
    numel: int | None
    timeout_ms: int | None

    def __str__(self) -> str:
        numel = f", NumelIn={self.numel}" if self.numel is not None else ""
        limit = f", timeout {self.timeout_ms} ms" if self.timeout_ms is not None else ""
        return f"{self.op} SeqNum={self.seq}{numel}{limit}"


@dataclass(frozen=True)
class Ending:
    """The last process-ending error in a rank's log: the text its signature matched, its line,
    the signature's id."""

    what: str
    line: int
    signature: str

    def __str__(self) -> str:
        return f"{self.what} (line {self.line}, {self.signature})"


@dataclass(frozen=True)
class RankLog:
    """What one rank's log says about a hang."""

    label: str
    rank: int
    timeout: Timeout | None
    signal_from: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    ended_by: Ending | None = None
    barrier_late: tuple[int, ...] = ()
    """The ranks this rank's log names as late to a Gloo monitored barrier."""
    barrier_ms: int | None = None


@dataclass(frozen=True)
class HangFinding:
    id: str
    detail: str
    cause: str
    fix: str
    seed: str
    waiting: tuple[int, ...] = ()
    silent: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()
    timeouts: dict[int, str] = field(default_factory=dict)
    causes: dict[int, str] = field(default_factory=dict)
    """Dead rank -> the signature id of the error its own log ends in."""

    def __str__(self) -> str:
        return (
            f"{self.id}: {self.detail}\n  cause: {expand(self.cause)}\n  fix:   {expand(self.fix)}\n"
            f"  source: {expand(self.seed)}"
        )


@lru_cache(maxsize=1)
def verdicts() -> dict[str, dict[str, str]]:
    """The group verdicts of ``failure_signatures.yml`` (``hangs:``) by id."""
    raw = resources.files("sparkrack").joinpath("data", SIGNATURES_FILE).read_bytes()
    data = safeyaml.load_bytes(raw, SIGNATURES_FILE)
    found: dict[str, dict[str, str]] = {}
    for index, entry in enumerate(data.get("hangs") or []):
        try:
            found[str(entry["id"])] = {
                k: " ".join(str(entry[k]).split()) for k in ("cause", "fix", "seed")
            }
        except (KeyError, TypeError) as exc:
            raise SparkrackError(
                Problem(
                    SIGNATURES_FILE,
                    f"hangs[{index}]",
                    f"invalid verdict: {exc}",
                    "every verdict needs id, cause, fix, seed",
                    "diagnose-signature",
                )
            ) from exc
    return found


def _rank_of(label: str, lines: list[str], index: int) -> int:
    """The rank PyTorch names in the log, else the one in its file name, else its position
    (a bundle lists rank 0 first)."""
    for pattern in _RANK_IN_LOG:
        for line in lines:
            match = pattern.search(line)
            if match:
                return int(match.group(1))
    name = label.rsplit("/", 1)[-1]
    for pattern in _RANK_IN_NAME:
        match = pattern.search(name)
        if match:
            return int(match.group(1))
    return index


def read_rank(label: str, text: str, index: int = 0) -> RankLog:
    """One rank's log: its rank, its first collective timeout, its answer to a dump signal."""
    lines = [line[:MAX_LINE_CHARS] for line in text.splitlines()]
    timeout = None
    signal: re.Match[str] | None = None
    late: set[int] = set()
    barrier_ms = None
    for line in lines:
        if found := _BARRIER.search(line):
            late.update(int(r) for r in found.group(2).split(", "))
            barrier_ms = int(found.group(3))
        if timeout is None and (m := _TIMEOUT.search(line)):
            timeout = Timeout(
                int(m.group(1)),
                m.group(2),
                int(m.group(3)) if m.group(3) else None,
                int(m.group(4)) if m.group(4) else None,
            )
        if signal is None:
            signal = _SIGNAL.search(line)
    rank = _rank_of(label, lines, index)
    ended_by = _ended_by(text)
    if signal is None:
        return RankLog(
            label,
            rank,
            timeout,
            ended_by=ended_by,
            barrier_late=tuple(sorted(late)),
            barrier_ms=barrier_ms,
        )
    return RankLog(
        label,
        rank,
        timeout,
        int(signal.group(1)),
        int(signal.group(2)),
        int(signal.group(3)),
        ended_by,
        tuple(sorted(late)),
        barrier_ms,
    )


def _ended_by(text: str) -> Ending | None:
    """The last error in ``text`` of a signature marked ``ends_rank``, named by the text its
    pattern matched (taken from the finding's redacted evidence), its line and its id."""
    ending = {s.id: s for s in load_signatures() if s.ends_rank}
    found = [f for f in diagnose(text) if f.id in ending]
    if not found:
        return None
    last = max(found, key=lambda f: f.line)
    match = ending[last.id].match.search(last.evidence)
    return Ending(match.group(0) if match else last.id, last.line, last.id)


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _finding(kind: str, detail: str, **ranks: object) -> HangFinding:
    v = verdicts()[kind]
    return HangFinding(kind, detail, v["cause"], v["fix"], v["seed"], **ranks)  # type: ignore[arg-type]


def analyse(
    logs: Mapping[str, str], dumps: Mapping[int, DumpSummary] | None = None
) -> list[HangFinding]:
    """The hang verdicts of one group's logs (label -> text, one log per rank, rank 0 first):
    a late rank at a Gloo monitored barrier, then the NCCL collective verdict; empty when no
    rank waited."""
    dumps = dumps or {}
    ranks = [read_rank(label, text, i) for i, (label, text) in enumerate(logs.items())]
    return _barrier(ranks) + _collectives(ranks, dumps)


def _barrier(ranks: list[RankLog]) -> list[HangFinding]:
    """The Gloo monitored-barrier verdict: the rank that waited names the late ones; each late
    rank's own log tells whether it failed (a process-ending error) or was slow."""
    findings = []
    by_rank = {r.rank: r for r in ranks}
    for monitor in (r for r in ranks if r.barrier_late):
        said = []
        failed: list[int] = []
        slow: list[int] = []
        causes: dict[int, str] = {}
        for late in monitor.barrier_late:
            own = by_rank.get(late)
            if own is None:
                slow.append(late)
                said.append(f"rank {late} did not arrive (no log of it given)")
            elif own.ended_by is not None:
                failed.append(late)
                causes[late] = own.ended_by.signature
                said.append(f"rank {late} failed: its log ends in {own.ended_by}")
            else:
                slow.append(late)
                said.append(
                    f"rank {late} was late: its log names no error that ends a process "
                    "(slow or stuck)"
                )
        findings.append(
            _finding(
                "gloo-barrier-late-rank",
                f"rank {monitor.rank} waited {monitor.barrier_ms} ms at a Gloo monitored barrier; "
                + "; ".join(said),
                waiting=(monitor.rank,),
                silent=tuple(slow),
                dead=tuple(failed),
                causes=causes,
            )
        )
    return findings


def _collectives(ranks: list[RankLog], dumps: Mapping[int, DumpSummary]) -> list[HangFinding]:
    """The NCCL collective verdict: empty when no rank timed out in a collective."""
    waiting = [r for r in ranks if r.timeout is not None]
    if not waiting:
        return []
    timeouts = {r.rank: str(r.timeout) for r in waiting}
    waited = "; ".join(f"rank {r.rank} timed out waiting in {r.timeout}" for r in waiting)
    others = [r for r in ranks if r.timeout is None]
    if not others:
        if len(waiting) < 2:
            return []
        kinds = {(r.timeout.seq, r.timeout.op, r.timeout.numel) for r in waiting if r.timeout}
        differ = [
            what
            for what, values in (
                ("SeqNums", {k[0] for k in kinds}),
                ("operations", {k[1] for k in kinds}),
                ("sizes", {k[2] for k in kinds}),
            )
            if len(values) > 1
        ]
        how = (
            f"the {' and '.join(differ)} differ"
            if differ
            else "all on the same collective (no rank is missing: suspect the transport)"
        )
        return [
            _finding(
                "nccl-collective-mismatch",
                f"every rank timed out, {how}: {waited}{_dump_note(dumps)}",
                waiting=tuple(r.rank for r in waiting),
                timeouts=timeouts,
            )
        ]
    lowest = min(r.timeout.seq for r in waiting if r.timeout)
    silent = [r for r in others if r.signal_from is not None or _dump_behind(dumps, r.rank, lowest)]
    dead = [r for r in others if r not in silent]
    findings = []
    if silent:
        said = "; ".join(
            f"rank {r.rank} is silent: no timeout in its log, it answered the dump signal with "
            f"last enqueued collective {_enqueued(r, dumps)} (the others wait in SeqNum={lowest})"
            for r in silent
        )
        findings.append(
            _finding(
                "nccl-hang-silent-rank",
                f"{waited}; {said}{_dump_note(dumps)}",
                waiting=tuple(r.rank for r in waiting),
                silent=tuple(r.rank for r in silent),
                timeouts=timeouts,
            )
        )
    if dead:
        said = "; ".join(
            f"rank {r.rank} is dead: its log ends in {r.ended_by}"
            if r.ended_by
            else f"rank {r.rank} is dead: its log ends with no timeout and no answer to the dump "
            "signal"
            for r in dead
        )
        findings.append(
            _finding(
                "nccl-hang-dead-rank",
                f"{waited}; {said}{_dump_note(dumps)}",
                waiting=tuple(r.rank for r in waiting),
                dead=tuple(r.rank for r in dead),
                timeouts=timeouts,
                causes={r.rank: r.ended_by.signature for r in dead if r.ended_by},
            )
        )
    return findings


def _enqueued(rank: RankLog, dumps: Mapping[int, DumpSummary]) -> str:
    if rank.last_enqueued is not None:
        return str(rank.last_enqueued)
    dump = dumps.get(rank.rank)
    return str(dump.last_enqueued) if dump is not None else "?"


def _dump_behind(dumps: Mapping[int, DumpSummary], rank: int, seq: int) -> bool:
    """A rank with no word in its log whose own dump shows it never enqueued collective ``seq``:
    it was alive to dump, so it is silent rather than dead."""
    dump = dumps.get(rank)
    return dump is not None and dump.last_enqueued is not None and dump.last_enqueued < seq


def _dump_note(dumps: Mapping[int, DumpSummary]) -> str:
    if not dumps:
        return ""
    parts = [
        f"rank {rank} enqueued {d.last_enqueued}, completed {d.last_completed}"
        for rank, d in sorted(dumps.items())
    ]
    return f" [flight recorder: {'; '.join(parts)}]"
