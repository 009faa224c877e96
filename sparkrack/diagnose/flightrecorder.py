"""PyTorch's NCCL flight-recorder dumps, read without running anything they contain.

A rank whose collective times out (``TORCH_NCCL_DUMP_ON_TIMEOUT=1``) writes its recent collectives
to ``<TORCH_FR_DUMP_TEMP_FILE><rank>``. PyTorch writes that file as a pickle of plain containers
(dicts, lists, tuples, strings, numbers, None, booleans), or as JSON when asked to. A pickle can
name any importable callable and have it called on load, so a dump from a stranger's bundle is
read by :class:`_PlainUnpickler`, which resolves no global at all: a dump that names a class or
function is refused before anything is built, and nothing in it runs. JSON is read as JSON.

:func:`summary` reduces a dump to what a diagnosis needs: the rank's process groups, the last
collective it enqueued and completed, and the collectives that had not completed.
"""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass, field
from typing import Any

from sparkrack.errors import Problem, SparkrackError

MAX_DUMP_BYTES = 64 * 1024 * 1024
"""A flight-recorder dump of the default 2000 entries is a few MB; anything larger is refused."""

MAX_ITEMS = 4_000_000
"""Values a loaded dump may hold, counting a container each time it is reached: a pickle's memo
lets a few hundred bytes name one list twice at each of 60 levels, which every later walk (the
redaction, the JSON written into the bundle) would visit 2**60 times."""

MAX_DEPTH = 64
"""Nesting a loaded dump may reach; PyTorch's dumps nest a handful of levels."""


def _check_size(value: Any, where: str) -> None:
    """Refuse ``value`` past :data:`MAX_ITEMS` or :data:`MAX_DEPTH`, walking it without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_ITEMS:
            raise _refuse(where, f"more than {MAX_ITEMS} items once loaded")
        if depth > MAX_DEPTH:
            raise _refuse(where, f"nested more than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack += [(v, depth + 1) for pair in item.items() for v in pair]
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack += [(v, depth + 1) for v in item]


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain containers only: every global (class, function) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"names the global {module}.{name}")


def _refuse(where: str, what: str) -> SparkrackError:
    return SparkrackError(
        Problem(
            where,
            "flight-recorder dump",
            what,
            "give the dump PyTorch wrote (plain pickle or JSON); a dump that names classes or "
            "functions is not read, since loading it could run code",
            "flight-recorder-dump",
        )
    )


def load(data: bytes, where: str = "dump") -> dict[str, Any]:
    """The dump in ``data`` (JSON or a plain pickle) as a dict; refuses anything else."""
    if len(data) > MAX_DUMP_BYTES:
        raise _refuse(where, f"{len(data)} bytes, more than {MAX_DUMP_BYTES}")
    stripped = data.lstrip()
    if stripped[:1] in (b"{", b"["):
        try:
            value = json.loads(stripped.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise _refuse(where, f"not valid JSON: {exc}") from None
        except RecursionError:
            raise _refuse(where, "JSON nested too deep") from None
    elif data[:1] == b"\x80":
        try:
            value = _PlainUnpickler(io.BytesIO(data)).load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as exc:
            raise _refuse(where, f"refused pickle: {exc}") from None
        except (AttributeError, KeyError, MemoryError, RecursionError) as exc:
            raise _refuse(where, f"unreadable pickle: {type(exc).__name__}") from None
    else:
        raise _refuse(where, "neither JSON nor a binary pickle")
    if not isinstance(value, dict) or not isinstance(value.get("entries", []), list):
        raise _refuse(where, "not a flight-recorder dump (no dict with 'entries')")
    _check_size(value, where)
    return value


@dataclass(frozen=True)
class Pending:
    """A collective the rank had not completed when it dumped."""

    seq: int
    op: str
    state: str
    sizes: str
    timeout_ms: int | None


@dataclass(frozen=True)
class DumpSummary:
    rank: int | None
    version: str
    last_enqueued: int | None
    last_completed: int | None
    entries: int
    pending: tuple[Pending, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "rank ?"
        text = (
            f"flight recorder of {who}: last enqueued collective {self.last_enqueued}, "
            f"last completed {self.last_completed} ({self.entries} entries)"
        )
        for p in self.pending:
            text += f"\n  not completed: SeqNum={p.seq} {p.op} {p.sizes} state={p.state}"
        return text


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def summary(dump: dict[str, Any], rank: int | None = None) -> DumpSummary:
    """What a diagnosis needs of one rank's dump (``rank`` from its file name)."""
    status = dump.get("pg_status")
    enqueued = completed = None
    if isinstance(status, dict):
        default = status.get("0") or next(iter(status.values()), None)
        if isinstance(default, dict):
            enqueued = _int(default.get("last_enqueued_collective"))
            completed = _int(default.get("last_completed_collective"))
    entries = [e for e in dump.get("entries") or [] if isinstance(e, dict)]
    pending = []
    for e in entries:
        state = str(e.get("state", ""))
        if state == "completed":
            continue
        seq = _int(e.get("collective_seq_id"))
        if seq is None or (completed is not None and seq <= completed):
            continue
        op = str(e.get("profiling_name", "?")).removeprefix("nccl:")
        pending.append(
            Pending(seq, op, state, str(e.get("input_sizes", "")), _int(e.get("timeout_ms")))
        )
    return DumpSummary(
        rank, str(dump.get("version", "")), enqueued, completed, len(entries), tuple(pending)
    )
