"""A chain between lab containers: the head and three peers, two fabric rails each (one Docker
network per rail), every rail shaped to the same rate R by ``tc``. The head pushes to the first
peer only; each peer relays every file to the next while it receives, then pushes the rest once
its own copy verifies; the last peer verifies and marks. Then a byte is corrupted in one blob on
the middle peer and the switch runs again: that peer finds it, only that file is sent again, and
the chain completes.

What it proves: the relay over both rails between separate network stacks, each hop verified;
an aggregate rate above 2 x R, which no fan-out can reach (the head's two rails carry every byte
of a fan-out, so it is bounded by 2 x R: ``lab/bench_rails.py`` measured 1.89 x R), and the
measured copy against the chain estimate (:func:`sparkrack.planner.switch.chain_seconds`). What it
does not: the Kubernetes side (KWOK pods run no container), real CX-7 links.
``lab/bench_rails.py`` measures both shapes on a 2 GB model.

Holds ``/tmp/sparkrack-lab.lock``; the containers and networks are its own
(``sparkrack-chainlab-*``). Skipped only without Docker.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from sparkrack.inputs.inventory import load_inventory
from sparkrack.planner.switch import Rates, chain_seconds, fan_out_seconds, within
from sparkrack.serving.scripts import fetch_base
from sparkrack.serving.switch import plan as fetchplan

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab"))
import fetchlab  # noqa: E402

pytestmark = pytest.mark.docker
LOCK = Path("/tmp/sparkrack-lab.lock")
PREFIX = "sparkrack-chainlab"
NAMES = ["spark1", "spark2", "spark3", "spark4"]
REPO = "sparkrack/fake-chain"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SHARDS = 8
SHARD_MIB = 32
RATE_MBIT = 100
"""R: 12.5 MB/s per rail; the 268 MB model takes 11 s per hop over two rails."""
SECRETS = "/run/sparkrack-rsync"
MANIFEST_FILE = f"{SECRETS}/manifest.sha256"
PORT = fetchplan.DEFAULT_PORT
TOLERANCE = 0.35
"""How far the chain estimate may be from the measured copy: the hops overlap, and each relay
batch starts a process per rail."""
FAN_OUT_CEILING = 2
"""A fan-out's aggregate rate at most, in R: the head's two rails carry all of it."""


@pytest.fixture(scope="module")
def chain(lab: ModuleType) -> Iterator[tuple[fetchlab.Fabric, str]]:
    if not fetchlab.docker_answers():
        pytest.skip("no Docker engine answers (`docker version` fails): needs four containers")
    mtu = load_inventory(ROOT / "inventories" / "lab").plan().mtu
    boxes = [f"{PREFIX}-{n}" for n in NAMES]
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            image, _ = lab.ensure_image()
            fab = fetchlab.up(PREFIX, NAMES, 2, image, mtu)
            password = secrets.token_hex(16)
            data = fetchplan.rsync_secret_data(password)
            for box in boxes:  # every Spark but the last pushes, every peer receives
                fetchlab.sh(box, f"mkdir -p {SECRETS}")
                for key in (fetchplan.PASSWORD_KEY, fetchplan.SECRETS_KEY):
                    fetchlab.put(box, f"{SECRETS}/{key}", data[key])
            made = fetchlab.sh(
                boxes[0], fetchlab.snapshot_script(REPO, REVISION, SHARDS, SHARD_MIB), timeout=300
            )
            assert made.returncode == 0, made.stderr
            # The head manifest's sha256, where the serve play's ConfigMap puts it for receivers.
            manifest = f"/cache/{fetch_base.manifest_relpath(REPO, REVISION)}"
            digest = fetchlab.sh(boxes[0], f"sha256sum {manifest}").stdout.split()[0]
            for box in boxes[1:]:
                fetchlab.put(box, MANIFEST_FILE, digest, "0644")
            fetchlab.shape(fab, RATE_MBIT)
            yield fab, password
        finally:
            fetchlab.down(PREFIX, boxes, 2)


def run_chain(fab: fetchlab.Fabric) -> tuple[float, str, list[str]]:
    """The switch's copy as the plan renders a chain: a receiver per peer (the one before
    allowed, the one after relayed to), then the head's push to the first. Returns the wall
    seconds from the push's start until every receiver has ended, the push's output and each
    receiver's output."""
    head, *peers = fab.boxes
    need = SHARDS * SHARD_MIB * 2**20
    procs = []
    upstream = [head, *peers[:-1]]
    downstream: list[str | None] = [*peers[1:], None]
    for box, source, after in zip(peers, upstream, downstream, strict=True):
        argv = fetchplan.receive_argv(
            "/peer", need, f"{SECRETS}/{fetchplan.SECRETS_KEY}", REPO, REVISION,
            list(fab.addresses[source]), PORT, address=list(fab.addresses[box]),
            timeout_s=600, interval_s=30,
            relay_to=list(fab.addresses[after]) if after else [],
            relay_password_file=f"{SECRETS}/{fetchplan.PASSWORD_KEY}" if after else None,
            phases="/tmp/phases" if after else None, manifest_sha256_file=MANIFEST_FILE,
        )  # fmt: skip
        procs.append(
            subprocess.Popen(
                ["docker", "exec", box, *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
        )
    for box in peers:
        deadline = time.monotonic() + 30
        while fetchlab.sh(box, f"grep -q ':{PORT:04X} ' /proc/net/tcp").returncode != 0:
            assert time.monotonic() < deadline, f"no receiver listening on {box}"
            time.sleep(0.2)
    push = fetchplan.push_argv(
        "/cache", REPO, REVISION, [fab.addresses[peers[0]][0]],
        f"{SECRETS}/{fetchplan.PASSWORD_KEY}", PORT, timeout_s=600, interval_s=30,
        other_rails=[[fab.addresses[peers[0]][1]]],
    )  # fmt: skip
    outputs: list[str] = [""] * len(procs)

    def collect(i: int) -> None:
        outputs[i] = procs[i].communicate(timeout=900)[0]

    readers = [threading.Thread(target=collect, args=(i,)) for i in range(len(procs))]
    start = time.monotonic()
    for reader in readers:
        reader.start()
    pushed = subprocess.run(
        ["docker", "exec", head, *push], capture_output=True, text=True, timeout=900, check=False
    )
    for reader in readers:
        reader.join()
    wall = time.monotonic() - start
    assert pushed.returncode == 0, pushed.stdout[-3000:] + pushed.stderr
    for box, proc, out in zip(peers, procs, outputs, strict=True):
        assert proc.returncode == 0, f"{box}: {out[-3000:]}"
    return wall, pushed.stdout + pushed.stderr, outputs


def sums(box: str, cache: str) -> str:
    folder = f"{cache}/models--{REPO.replace('/', '--')}/snapshots/{REVISION}"
    return fetchlab.sh(box, f"cd {folder} && sha256sum -- *").stdout


def test_a_chain_of_three_peers_relays_over_both_rails_and_verifies_each_hop(
    chain: tuple[fetchlab.Fabric, str],
) -> None:
    fab, password = chain
    head, *peers = fab.boxes
    for box in peers:
        fetchlab.sh(box, "rm -rf /peer /tmp/phases")
    load = os.getloadavg()
    wall, pushed, outputs = run_chain(fab)
    for out in outputs:
        print(out[-4000:])
    model = SHARDS * SHARD_MIB * 2**20
    rate = RATE_MBIT * 1e6 / 8
    aggregate = model * len(peers) / wall
    rates = Rates(RATE_MBIT, 1_000, 100_000, cores=os.cpu_count() or 1)
    predicted = chain_seconds(model, len(peers), 2, rates, SHARD_MIB * 2**20)
    fan = fan_out_seconds(model, len(peers), 2, rates)
    print(
        f"chain head -> 3 peers, {model / 1e6:.0f} MB, 2 rails at R = {RATE_MBIT} Mbit/s: every "
        f"peer verified in {wall:.1f} s, aggregate {aggregate / 1e6:.1f} MB/s = "
        f"{aggregate / rate:.2f} x R; chain estimate {predicted:.1f} s, fan-out estimate "
        f"{fan:.1f} s; load before {load}, after {os.getloadavg()}"
    )
    want = sums(head, "/cache")
    for box in peers:
        assert sums(box, "/peer") == want, box
        marker = fetchplan.marker_path("/peer", REPO, REVISION)
        assert fetchlab.sh(box, f"test -s {marker}").returncode == 0, box
    # Every relaying peer passed files on before its own copy had verified.
    for out in outputs[:-1]:
        lines = out.splitlines()
        passed = [i for i, ln in enumerate(lines) if "file(s) passed on" in ln]
        verified = next(i for i, ln in enumerate(lines) if "round 1: every file verified" in ln)
        assert passed and passed[0] < verified, out[-3000:]
    assert "passed on" not in outputs[-1]
    # Each hop used both rails: its phase records (what the receiver's termination message
    # carries), bytes on rail 0 and rail 1 to the next peer.
    for box, after in zip(peers[:-1], peers[1:], strict=True):
        records = fetch_base.read_phases(fetchlab.sh(box, "cat /tmp/phases").stdout)
        copies = {
            int(str(r["rail"])): int(str(r["bytes"])) for r in records if r["phase"] == "copy"
        }
        assert sorted(copies) == [0, 1] and min(copies.values()) > model / 4, (box, records)
        assert {r["peer"] for r in records} == {fab.addresses[after][0]}
        assert {r["via"] for r in records} == {fab.addresses[box][0]}
    # A fan-out sends every byte through the head's two rails: at most 2 x R, and its estimate
    # of this copy (printed above) is longer than the wall measured here.
    assert aggregate > FAN_OUT_CEILING * rate, f"{aggregate / rate:.2f} x R"
    assert wall < fan, (fan, wall)
    assert within(predicted, wall, TOLERANCE), (predicted, wall)
    assert password not in pushed + "".join(outputs)


def test_a_corrupted_blob_on_the_middle_peer_is_sent_again_alone(
    chain: tuple[fetchlab.Fabric, str],
) -> None:
    fab, _password = chain
    head, *peers = fab.boxes
    middle = peers[1]
    if fetchlab.sh(peers[-1], "test -d /peer").returncode != 0:
        run_chain(fab)
    folder = f"/peer/models--{REPO.replace('/', '--')}/blobs"
    victim = fetchlab.sh(middle, f"ls -S {folder} | head -1").stdout.strip()  # a shard
    flipped = fetchlab.sh(
        middle,
        f"python3 -c \"import os; p='{folder}/{victim}'; st=os.stat(p); f=open(p,'r+b'); "
        "f.seek(4096); b=f.read(1); f.seek(4096); f.write(bytes([b[0]^1])); f.close(); "
        'os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))"',
    )
    assert flipped.returncode == 0, flipped.stderr
    assert sums(middle, "/peer") != sums(head, "/cache")
    _wall, _pushed, outputs = run_chain(fab)
    first, mid, last = outputs
    # The first peer pushes to the middle one: it finds the one bad file, gets it again alone.
    assert "round 1: the peer found 1 bad: " in first, first[-3000:]
    assert "round 2: every file verified" in mid, mid[-3000:]
    recv = [ln.split()[-2] for ln in mid.splitlines() if " recv " in ln and "blobs/" in ln]
    assert recv == [f"blobs/{victim}"], recv
    for box in peers:
        assert sums(box, "/peer") == sums(head, "/cache"), box
    # The last peer had good bytes all along: one round.
    assert "round 1: every file verified" in last and "files to send again" not in last
