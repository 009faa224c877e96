"""The memory settle step: the one /proc/meminfo reader, the gate on MemFree with the receding
trend, and the flush loop that runs for the whole load.

A temporary folder stands in for /proc/sys/vm: the tests run as root and must never drop this
machine's caches. The loop is observed through its ``sleep``: each interval, the test reads what
was written into the stand-in and clears it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkrack.serving.scripts import memsettle

SCRIPT = Path(memsettle.__file__)
GIB = memsettle.GIB

# /proc/meminfo as a 6.x kernel writes it: a page cache full of just-fetched weights, so
# MemAvailable is far above MemFree.
MEMINFO = """\
MemTotal:       127571400 kB
MemFree:        {free} kB
MemAvailable:   {available} kB
Buffers:          123456 kB
Cached:         {cached} kB
SwapCached:            0 kB
Active:          4567890 kB
Inactive:       61234567 kB
Active(anon):    3210000 kB
Inactive(anon):        0 kB
HugePages_Total:       0
HugePages_Free:        0
Hugepagesize:       2048 kB
"""


def meminfo(path: Path, free_gib: float, cached_gib: float = 0.0) -> Path:
    free = round(free_gib * GIB / 1024)
    cached = round(cached_gib * GIB / 1024)
    path.write_text(MEMINFO.format(free=free, available=free + cached, cached=cached))
    return path


def test_reads_this_machines_proc_meminfo() -> None:
    info = memsettle.read_meminfo(Path("/proc/meminfo"))
    # glibc's _SC_PHYS_PAGES is sysinfo's totalram, the kernel's MemTotal.
    assert info.total == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < info.free <= info.available <= info.total
    assert 0 <= info.cached < info.total


def test_parses_every_field_in_bytes_and_refuses_what_is_not_meminfo(tmp_path: Path) -> None:
    info = memsettle.read_meminfo(meminfo(tmp_path / "m", 20.0, cached_gib=90.0))
    assert info.total == 127571400 * 1024
    assert info.free == round(20.0 * GIB / 1024) * 1024
    assert info.available - info.free == info.cached  # the page cache MemAvailable counts
    (tmp_path / "bad").write_text("MemTotal: 1 kB\nMemAvailable: 1 kB\n")
    with pytest.raises(memsettle.SettleError, match="no MemFree, Cached line"):
        memsettle.read_meminfo(tmp_path / "bad")


class Observer:
    """``sleep`` for the loops: records each interval and what was written since the last."""

    def __init__(self, vm: Path, on_sleep: Callable[[int], None] | None = None) -> None:
        self.vm = vm
        self.intervals: list[float] = []
        self.writes: list[tuple[str, str]] = []
        self.on_sleep = on_sleep

    def __call__(self, seconds: float) -> None:
        self.intervals.append(seconds)
        drop, compact = self.vm / memsettle.DROP_CACHES, self.vm / memsettle.COMPACT_MEMORY
        self.writes.append((drop.read_text(), compact.read_text()))
        drop.write_text(""), compact.write_text("")
        if self.on_sleep is not None:
            self.on_sleep(len(self.intervals))


@pytest.fixture
def vm(tmp_path: Path) -> Path:
    folder = tmp_path / "vm"
    folder.mkdir()
    return folder


def test_gate_stops_when_free_memory_recedes(tmp_path: Path, vm: Path) -> None:
    info = meminfo(tmp_path / "meminfo", 112.15)
    trend = {1: 112.05, 2: 111.95}
    obs = Observer(vm, lambda n: meminfo(info, trend.get(n, 200.0)))
    with pytest.raises(memsettle.SettleError) as failed:
        memsettle.gate(120 * GIB, info, vm, attempts=10, interval=7.0, sleep=obs)
    assert failed.value.code == memsettle.EXIT_RECEDING
    assert "112.15 GiB -> 112.05 GiB -> 111.95 GiB" in str(failed.value)
    assert failed.value.readings == [round(g * GIB / 1024) * 1024 for g in (112.15, 112.05, 111.95)]
    # Every attempt flushed before it read; no fourth attempt into the wedge.
    assert obs.writes == [("3", "1"), ("3", "1")] and obs.intervals == [7.0, 7.0]
    assert (vm / "drop_caches").read_text() == "3"


def test_gate_passes_once_the_flush_frees_enough(tmp_path: Path, vm: Path) -> None:
    info = meminfo(tmp_path / "meminfo", 30.0, cached_gib=90.0)  # MemAvailable 120 GiB
    obs = Observer(vm, lambda n: meminfo(info, 30.0 + 40 * n))
    frees = memsettle.gate(100 * GIB, info, vm, attempts=5, interval=1.0, sleep=obs)
    assert [f / GIB for f in frees] == pytest.approx([30.0, 70.0, 110.0], abs=0.01)
    assert len(obs.writes) == 2


def test_gate_decides_on_memfree_not_memavailable(tmp_path: Path, vm: Path) -> None:
    info = meminfo(tmp_path / "meminfo", 20.0, cached_gib=100.0)  # MemAvailable 120 GiB
    with pytest.raises(memsettle.SettleError, match="MemFree 20.00 GiB < need 100.00 GiB"):
        memsettle.gate(100 * GIB, info, vm, attempts=2, interval=1.0, sleep=Observer(vm))


def assert_flushes_every_interval(loop: Callable[..., int], vm: Path, info: Path) -> None:
    """The rule of the load-time loop: a flush in every interval for as long as the load runs,
    whatever MemFree says (here it stays well above any threshold), and none after."""
    ticks = iter(range(6))
    obs = Observer(vm)
    flushes = loop(vm, 5.0, lambda: next(ticks) >= 4, obs, info)
    assert flushes == 4
    assert obs.intervals == [5.0] * 4
    assert obs.writes == [("3", "1")] * 4, f"not flushed in every interval: {obs.writes}"
    assert next(ticks) == 5  # stopped asking once the load ended


def unconditional(
    vm: Path, interval: float, done: Callable[[], bool], sleep: Callable[[float], None], _: Path
) -> int:
    return memsettle.hold(vm, interval, done, sleep=sleep)


def threshold_only(
    vm: Path, interval: float, done: Callable[[], bool], sleep: Callable[[float], None], info: Path
) -> int:
    """A flusher that writes only when MemFree is below 16 GiB: the shape the reports warn of."""
    flushes = 0
    while not done():
        if memsettle.read_meminfo(info).free < 16 * GIB:
            memsettle.flush(vm)
            flushes += 1
        else:
            (vm / memsettle.DROP_CACHES).write_text("")
            (vm / memsettle.COMPACT_MEMORY).write_text("")
        sleep(interval)
    return flushes


def test_hold_flushes_every_interval_until_the_load_ends(tmp_path: Path, vm: Path) -> None:
    assert_flushes_every_interval(unconditional, vm, meminfo(tmp_path / "m", 60.0))


def test_a_threshold_only_flusher_fails_the_rule(tmp_path: Path, vm: Path) -> None:
    with pytest.raises(AssertionError):
        assert_flushes_every_interval(threshold_only, vm, meminfo(tmp_path / "m", 60.0))


def test_run_flushes_while_a_real_load_runs_and_passes_its_exit_code(
    tmp_path: Path, vm: Path
) -> None:
    record = tmp_path / "record.json"
    load = [sys.executable, "-c", "import time, sys; time.sleep(0.5); sys.exit(7)"]
    argv = ["--vm", str(vm), "--interval", "0.05", "--record", str(record), "run", "--", *load]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 7, done.stderr
    assert (vm / "drop_caches").read_text() == "3"
    assert (vm / "compact_memory").read_text() == "1"
    assert f"flushes of {vm} while the load ran (exit 7)" in done.stdout
    assert '"step": "run"' in record.read_text()


def test_flush_names_the_path_it_cannot_write(tmp_path: Path) -> None:
    with pytest.raises(memsettle.SettleError, match="absent/drop_caches .*runs privileged"):
        memsettle.flush(tmp_path / "absent")
