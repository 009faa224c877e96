"""Resolve a rank's RoCE GID index from sysfs when its container starts (STDLIB ONLY).

    python3 -I /opt/sparkrack/gidtable.py -- COMMAND...
    python3 -I gidtable.py --resolve [--root DIR] [--port N] DEVICE=IPV4...

The second form is the roce role's at converge: it prints ``{"indexes": {device: index},
"errors": [...]}`` (JSON) for every target and exits 4 when one does not resolve. One reader of the
table, here, for the rank and for the role.

The index of a VF's IPv4 RoCE v2 entry moves: the ``sriov`` boot unit re-creates the VFs and the
kernel hands the next free slot to each address it re-adds, so an index read at converge and baked
into the pod can name another entry after a reboot (``NCCL error: unhandled system error`` on the
one rank whose table moved). This program reads the table in the rank's own container, right
before the engine, sets ``NCCL_IB_GID_INDEX`` and execs COMMAND.

What it reads (Linux ``drivers/infiniband/core/sysfs.c`` and ``cache.c``), per RDMA device and
port 1 under ``/sys/class/infiniband/<dev>/ports/1/``:

- ``gids/<i>``: the GID printed with ``%pI6`` (eight groups of four hex digits); an empty slot
  reads as the zero GID. An IPv4 address appears IPv4-mapped,
  ``0000:0000:0000:0000:0000:ffff:0a4d:0011`` for 10.77.0.17.
- ``gid_attrs/types/<i>``: ``RoCE v2`` or ``IB/RoCE v1`` (``ib_cache_gid_type_str``); reading the
  type of an empty slot fails (EINVAL), which is read here as no type.
- ``gid_attrs/ndevs/<i>``: the netdev the entry belongs to (read the same way).

The environment (built by :func:`sparkrack.fabric.ncclenv.rank_env`; the names are this
module's constants): ``SPARKRACK_GID_TARGETS`` lists ``<rdma device>=<IPv4>`` of every rail
the rank uses, comma-separated; every rail must resolve to one index, since NCCL takes one
``NCCL_IB_GID_INDEX`` for all of its HCAs. ``SPARKRACK_GID_INDEX_OVERRIDE`` (the inventory's:
a host's ``roce_gid_index`` or ``fabric.gid_index``) wins over what sysfs says, with a warning when the two differ. With no
override and no entry, the program stops with exit code 4 and the fix, before the engine starts:
an unset index hangs NCCL for twenty minutes, a wrong one fails one rank.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYSFS_ROOT = "/sys/class/infiniband"
PORT = 1
ROCE_V2 = "RoCE v2"
ROCE_V1 = "IB/RoCE v1"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
TARGETS_ENV = "SPARKRACK_GID_TARGETS"
OVERRIDE_ENV = "SPARKRACK_GID_INDEX_OVERRIDE"
ROOT_ENV = "SPARKRACK_SYSFS_INFINIBAND"
"""Where the table is read (default :data:`SYSFS_ROOT`); tests point it at a copied tree."""
NCCL_ENV = "NCCL_IB_GID_INDEX"
EXIT_UNRESOLVED = 4
EXIT_USAGE = 2
PREFIX = "[sparkrack-gid]"


@dataclass(frozen=True)
class Entry:
    """One slot of a port's GID table as sysfs shows it."""

    index: int
    gid: str
    type: str | None
    ndev: str | None


class GidError(Exception):
    """The table holds no usable entry; the message says what it holds and the fix."""


def ipv4_gid(address: str) -> str:
    """``10.77.0.17`` -> ``0000:0000:0000:0000:0000:ffff:0a4d:0011`` (sysfs spelling)."""
    return ipaddress.IPv6Address(f"::ffff:{ipaddress.IPv4Address(address)}").exploded


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # an empty slot's type and ndev fail with EINVAL
        return None


def read_table(root: Path, device: str, port: int = PORT) -> list[Entry]:
    """The non-empty slots of ``device``'s port ``port`` table, by index."""
    base = root / device / "ports" / str(port)
    gids = base / "gids"
    if not gids.is_dir():
        raise GidError(
            f"RDMA device {device} has no GID table at {gids}: the VF is not visible in this "
            "container. Fix: check the pod got its SR-IOV VF (Multus annotation) and that "
            f"`rdma link show` on the host lists {device}."
        )
    entries = []
    for item in gids.iterdir():
        if not item.name.isdigit():
            continue
        gid = (_read(item) or ZERO_GID).lower()
        if gid == ZERO_GID:
            continue
        index = int(item.name)
        gid_type = _read(base / "gid_attrs" / "types" / item.name)
        ndev = _read(base / "gid_attrs" / "ndevs" / item.name)
        entries.append(Entry(index, gid, gid_type, ndev))
    return sorted(entries, key=lambda e: e.index)


def resolve(root: Path, device: str, address: str, port: int = PORT) -> int:
    """Index of the RoCE v2 entry that carries ``address`` on ``device``."""
    entries = read_table(root, device, port)
    wanted = ipv4_gid(address)
    for entry in entries:
        if entry.gid == wanted and entry.type == ROCE_V2:
            return entry.index
    present = ", ".join(f"{e.index}={e.gid} ({e.type or '?'}, {e.ndev or '?'})" for e in entries)
    raise GidError(
        f"no RoCE v2 GID for {address} on {device} port {port}; present: {present or 'none'}. "
        f"Fix: give the VF of {device} its planned IPv4 {address} on the host (qsfp_network "
        "netplan) and restart the pod; with only fe80:: entries NCCL cannot reach its peers."
    )


def parse_targets(text: str) -> list[tuple[str, str]]:
    """``dev1=10.77.0.17,dev2=10.78.0.17`` -> ``[(dev1, 10.77.0.17), (dev2, 10.78.0.17)]``."""
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        device, sep, address = item.partition("=")
        if not sep or not device or "/" in device or device.startswith("."):
            raise GidError(f"{TARGETS_ENV} item {item!r} is not <rdma device>=<IPv4 address>")
        try:
            ipaddress.IPv4Address(address)
        except ValueError as exc:
            raise GidError(f"{TARGETS_ENV} item {item!r}: {exc}") from None
        out.append((device, address))
    return out


@dataclass(frozen=True)
class Decision:
    index: int
    notes: tuple[str, ...]


def decide(root: Path, targets: Sequence[tuple[str, str]], override: int | None) -> Decision:
    """The index NCCL gets, and what the log says about it."""
    found: dict[str, int] = {}
    errors: list[str] = []
    for device, address in targets:
        try:
            found[device] = resolve(root, device, address)
        except GidError as exc:
            errors.append(str(exc))
    indexes = sorted(set(found.values()))
    seen = ", ".join(f"{d}={i}" for d, i in found.items())
    if override is not None:
        notes = [f"{NCCL_ENV}={override} from the inventory (override)"]
        if errors:
            notes += [f"WARNING: {e}" for e in errors]
        if indexes and indexes != [override]:
            notes.append(
                f"WARNING: the override {override} differs from this host's table ({seen}); the "
                "rank may fail with 'NCCL error: unhandled system error'. Fix: remove the "
                "override (fabric.gid_index, the host's roce_gid_index) from the inventory and let "
                "each rank resolve its own."
            )
        return Decision(override, tuple(notes))
    if errors:
        raise GidError("; ".join(errors))
    if len(indexes) != 1:
        raise GidError(
            f"the rails' RoCE v2 IPv4 entries sit at different indexes ({seen or 'none'}) and NCCL "
            f"takes one {NCCL_ENV} for every HCA. Fix: restart the sriov unit on this host so the "
            "VFs are re-created in order, or set fabric.gid_index in the inventory."
        )
    return Decision(indexes[0], (f"{NCCL_ENV}={indexes[0]} read from sysfs ({seen})",))


def rank_environment(env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """``env`` with ``NCCL_IB_GID_INDEX`` set from the table; unchanged without targets."""
    targets = parse_targets(env.get(TARGETS_ENV, ""))
    if not targets:
        return dict(env), ()
    raw = env.get(OVERRIDE_ENV, "")
    if raw and not raw.isdigit():
        raise GidError(f"{OVERRIDE_ENV}={raw!r} is not a GID table index")
    override = int(raw) if raw else None
    decision = decide(Path(env.get(ROOT_ENV, SYSFS_ROOT)), targets, override)
    return {**env, NCCL_ENV: str(decision.index)}, decision.notes


def resolve_all(root: Path, targets: Sequence[tuple[str, str]], port: int = PORT) -> dict[str, Any]:
    """Every target's index (``indexes``) and every refusal (``errors``), none hidden."""
    indexes: dict[str, int] = {}
    errors: list[str] = []
    for device, address in targets:
        try:
            indexes[device] = resolve(root, device, address, port)
        except GidError as exc:
            errors.append(str(exc))
    return {"indexes": indexes, "errors": errors}


def resolve_main(args: Sequence[str]) -> int:
    """``--resolve [--root DIR] [--port N] DEVICE=IPV4...``: the table of each target, as JSON."""
    rest, root, port = list(args), Path(SYSFS_ROOT), PORT
    try:
        while rest and rest[0] in ("--root", "--port"):
            flag, value, rest = rest[0], rest[1], rest[2:]
            if flag == "--root":
                root = Path(value)
            elif value.isdigit():
                port = int(value)
            else:
                raise GidError(f"--port {value!r} is not a port number")
        targets = parse_targets(",".join(rest))
    except (GidError, IndexError) as exc:
        print(f"{PREFIX} FATAL: {exc or 'an option without its value'}", file=sys.stderr)
        return EXIT_USAGE
    if not targets:
        print(f"{PREFIX} FATAL: --resolve needs DEVICE=IPV4 targets", file=sys.stderr)
        return EXIT_USAGE
    result = resolve_all(root, targets, port)
    print(json.dumps(result, sort_keys=True), flush=True)
    return EXIT_UNRESOLVED if result["errors"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--resolve"]:
        return resolve_main(args[1:])
    command = args[args.index("--") + 1 :] if "--" in args else []
    if not command:
        print(f"{PREFIX} FATAL: no command after '--'", file=sys.stderr)
        return EXIT_USAGE
    try:
        env, notes = rank_environment(os.environ)
    except GidError as exc:
        print(f"{PREFIX} FATAL: {exc} The engine was NOT started.", file=sys.stderr, flush=True)
        return EXIT_UNRESOLVED
    for note in notes:
        print(f"{PREFIX} {note}", file=sys.stderr if "WARNING" in note else sys.stdout, flush=True)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"{PREFIX} FATAL: cannot exec {command[0]}: {exc}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main())
