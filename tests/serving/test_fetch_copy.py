"""The fetch step's copy for real: two lab containers, rsync over a fabric-like Docker network.

Container A plays the head Spark: a snapshot of random data (2 GB, less where the Docker disk has
too little room: :func:`shard_mib`) in huggingface_hub 1.x's layout
(the shards moved into the cache-wide shared blob store by hub 1.x's own publishing code, the
repo's blobs links into it), a manifest of its sha256s, marked; B another Spark (``receive`` runs
a real rsync daemon, verifies against the manifest, writes the marker). Cases: the full copy
(byte-identical blobs, links intact, shared store along, an offline load by hub 1.x on B), the
disk-space refusal on a tmpfs one shard large, and an interrupted push that a rerun resumes (rsync
``--stats``: less literal data the second time).

The containers and their network are this test's own (``sparkrack-fetchtest-*``); the Docker work
holds ``/tmp/sparkrack-lab.lock`` like every other lab user. Skipped only without Docker.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import hubversions
import pytest
from copytimeline import copy_lines

from sparkrack.inputs.inventory import load_inventory
from sparkrack.planner.switch import (
    VERDICT_OVERHEAD_S,
    Rates,
    copy_seconds,
    peer_verify_seconds,
    within,
)
from sparkrack.serving.scripts import fetch_base
from sparkrack.serving.switch import plan as fetchplan

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab"))
import fetchlab  # noqa: E402

pytestmark = pytest.mark.docker
LOCK = Path("/tmp/sparkrack-lab.lock")
NAME = "sparkrack-fetchtest"
NETWORK = f"{NAME}-fabric"
LABEL = "io.sparkrack.lab=fetchtest"
REPO = "sparkrack/fake-model"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SHARDS = 4
SHARD_SIZES_MIB = (512, 256, 128, 64, 32, 16, 8, 4)
"""4 shards of 512 MiB: the 2 GB model; smaller where the disk is short (the figures scale)."""
DISK_FACTOR = 6
"""Model sizes the module writes at most: the head's snapshot, three copies on the peer
(``/cache``, ``/estimate``, ``/resume``), the receiver's free-space margin, one spare."""
PORT = fetchplan.DEFAULT_PORT
SECRETS_DIR = "/run/sparkrack-rsync"
MANIFEST_FILE = f"{SECRETS_DIR}/manifest.sha256"
SMALL = "/small"
HUB1 = "/opt/hub1"


def step(box: str, argv: list[str]) -> list[str]:
    """``docker exec`` argv for the fetch step inside a container."""
    return ["docker", "exec", box, *argv]


@dataclass(frozen=True)
class Pair:
    head: str
    peer: str
    peer_ip: str
    head_ip: str
    password: str
    shard_mib: int

    @property
    def total(self) -> int:
        """The snapshot's shards, in bytes."""
        return self.shard_mib * SHARDS * 2**20


def shard_mib() -> int:
    """``SPARKRACK_FETCHTEST_SHARD_MIB``, else the largest of :data:`SHARD_SIZES_MIB` whose
    model fits :data:`DISK_FACTOR` times in the Docker disk's free space (skip below the least)."""
    if os.environ.get("SPARKRACK_FETCHTEST_SHARD_MIB"):
        return int(os.environ["SPARKRACK_FETCHTEST_SHARD_MIB"])
    root = fetchlab.docker("info", "-f", "{{.DockerRootDir}}").strip()
    free = shutil.disk_usage(root).free
    for mib in SHARD_SIZES_MIB:
        if DISK_FACTOR * SHARDS * mib * 2**20 <= free:
            return mib
    pytest.skip(f"{free / 1e6:.0f} MB free under {root}: too little for even the smallest copy")


def _cleanup(boxes: list[str]) -> None:
    fetchlab.docker("rm", "-f", "-v", *boxes, check=False)
    fetchlab.docker("network", "rm", NETWORK, check=False)


@pytest.fixture(scope="module")
def pair(lab: ModuleType) -> Iterator[Pair]:
    if not fetchlab.docker_answers():
        pytest.skip(
            "no Docker engine answers (`docker version` fails): the copy test needs two containers"
        )
    mtu = load_inventory(ROOT / "inventories" / "lab").plan().mtu
    boxes = [f"{NAME}-a", f"{NAME}-b"]
    hub1 = hubversions.target(hubversions.HUB_1)
    assert hub1 is not None
    with LOCK.open("a") as lock:
        waited = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        print(f"lab lock after {time.monotonic() - waited:.0f} s")
        try:
            tag, _ = lab.ensure_image()
            _cleanup(boxes)
            mib = shard_mib()
            fetchlab.docker(
                "network", "create", "--driver", "bridge", "--internal",
                "-o", f"com.docker.network.driver.mtu={mtu}", "--label", LABEL, NETWORK,
            )  # fmt: skip
            for box in boxes:
                extra = ["--tmpfs", f"{SMALL}:size={mib}m"] if box.endswith("-b") else []
                fetchlab.docker(
                    "run", "-d", "--name", box, "--hostname", box, "--network", NETWORK,
                    "--label", LABEL, *extra, tag, "sleep", "infinity",
                )  # fmt: skip
                fetchlab.docker("exec", box, "mkdir", "-p", str(fetchplan.SCRIPT_DIR), SECRETS_DIR)
                for name in fetchplan.SCRIPT_FILES:
                    fetchlab.docker(
                        "cp",
                        str(ROOT / "sparkrack/serving/scripts" / name),
                        f"{box}:{fetchplan.SCRIPT_DIR / name}",
                    )
                fetchlab.docker("cp", f"{hub1}/.", f"{box}:{HUB1}")
            head_ip, peer_ip = (
                fetchlab.docker(
                    "inspect", "-f",
                    f'{{{{(index .NetworkSettings.Networks "{NETWORK}").IPAddress}}}}', box,
                ).strip()
                for box in boxes
            )  # fmt: skip
            password = secrets.token_hex(16)
            data = fetchplan.rsync_secret_data(password)
            # As a Secret volume mounts them: world-readable files the step must cope with.
            for box, key in ((boxes[0], fetchplan.PASSWORD_KEY), (boxes[1], fetchplan.SECRETS_KEY)):
                put = subprocess.run(
                    ["docker", "exec", "-i", box, "sh", "-c", f"cat > {SECRETS_DIR}/{key}; chmod 0644 {SECRETS_DIR}/{key}"],
                    input=data[key], text=True, capture_output=True, timeout=30, check=False,
                )  # fmt: skip
                assert put.returncode == 0, put.stderr
            made_at = time.monotonic()
            made = fetchlab.sh(boxes[0], make_snapshot_script(mib), timeout=300)
            assert made.returncode == 0, made.stderr
            made_s = time.monotonic() - made_at
            # The head manifest's sha256, where the serve play's ConfigMap puts it for a receiver.
            digest = fetchlab.docker("exec", boxes[0], "sha256sum", "/cache/manifest.json").split()[
                0
            ]
            put = subprocess.run(
                ["docker", "exec", "-i", boxes[1], "sh", "-c", f"cat > {MANIFEST_FILE}"],
                input=digest, text=True, capture_output=True, timeout=30, check=False,
            )  # fmt: skip
            assert put.returncode == 0, put.stderr
            found = Pair(boxes[0], boxes[1], peer_ip, head_ip, password, mib)
            print(
                f"{found.total / 1e9:.2f} GB random snapshot ({mib} MiB shards) in {made_s:.0f} s"
            )
            yield found
        finally:
            _cleanup(boxes)


def make_snapshot_script(mib: int) -> str:
    """A hub 1.x cache entry in A: random shards named by their sha256, linked from the
    snapshot, then moved into the shared blob store by hub 1.x's ``publish_blob_to_shared_store``
    (what it does after a Xet download); a manifest of every file's sha256; marked."""
    repo = f"/cache/models--{REPO.replace('/', '--')}"
    snap = f"{repo}/snapshots/{REVISION}"
    return f"""set -eu
mkdir -p {repo}/blobs {snap}/tokenizer {repo}/refs
add() {{  # add SOURCE NAME LINKPREFIX
  h=$(sha256sum "$1" | cut -c1-64); mv "$1" {repo}/blobs/$h; ln -s "$3blobs/$h" {snap}/$2
}}
for i in $(seq 1 {SHARDS}); do
  head -c {mib}M /dev/urandom > /cache/shard
  add /cache/shard model-0000$i-of-0000{SHARDS}.safetensors ../../
done
echo '{{"architectures": ["FakeForCausalLM"]}}' > /cache/cfg; add /cache/cfg config.json ../../
head -c 4096 /dev/urandom > /cache/tok; add /cache/tok tokenizer/tokenizer.model ../../../
printf {REVISION} > {repo}/refs/main
HF_HUB_OFFLINE=1 PYTHONPATH={HUB1} python3 - <<'PY'
import glob, hashlib, json, os
from huggingface_hub.utils._shared_blobs import publish_blob_to_shared_store
files = {{}}
snap = "{snap}"
for link in sorted(glob.glob(snap + "/**", recursive=True)):
    if os.path.isdir(link) and not os.path.islink(link):
        continue
    digest = os.path.basename(os.path.realpath(link))
    files[os.path.relpath(link, snap)] = {{"size": os.path.getsize(link), "sha256": digest}}
    if os.path.getsize(link) > 1 << 20:  # the shards: Xet-backed on today's Hub
        blob = os.path.realpath(link)
        xet = hashlib.sha256(digest.encode()).hexdigest()  # stand-in Xet hash
        assert publish_blob_to_shared_store(
            blob_path=blob, xet_hash=xet, cache_dir="/cache", expected_size=os.path.getsize(blob)
        )
doc = {{"repo": "{REPO}", "revision": "{REVISION}", "commit": "{REVISION}", "files": files}}
open("/cache/manifest.json", "w").write(json.dumps(doc, indent=1, sort_keys=True) + "\\n")
PY
python3 {fetchplan.SCRIPT_PATH} mark --cache /cache --repo {REPO} --revision {REVISION} \\
  --manifest /cache/manifest.json
"""


def listing(box: str, cache: str) -> list[str]:
    """Type, size, link target and path of every entry of the model's cache folder."""
    repo = f"{cache}/models--{REPO.replace('/', '--')}"
    out = fetchlab.sh(
        box, f"cd {repo} && find . -not -path '*/.rsync-partial*' -printf '%y %s %l %p\\n' | sort"
    )
    assert out.returncode == 0, out.stderr
    return [ln for ln in out.stdout.splitlines() if not ln.startswith("d ")]


def blob_sums_ok(box: str, cache: str) -> list[str]:
    """Blobs whose sha256 differs from their name (empty when every byte arrived); the shards
    are read through the repo's links into the shared store."""
    repo = f"{cache}/models--{REPO.replace('/', '--')}"
    out = fetchlab.sh(
        box,
        f"cd {repo}/blobs && for f in *; do s=$(sha256sum $f | cut -c1-64); "
        f'[ "$s" = "$f" ] || echo "$f $s"; done; ls | wc -l; '
        f"find {cache}/blobs -mindepth 2 -type f | wc -l",
    )
    assert out.returncode == 0, out.stderr
    *bad, count, shared = out.stdout.split("\n")[:-1]
    assert int(count) == SHARDS + 2
    assert int(shared) == SHARDS  # the shards, in the shared store
    return bad


def offline_load(box: str, cache: str) -> dict[str, str]:
    """sha256 of every file of the snapshot as hub 1.x loads it offline in ``box``."""
    code = (
        "import hashlib, json, os, sys; from huggingface_hub import snapshot_download; "
        f"p = snapshot_download('{REPO}', revision='main', cache_dir='{cache}'); "
        "print(json.dumps({os.path.relpath(os.path.join(r, f), p): hashlib.sha256("
        "open(os.path.join(r, f), 'rb').read()).hexdigest() "
        "for r, _, fs in os.walk(p) for f in fs}))"
    )
    out = fetchlab.sh(box, f'HF_HUB_OFFLINE=1 PYTHONPATH={HUB1} python3 -c "{code}"')
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def start_receive(pair: Pair, cache: str, timeout: float = 150) -> subprocess.Popen[str]:
    argv = fetchplan.receive_argv(
        cache, pair.total, f"{SECRETS_DIR}/{fetchplan.SECRETS_KEY}", REPO, REVISION, pair.head_ip,
        PORT, address=pair.peer_ip, timeout_s=timeout, interval_s=2,
        manifest_sha256_file=MANIFEST_FILE,
    )  # fmt: skip
    proc = subprocess.Popen(
        step(pair.peer, argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the daemon listens: the push need not retry
        probe = fetchlab.sh(pair.peer, f"grep -q ':{PORT:04X} ' /proc/net/tcp")
        if probe.returncode == 0:
            return proc
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"receive did not listen on {PORT} within 20 s: {proc.communicate()[0]}")


def push_argv(pair: Pair, bwlimit: int | None = None) -> list[str]:
    return step(
        pair.head,
        fetchplan.push_argv(
            "/cache", REPO, REVISION, [pair.peer_ip], f"{SECRETS_DIR}/{fetchplan.PASSWORD_KEY}",
            PORT, bwlimit_kib=bwlimit, timeout_s=120, interval_s=2,
        ),
    )  # fmt: skip


def stats(output: str, key: str) -> int:
    """A number of rsync's ``--stats``, summed over the snapshot and the shared blobs."""
    values = re.findall(rf"(?:snapshot|shared blobs): {key}: ([\d,]+)", output)
    assert values, f"no rsync --stats {key!r} line in:\n{output}"
    return sum(int(v.replace(",", "")) for v in values)


def test_copy_a_snapshot_to_a_peer(pair: Pair) -> None:
    receiver = start_receive(pair, "/cache")
    start = time.monotonic()
    pushed = subprocess.run(
        push_argv(pair), capture_output=True, text=True, timeout=180, check=False
    )
    seconds = time.monotonic() - start
    received, _ = receiver.communicate(timeout=90)
    print(pushed.stdout, pushed.stderr, received, sep="\n")
    assert pushed.returncode == 0, pushed.stderr
    assert receiver.returncode == 0, received
    assert stats(pushed.stdout, "Literal data") >= pair.total  # all of it went over the wire
    print(
        f"{pair.total / 1e9:.2f} GB copy over the test fabric: {seconds:.1f} s "
        f"({pair.total / seconds / 1e6:.0f} MB/s)"
    )
    # Byte-identical (every blob hashes to its name), same tree, symlinks still relative links.
    assert blob_sums_ok(pair.peer, "/cache") == []
    assert listing(pair.peer, "/cache") == listing(pair.head, "/cache")
    links = [ln for ln in listing(pair.peer, "/cache") if ln.startswith("l ")]
    assert len(links) == 2 * SHARDS + 2 and all(" ../../" in ln for ln in links)
    marker = fetchplan.marker_path("/cache", REPO, REVISION)
    head_marker = json.loads(fetchlab.docker("exec", pair.head, "cat", str(marker)))
    # The receiver wrote its own marker after verifying: it names the same manifest.
    assert json.loads(fetchlab.docker("exec", pair.peer, "cat", str(marker))) == head_marker
    assert head_marker["bytes"] > pair.total and head_marker["files"] == SHARDS + 2
    assert offline_load(pair.peer, "/cache") == offline_load(pair.head, "/cache")
    # Every file arrived before the round that asked for verification.
    recv = re.findall(r"rsyncd: .*\brecv \S+ (\S+)", received)
    assert recv[-1] == "round" and "verified" in received
    # The shared store's blobs (hub's own .refs and .lock bookkeeping stays on the head).
    shared = fetchlab.sh(
        pair.head, "cd /cache/blobs && find . -mindepth 2 -type f -regex '.*/[0-9a-f]*'"
    ).stdout
    assert len(shared.split()) == SHARDS
    assert {p[2:] for p in shared.split()} <= set(recv)
    for text in (pushed.stdout, pushed.stderr, received):
        assert pair.password not in text


ESTIMATE_TOLERANCE = 0.25
"""How far the copy estimate may be from the measured copy (a fraction of the measurement)."""
VERIFY_SLACK_S = 0.5
"""peer-verify lasts about a second here: half a second of slack for process starts."""
CALIBRATION_MIB = 512
"""What each core hashes to measure the peer's sha256 rate: about half a second."""
CALIBRATION = """
import hashlib, os, sys, time
from concurrent.futures import ThreadPoolExecutor
cores, mib, chunk = os.cpu_count() or 1, int(sys.argv[1]), os.urandom(int(sys.argv[2]))
rounds = mib * 2**20 // len(chunk)
def one(_):
    digest = hashlib.sha256()
    for _ in range(rounds):
        digest.update(chunk)
start = time.monotonic()
with ThreadPoolExecutor(max_workers=cores) as pool:
    list(pool.map(one, range(cores)))
print(cores, cores * rounds * len(chunk) / 1e6 / (time.monotonic() - start))
"""
"""One thread per core hashing in the verify's chunks, in the peer's container: the rate its
verify gets from the cores, whatever else shares the machine. Prints the cores and MB/s."""


def hash_rate_now(box: str) -> tuple[int, float]:
    """(cores, MB/s of sha256 on all of them together) in ``box``, now."""
    cores, rate = fetchlab.docker(
        "exec", box, "python3", "-c", CALIBRATION, str(CALIBRATION_MIB), str(fetch_base.HASH_CHUNK)
    ).split()
    return int(cores), float(rate)


@pytest.mark.serial
def test_the_copy_estimate_matches_a_rate_limited_copy(pair: Pair) -> None:
    """``sparkrack plan -i``'s copy figure for this size and rate against the copy the fetch step
    measured (its phase record), the rate held by rsync --bwlimit (at most 40 000 KiB/s: about 50 s
    for the 2 GB model). Serial: the peer's verify, timed against its estimate, is a second of
    hashing and process starts that another tier's CPU stretches."""
    kib_s = max(1_000, min(40_000, pair.total // 1024 // 10))
    receiver = start_receive(pair, "/estimate")
    load = os.getloadavg()[0]
    start = time.monotonic()
    pushed = subprocess.run(
        push_argv(pair, bwlimit=kib_s), capture_output=True, text=True, timeout=300, check=False
    )
    wall = time.monotonic() - start
    received, _ = receiver.communicate(timeout=90)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert receiver.returncode == 0, received
    records = fetch_base.read_phases(pushed.stdout)
    (copied,) = [r for r in records if r["phase"] == "copy"]
    (checked,) = [r for r in records if r["phase"] == "peer-verify"]
    assert checked["peer"] == pair.peer_ip
    verified = float(str(checked["seconds"]))
    assert (copied["peer"], copied["rail"]) == (pair.peer_ip, 0)
    assert int(str(copied["bytes"])) >= pair.total
    measured = float(str(copied["seconds"]))
    cores, hashed = hash_rate_now(pair.peer)
    # The lab's rates: the rail is the rsync limit; the disk (the containers' overlay, in the
    # page cache) is no limit here; the peer hashes on this machine's cores, at the rate they
    # gave it just after the push (measured, not a Spark's figure: the machine may be shared).
    rates = Rates(
        rail_mbit_s=kib_s * 1024 * 8 / 1e6,
        download_mbit_s=1,
        disk_mbyte_s=100_000,
        cores=cores,
        verify_mbyte_s_per_core=hashed / cores,
    )
    predicted = copy_seconds(pair.total, 1, 1, rates)
    answer = peer_verify_seconds(pair.total, 1, rates)
    print(
        f"copy estimate vs measured: {pair.total / 1e9:.3f} GB to 1 peer at --bwlimit={kib_s} KiB/s "
        f"({rates.rail_mbit_s:.0f} Mbit/s): copy predicted {predicted:.1f} s, measured "
        f"{measured:.1f} s; peer-verify predicted {answer:.2f} s at {hashed:.0f} MB/s on "
        f"{cores} cores, measured {verified:.2f} s "
        f"(push wall {wall:.1f} s), load {load:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    # The serve play's line for this copy, from the push's own records.
    shown = copy_lines(pushed.stdout, pair.peer_ip, predicted)
    print("\n".join(shown))
    assert re.search(rf"copy rail 0 +{measured:.1f} s +{predicted:.1f} s  pod", shown[0])
    assert within(predicted, measured, ESTIMATE_TOLERANCE), (predicted, measured)
    assert within(answer, verified, ESTIMATE_TOLERANCE, VERIFY_SLACK_S), (answer, verified)
    # Negative control: the estimate at twice the rate is outside the tolerance.
    wrong = Rates(rates.rail_mbit_s * 2, 1, 100_000, cores=rates.cores)
    assert not within(copy_seconds(pair.total, 1, 1, wrong), measured, ESTIMATE_TOLERANCE)
    # Negative control: the verify estimate without the peer's answer is outside it too.
    assert not within(answer - VERDICT_OVERHEAD_S, verified, ESTIMATE_TOLERANCE, VERIFY_SLACK_S)


def test_receive_refuses_a_small_disk_with_the_numbers(pair: Pair) -> None:
    argv = fetchplan.receive_argv(
        f"{SMALL}/cache", pair.total, f"{SECRETS_DIR}/{fetchplan.SECRETS_KEY}", REPO, REVISION,
        pair.head_ip, PORT + 1, timeout_s=30, manifest_sha256_file=MANIFEST_FILE,
    )  # fmt: skip
    refused = subprocess.run(
        step(pair.peer, argv), capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    need = (pair.total + min(fetchplan.SPACE_MARGIN_BYTES, pair.total)) / 1e9
    small = pair.shard_mib * 2**20 / 1e9
    assert re.search(rf"need {need:.2f} GB \(.*\), free {small:.2f} GB on {SMALL}/cache", line), (
        line
    )
    assert "nothing was written" in line
    assert fetchlab.docker("exec", pair.peer, "find", SMALL, "-mindepth", "1").strip() == ""
    # Negative control: the same need on the disk-backed overlay passes the check (and then
    # times out after 1 s, as nobody pushes).
    ok = fetchplan.receive_argv(
        "/roomy", pair.total, f"{SECRETS_DIR}/{fetchplan.SECRETS_KEY}", REPO, REVISION,
        pair.head_ip, PORT + 1, timeout_s=1, manifest_sha256_file=MANIFEST_FILE,
    )  # fmt: skip
    fits = subprocess.run(
        step(pair.peer, ok), capture_output=True, text=True, timeout=60, check=False
    )
    assert "free space ok" in fits.stdout and fits.returncode == 3, fits.stdout + fits.stderr
    assert "no verified push after 1 s" in fits.stderr
    assert "free space ok" not in refused.stdout


def test_interrupted_push_resumes(pair: Pair) -> None:
    receiver = start_receive(pair, "/resume")
    slow = subprocess.Popen(
        push_argv(pair, bwlimit=max(2_000, 60_000 * pair.shard_mib // 512)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        partial = 0
        deadline = time.monotonic() + 60
        while partial < pair.total // 3 and time.monotonic() < deadline:
            time.sleep(0.5)
            du = fetchlab.sh(pair.peer, "du -sb /resume | cut -f1")
            partial = int(du.stdout.strip() or 0)
        assert partial >= pair.total // 3, f"only {partial} bytes arrived within 60 s"
        pids = fetchlab.sh(pair.head, "pgrep -x rsync").stdout.split()
        assert pids, "no rsync client running in the head container"
        for pid in pids:  # the test's own rsync client, in the test's own container
            fetchlab.sh(pair.head, f"kill -TERM {pid}")
        out, err = slow.communicate(timeout=30)
    finally:
        if slow.poll() is None:
            slow.kill()
    assert slow.returncode != 0, out
    assert "FAILED:" in err and "exited 20" in err, err
    time.sleep(1)
    kept = fetchlab.sh(pair.peer, "du -sb /resume | cut -f1").stdout.strip()
    partials = fetchlab.sh(pair.peer, "find /resume -path '*/.rsync-partial/*' -type f -size +1k")
    print(
        f"interrupted after {int(kept)} bytes on the peer; partial files: {partials.stdout.split()}"
    )
    assert receiver.poll() is None, "receive must keep serving until the marker arrives"
    marker = fetchplan.marker_path("/resume", REPO, REVISION)
    assert fetchlab.sh(pair.peer, f"test -e {marker}").returncode != 0
    # Negative control of the comparison below: the interrupted copy does not pass it.
    assert listing(pair.peer, "/resume") != listing(pair.head, "/cache")

    start = time.monotonic()
    rerun = subprocess.run(
        push_argv(pair), capture_output=True, text=True, timeout=180, check=False
    )
    seconds = time.monotonic() - start
    received, _ = receiver.communicate(timeout=90)
    assert rerun.returncode == 0, rerun.stderr
    assert receiver.returncode == 0, received
    literal = stats(rerun.stdout, "Literal data")
    total = stats(rerun.stdout, "Total file size")
    print(
        f"resume: {literal} of {total} bytes sent as literal data on the rerun "
        f"({100 * literal / total:.0f} %), matched {stats(rerun.stdout, 'Matched data')}, {seconds:.1f} s"
    )
    assert literal < total - pair.total // 4, "the rerun must not resend what arrived before"
    assert blob_sums_ok(pair.peer, "/resume") == []
    assert listing(pair.peer, "/resume") == listing(pair.head, "/cache")
