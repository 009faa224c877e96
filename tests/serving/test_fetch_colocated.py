"""Two deployments of one model on the same two Sparks switch together, between lab containers.

spark1 (the head of both) and spark2 (a receiver of both) are containers on two Docker networks,
one per fabric rail. The two deployments' names are chosen so that their ports derived from the
names alone collide; the ports come from ``deployment_ports`` (what the renderer gives them), the
passwords are two (one Secret per deployment). Then, all at once, as the switch's Jobs would run
them: both ``download`` steps on spark1 (huggingface_hub 1.x against a Hub served on spark1's
loopback by ``tests/fakehub.py``), both ``receive`` steps on spark2 (each on its own port, both
rails), both ``push`` steps over both rails; then both deployments' ``wait`` on both Sparks.

What it proves: the fetch steps of two co-located deployments of one model, with the ports and
passwords they are rendered with, run at once over two rails without a port collision; the model
is downloaded once (every file fetched from the Hub once); both receivers verify and mark it and
hub 1.x loads it offline on spark2. What it does not: the Kubernetes side (the Jobs on real
kubelets, hostNetwork, the serve play rotating the Secrets): KWOK pods run no container.

Holds ``/tmp/sparkrack-lab.lock``; the containers and networks are its own
(``sparkrack-colocated-*``). Skipped only without Docker.
"""

from __future__ import annotations

import fcntl
import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import fakehub
import hubversions
import pytest
from hubcache import COMMIT, REPO, make_repo, sha_of

from sparkrack.inputs.inventory import load_inventory
from sparkrack.serving.scripts import fetch_base
from sparkrack.serving.switch import plan as fetchplan

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab"))
import fetchlab  # noqa: E402

pytestmark = pytest.mark.docker
LOCK = Path("/tmp/sparkrack-lab.lock")
PREFIX = "sparkrack-colocated"
HEAD, PEER = f"{PREFIX}-spark1", f"{PREFIX}-spark2"
SPARKS = ["spark1", "spark2"]
HUB1 = "/opt/hub1"
HUBDIR = "/opt/fakehub"
BASE = fetchplan.DEFAULT_PORT
SERVER = f"""
import json, pathlib, sys, time
sys.path.insert(0, "{HUBDIR}")
import fakehub
root = pathlib.Path("{HUBDIR}/files")
files = {{str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}}
repo = fakehub.FakeRepo("{REPO}", "{COMMIT}", files)
with fakehub.serve(repo) as url:
    pathlib.Path("{HUBDIR}/url").write_text(url)
    while True:
        pathlib.Path("{HUBDIR}/gets.tmp").write_text(json.dumps(repo.gets))
        pathlib.Path("{HUBDIR}/gets.tmp").rename("{HUBDIR}/gets.json")
        time.sleep(0.2)
"""


def colliding(name: str) -> str:
    want = fetchplan.deployment_port(BASE, name)
    return next(
        f"{name}-{i}"
        for i in range(100_000)
        if fetchplan.deployment_port(BASE, f"{name}-{i}") == want
    )


NAMES = ("chat", colliding("chat"))


@pytest.fixture(scope="module")
def fabric(lab: ModuleType) -> Iterator[fetchlab.Fabric]:
    if not fetchlab.docker_answers():
        pytest.skip("no Docker engine answers (`docker version` fails): needs two containers")
    mtu = load_inventory(ROOT / "inventories" / "lab").plan().mtu
    hub1 = hubversions.target(hubversions.HUB_1)
    assert hub1 is not None
    repo = make_repo()
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            image, _ = lab.ensure_image()
            fab = fetchlab.up(PREFIX, SPARKS, 2, image, mtu)
            for box in fab.boxes:
                fetchlab.docker("cp", f"{hub1}/.", f"{box}:{HUB1}")
            fetchlab.sh(HEAD, f"mkdir -p {HUBDIR}/files")
            fetchlab.docker("cp", str(Path(fakehub.__file__)), f"{HEAD}:{HUBDIR}/fakehub.py")
            for path, data in repo.files.items():
                fetchlab.sh(HEAD, f"mkdir -p {HUBDIR}/files/{Path(path).parent}")
                subprocess.run(
                    ["docker", "exec", "-i", HEAD, "sh", "-c", f"cat > {HUBDIR}/files/{path}"],
                    input=data, check=True, timeout=60,
                )  # fmt: skip
            subprocess.run(
                ["docker", "exec", "-d", HEAD, "python3", "-c", SERVER], check=True, timeout=60
            )
            yield fab
        finally:
            fetchlab.down(PREFIX, [HEAD, PEER], 2)


def secrets_dir(name: str) -> str:
    return f"/run/sparkrack-rsync/{name}"


def test_two_colocated_deployments_of_one_model_switch_together(fabric: fetchlab.Fabric) -> None:
    repo = make_repo()
    ports = fetchplan.deployment_ports(BASE, [(name, SPARKS) for name in NAMES])
    # Negative control: by their names alone the two deployments would share one port.
    assert len({fetchplan.deployment_port(BASE, n) for n in NAMES}) == 1
    assert len(set(ports.values())) == 2
    passwords = {name: secrets.token_hex(16) for name in NAMES}
    for name in NAMES:  # one Secret per deployment: pusher's and receiver's renderings
        data = fetchplan.rsync_secret_data(passwords[name])
        for box, key in ((HEAD, fetchplan.PASSWORD_KEY), (PEER, fetchplan.SECRETS_KEY)):
            fetchlab.sh(box, f"mkdir -p {secrets_dir(name)}")
            fetchlab.put(box, f"{secrets_dir(name)}/{key}", data[key])
    deadline = time.monotonic() + 30
    while fetchlab.sh(HEAD, f"test -s {HUBDIR}/url").returncode != 0:
        assert time.monotonic() < deadline, "the Hub on spark1's loopback did not start"
        time.sleep(0.2)
    url = fetchlab.sh(HEAD, f"cat {HUBDIR}/url").stdout.strip()
    head_rails = list(fabric.addresses[HEAD])
    peer_rails = list(fabric.addresses[PEER])
    need = 2 * sum(len(d) for d in repo.files.values())

    receivers = {}
    for name in NAMES:
        argv = fetchplan.receive_argv(
            "/cache", need, f"{secrets_dir(name)}/{fetchplan.SECRETS_KEY}", REPO, "main",
            head_rails, ports[name], address=peer_rails, timeout_s=120, interval_s=5,
            manifest_sha256_file=f"{secrets_dir(name)}/manifest.sha256",
        )  # fmt: skip
        receivers[name] = subprocess.Popen(
            ["docker", "exec", PEER, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip

    # One receiver takes the model's lock on spark2 and listens on both rails; the other waits
    # for the lock (its pusher's connection is refused and retried) so that two pushes never
    # write one model's folder at once.
    def listening(port: int) -> bool:
        return fetchlab.sh(PEER, f"grep -c ':{port:04X} ' /proc/net/tcp").stdout.strip() == "2"

    deadline = time.monotonic() + 20
    while not any(listening(port) for port in ports.values()):
        for proc in receivers.values():
            assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "no receiver listens on spark2"
        time.sleep(0.2)
    time.sleep(1)
    assert sum(listening(port) for port in ports.values()) == 1

    results: dict[str, list[subprocess.CompletedProcess[str]]] = {n: [] for n in NAMES}

    def switch(name: str) -> None:
        download = fetchplan.download_argv(REPO, "main", "/cache", need, timeout_s=60, interval_s=5)
        env = ["-e", f"HF_ENDPOINT={url}", "-e", f"PYTHONPATH={HUB1}"]
        done = subprocess.run(
            ["docker", "exec", *env, HEAD, *download],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        results[name].append(done)
        if done.returncode != 0:
            return
        # What the serve play does: the download's reported digest into the receiver's file.
        digest = fetch_base.read_manifest_digest(done.stdout)
        assert digest is not None, done.stdout
        fetchlab.put(PEER, f"{secrets_dir(name)}/manifest.sha256", digest, "0644")
        push = fetchplan.push_argv(
            "/cache", REPO, "main", peer_rails[:1],
            f"{secrets_dir(name)}/{fetchplan.PASSWORD_KEY}", ports[name],
            timeout_s=120, interval_s=5, other_rails=[peer_rails[1:]],
        )  # fmt: skip
        results[name].append(
            subprocess.run(
                ["docker", "exec", HEAD, *push],
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )  # fmt: skip
        )

    threads = [threading.Thread(target=switch, args=(name,)) for name in NAMES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    received = {name: proc.communicate(timeout=120)[0] for name, proc in receivers.items()}
    for name in NAMES:
        for done in results[name]:
            print(f"--- {name}: {' '.join(done.args[3:6])}\n{done.stdout}{done.stderr}")
        print(f"--- {name}: receive on port {ports[name]}\n{received[name]}")
    for name in NAMES:
        download, push = results[name]
        assert download.returncode == 0, download.stderr
        assert push.returncode == 0, push.stderr
        assert receivers[name].returncode == 0, received[name]
        assert "every file verified" in received[name]
        assert f"port {ports[name]}" in push.stdout
        rails = json.loads(push.stdout.split("copy per rail json: ", 1)[1].splitlines()[0])
        assert set(rails["rails"]) == {"0", "1"}
    waited = [n for n in NAMES if "is held (another deployment fetches" in received[n]]
    assert len(waited) == 1, "exactly one receiver waited for the other's copy"
    late = results[waited[0]][1].stdout
    assert "retrying (resumes)" in late
    # The later push found every file in place: nothing sent twice.
    rails = json.loads(late.split("copy per rail json: ", 1)[1].splitlines()[0])["rails"]
    assert all(rail["literal_bytes"] == 0 for rail in rails.values()), rails
    # One download: the other deployment found the lock's result (or the marker) and fetched
    # nothing; the Hub served every file once.
    outs = [results[n][0].stdout for n in NAMES]
    assert sum("downloading org/model@" in out for out in outs) == 1, outs
    gets = json.loads(fetchlab.sh(HEAD, f"cat {HUBDIR}/gets.json").stdout)
    assert gets == {path: 1 for path in repo.files}
    # Both deployments' ranks would start: the marker holds on both Sparks; hub 1.x loads the
    # model offline on spark2, byte for byte.
    for box in (HEAD, PEER):
        for _name in NAMES:
            wait = fetchplan.wait_argv("/cache", REPO, "main", timeout_s=10, interval_s=5)
            done = subprocess.run(
                ["docker", "exec", box, *wait], capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done.stdout + done.stderr
    load = (
        "import hashlib, json, os; from huggingface_hub import snapshot_download; "
        f"p = snapshot_download('{REPO}', revision='main', cache_dir='/cache'); "
        "print(json.dumps({os.path.relpath(os.path.join(r, f), p): hashlib.sha256("
        "open(os.path.join(r, f), 'rb').read()).hexdigest() "
        "for r, _, fs in os.walk(p) for f in fs}))"
    )
    loaded = fetchlab.sh(PEER, f'HF_HUB_OFFLINE=1 PYTHONPATH={HUB1} python3 -c "{load}"')
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout) == sha_of(repo)
    everything = "".join(
        [*received.values(), *(d.stdout + d.stderr for r in results.values() for d in r)]
    )
    for password in passwords.values():
        assert password not in everything
