"""The rank's GID resolver on sysfs trees laid out as the kernel lays them out.

``/sys/class/infiniband/<dev>/ports/1/gids/<i>`` holds the GID as ``%pI6`` prints it (the zero
GID for an empty slot); ``gid_attrs/types/<i>`` and ``gid_attrs/ndevs/<i>`` hold the type and
netdev, and their read fails on an empty slot (drivers/infiniband/core/sysfs.c). A table of a
ConnectX VF with an IPv4 address has the link-local entries at 0 and 1 and the IPv4-mapped
entries after them; the VF re-creation the ``sriov`` unit does on boot can move them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.errors import SparkrackError
from sparkrack.fabric import gidtable
from sparkrack.fabric.gidtable import GidError, decide, ipv4_gid, resolve

DEV0, DEV1 = "rocep1s0f0v0", "roceP2p1s0f0v0"
ADDR0, ADDR1 = "10.77.0.17", "10.77.1.17"
LINK_LOCAL = "fe80:0000:0000:0000:0e42:a1ff:fe3b:52c0"
V1, V2 = "IB/RoCE v1", "RoCE v2"
TABLE_SIZE = 8


def port(root: Path, device: str, slots: dict[int, tuple[str, str]], netdev: str = "net1") -> Path:
    """A port-1 table of ``TABLE_SIZE`` slots; ``slots``: index -> (gid, type). Empty slots read
    as the zero GID and have no readable type or ndev (here: no file, so the read fails)."""
    base = root / device / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    for i in range(TABLE_SIZE):
        gid, gid_type = slots.get(i, (gidtable.ZERO_GID, ""))
        (base / "gids" / str(i)).write_text(gid + "\n")
        if gid_type:
            (base / "gid_attrs" / "types" / str(i)).write_text(gid_type + "\n")
            (base / "gid_attrs" / "ndevs" / str(i)).write_text(netdev + "\n")
    return root


def usual(address: str, v2_at: int = 3) -> dict[int, tuple[str, str]]:
    mapped = ipv4_gid(address)
    v1_at = 2 if v2_at != 2 else 4
    return {0: (LINK_LOCAL, V1), 1: (LINK_LOCAL, V2), v1_at: (mapped, V1), v2_at: (mapped, V2)}


def test_ipv4_mapped_gid_in_the_sysfs_spelling() -> None:
    assert ipv4_gid(ADDR0) == "0000:0000:0000:0000:0000:ffff:0a4d:0011"


def test_the_usual_table_gives_index_3(tmp_path: Path) -> None:
    root = port(tmp_path, DEV0, usual(ADDR0))
    assert resolve(root, DEV0, ADDR0) == 3


def test_a_moved_index_is_followed(tmp_path: Path) -> None:
    # Re-created VF: the v1 entry took slot 3, the v2 entry went to 4.
    mapped = ipv4_gid(ADDR0)
    slots = {0: (LINK_LOCAL, V1), 1: (LINK_LOCAL, V2), 3: (mapped, V1), 4: (mapped, V2)}
    root = port(tmp_path, DEV0, slots)
    assert resolve(root, DEV0, ADDR0) == 4


def test_a_missing_ipv4_entry_is_refused_with_what_the_table_holds(tmp_path: Path) -> None:
    root = port(tmp_path, DEV0, {0: (LINK_LOCAL, V1), 1: (LINK_LOCAL, V2)})
    with pytest.raises(GidError) as err:
        resolve(root, DEV0, ADDR0)
    text = str(err.value)
    assert f"no RoCE v2 GID for {ADDR0} on {DEV0}" in text
    assert f"1={LINK_LOCAL} (RoCE v2, net1)" in text and "netplan" in text


def test_the_v1_entry_of_the_address_is_not_taken(tmp_path: Path) -> None:
    root = port(tmp_path, DEV0, {0: (LINK_LOCAL, V1), 2: (ipv4_gid(ADDR0), V1)})
    with pytest.raises(GidError):
        resolve(root, DEV0, ADDR0)


def test_another_address_is_not_taken(tmp_path: Path) -> None:
    root = port(tmp_path, DEV0, usual("10.77.0.18"))
    with pytest.raises(GidError):
        resolve(root, DEV0, ADDR0)


def test_a_device_not_in_the_container_is_named(tmp_path: Path) -> None:
    with pytest.raises(GidError, match="no GID table"):
        resolve(tmp_path, DEV0, ADDR0)


def test_two_rails_at_one_index(tmp_path: Path) -> None:
    port(tmp_path, DEV0, usual(ADDR0))
    port(tmp_path, DEV1, usual(ADDR1))
    decision = decide(tmp_path, [(DEV0, ADDR0), (DEV1, ADDR1)], None)
    assert decision.index == 3


def test_two_rails_at_different_indexes_are_refused(tmp_path: Path) -> None:
    port(tmp_path, DEV0, usual(ADDR0))
    port(tmp_path, DEV1, usual(ADDR1, v2_at=4))
    with pytest.raises(GidError, match="different indexes"):
        decide(tmp_path, [(DEV0, ADDR0), (DEV1, ADDR1)], None)


def test_the_override_wins_and_warns_on_a_mismatch(tmp_path: Path) -> None:
    port(tmp_path, DEV0, usual(ADDR0, v2_at=4))
    decision = decide(tmp_path, [(DEV0, ADDR0)], 3)
    assert decision.index == 3
    assert any("WARNING: the override 3 differs" in n and f"{DEV0}=4" in n for n in decision.notes)


def test_negative_control_an_agreeing_override_does_not_warn(tmp_path: Path) -> None:
    port(tmp_path, DEV0, usual(ADDR0))
    decision = decide(tmp_path, [(DEV0, ADDR0)], 3)
    assert decision.index == 3
    assert not any("WARNING" in n for n in decision.notes)


@pytest.mark.parametrize(
    "targets",
    ["rocep1s0f0v0", "=10.77.0.17", "../x=10.77.0.17", "rocep1s0f0v0=10.77.0", "d=::1"],
)
def test_malformed_targets_are_refused(targets: str) -> None:
    with pytest.raises(GidError):
        gidtable.parse_targets(targets)


def run_resolver(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """The shipped file as the pod runs it: ``python3 -I gidtable.py -- COMMAND``."""
    env = {"PATH": os.environ["PATH"], gidtable.ROOT_ENV: str(tmp_path), **extra}
    show = "import os; print('INDEX', os.environ.get('NCCL_IB_GID_INDEX'))"
    return subprocess.run(
        [sys.executable, "-I", gidtable.__file__, "--", sys.executable, "-c", show],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_shipped_program_hands_the_index_to_the_command(tmp_path: Path) -> None:
    port(tmp_path, DEV0, usual(ADDR0, v2_at=5))
    done = run_resolver(tmp_path, SPARKRACK_GID_TARGETS=f"{DEV0}={ADDR0}")
    assert done.returncode == 0, done.stderr
    assert "INDEX 5" in done.stdout


def test_the_shipped_program_stops_before_the_command_without_an_entry(tmp_path: Path) -> None:
    port(tmp_path, DEV0, {0: (LINK_LOCAL, V1)})
    done = run_resolver(tmp_path, SPARKRACK_GID_TARGETS=f"{DEV0}={ADDR0}")
    assert done.returncode == gidtable.EXIT_UNRESOLVED
    assert "INDEX" not in done.stdout
    assert "The engine was NOT started" in done.stderr


def test_without_targets_the_command_runs_unchanged(tmp_path: Path) -> None:
    done = run_resolver(tmp_path)
    assert done.returncode == 0 and "INDEX None" in done.stdout


# --- the roce role's form: --resolve, one reader at converge too ------------------------------


def run_resolve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", str(Path(gidtable.__file__)), "--resolve", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_resolve_prints_each_targets_index_and_follows_a_moved_one(tmp_path: Path) -> None:
    port(tmp_path, DEV0, usual(ADDR0))
    port(tmp_path, DEV1, usual(ADDR1, v2_at=4))  # this VF's entry moved on re-creation
    done = run_resolve("--root", str(tmp_path), f"{DEV0}={ADDR0}", f"{DEV1}={ADDR1}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"indexes": {DEV0: 3, DEV1: 4}, "errors": []}


def test_resolve_names_a_missing_ipv4_entry_and_fails(tmp_path: Path) -> None:
    port(tmp_path, DEV0, usual(ADDR0))
    port(tmp_path, DEV1, {0: (LINK_LOCAL, V1), 1: (LINK_LOCAL, V2)})  # no IPv4 on the VF
    done = run_resolve("--root", str(tmp_path), f"{DEV0}={ADDR0}", f"{DEV1}={ADDR1}")
    assert done.returncode == gidtable.EXIT_UNRESOLVED
    result = json.loads(done.stdout)
    assert result["indexes"] == {DEV0: 3}
    [error] = result["errors"]
    assert f"no RoCE v2 GID for {ADDR1} on {DEV1}" in error and "Fix:" in error


def test_resolve_refuses_bad_arguments(tmp_path: Path) -> None:
    assert run_resolve("--root", str(tmp_path)).returncode == gidtable.EXIT_USAGE
    assert run_resolve(f"{DEV0}=not-an-address").returncode == gidtable.EXIT_USAGE
    assert run_resolve("--port", "x", f"{DEV0}={ADDR0}").returncode == gidtable.EXIT_USAGE
    assert run_resolve("--root").returncode == gidtable.EXIT_USAGE


def test_the_labs_stand_in_tree_reads_like_the_kernels(tmp_path: Path) -> None:
    """The stand-in the roce role writes in the lab: the same reader finds the planned index,
    and its table holds what a ConnectX VF's holds (link-local v1/v2, IPv4 v1/v2)."""
    from sparkrack.fabric import gidstandin

    folders, files = gidstandin.files(str(tmp_path), [(DEV0, ADDR0, "enp1s0f0v0")], 5)
    for folder in folders:
        Path(folder).mkdir(parents=True, exist_ok=True)
    for f in files:
        Path(f["dest"]).write_text(f["content"])
    assert resolve(tmp_path, DEV0, ADDR0) == 5
    table = gidtable.read_table(tmp_path, DEV0)
    assert [(e.index, e.type) for e in table] == [(0, V1), (1, V2), (4, V1), (5, V2)]
    assert {e.ndev for e in table} == {"enp1s0f0v0"}
    with pytest.raises(SparkrackError, match="not 2"):
        gidstandin.files(str(tmp_path), [(DEV0, ADDR0, "x")], 2)
