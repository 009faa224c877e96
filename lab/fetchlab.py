"""Lab containers for the fetch step between Sparks: one Docker network per fabric rail, the
fetch step's files copied in, rails shaped to a rate with ``tc``. Used by
``lab/bench_rails.py`` and ``tests/serving/test_fetch_colocated.py``; every caller holds
``/tmp/sparkrack-lab.lock`` (the lab's lock) while its containers exist.

The containers and networks carry the label ``io.sparkrack.lab=<prefix>`` and names starting
with ``<prefix>``; :func:`down` removes exactly those.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sparkrack.serving.switch.plan import SCRIPT_FILES

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "sparkrack" / "serving" / "scripts"
SCRIPT_DIR = "/opt/sparkrack/switch"


def docker(*args: str, timeout: float = 300, check: bool = True) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} -> {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def sh(box: str, script: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with sh in ``box``."""
    return subprocess.run(
        ["docker", "exec", box, "sh", "-c", script],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def put(box: str, path: str, text: str, mode: str = "0600") -> None:
    """Write ``text`` to ``path`` in ``box`` (through stdin: never in an argv)."""
    done = subprocess.run(
        ["docker", "exec", "-i", box, "sh", "-c", f"umask 077; cat > {path}; chmod {mode} {path}"],
        input=text, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"cannot write {path} in {box}: {done.stderr.strip()}")


@dataclass(frozen=True)
class Fabric:
    """Containers with one address per rail (rail order), and the networks behind them."""

    prefix: str
    boxes: tuple[str, ...]
    addresses: dict[str, tuple[str, ...]]
    """Per container: its address on every rail, in rail order."""
    netdevs: dict[str, tuple[str, ...]]
    """Per container: its interface on every rail, in rail order."""

    def rail(self, box: str, r: int) -> str:
        return self.addresses[box][r]


def networks(prefix: str, rails: int) -> list[str]:
    return [f"{prefix}-rail{r}" for r in range(rails)]


def down(prefix: str, boxes: list[str], rails: int) -> None:
    """Remove the containers and networks of ``prefix`` (by their names)."""
    docker("rm", "-f", "-v", *boxes, check=False)
    for net in networks(prefix, rails):
        docker("network", "rm", net, check=False)


def up(prefix: str, names: list[str], rails: int, image: str, mtu: int) -> Fabric:
    """``names`` as containers (``<prefix>-<name>``) on ``rails`` internal networks, NET_ADMIN
    (for ``tc``), the fetch step's files in :data:`SCRIPT_DIR`."""
    boxes = [f"{prefix}-{n}" for n in names]
    label = f"io.sparkrack.lab={prefix}"
    down(prefix, boxes, rails)
    nets = networks(prefix, rails)
    for net in nets:
        docker(
            "network", "create", "--driver", "bridge", "--internal",
            "-o", f"com.docker.network.driver.mtu={mtu}", "--label", label, net,
        )  # fmt: skip
    addresses: dict[str, tuple[str, ...]] = {}
    netdevs: dict[str, tuple[str, ...]] = {}
    for box in boxes:
        docker(
            "run", "-d", "--name", box, "--hostname", box, "--network", nets[0],
            "--cap-add", "NET_ADMIN", "--label", label, image, "sleep", "infinity",
        )  # fmt: skip
        for net in nets[1:]:
            docker("network", "connect", net, box)
        docker("exec", box, "mkdir", "-p", SCRIPT_DIR)
        for name in SCRIPT_FILES:
            docker("cp", str(SCRIPTS / name), f"{box}:{SCRIPT_DIR}/{name}")
        ips = tuple(
            docker(
                "inspect", "-f", f'{{{{(index .NetworkSettings.Networks "{net}").IPAddress}}}}', box
            ).strip()
            for net in nets
        )  # fmt: skip
        devs = []
        for ip in ips:
            found = sh(box, f"ip -o -4 addr show | awk '$4 ~ /^{ip}\\// {{print $2}}'")
            devs.append(found.stdout.strip())
        addresses[box] = ips
        netdevs[box] = tuple(devs)
    return Fabric(prefix, tuple(boxes), addresses, netdevs)


def shape(fabric: Fabric, rate_mbit: int) -> str:
    """Every container's egress on every rail limited to ``rate_mbit`` (tbf; htb where the
    kernel has no tbf). Returns the qdisc used."""
    # KiB: about 8 ms at the rate, and never below 256 KiB: a bucket smaller than one GSO packet
    # (64 KiB on a veth) would drop it.
    burst = max(256, rate_mbit // 8)
    tbf = f"tc qdisc replace dev {{dev}} root tbf rate {rate_mbit}mbit burst {burst}kb latency 50ms"
    htb = (
        "tc qdisc replace dev {dev} root handle 1: htb default 10 && "
        f"tc class replace dev {{dev}} parent 1: classid 1:10 htb rate {rate_mbit}mbit "
        f"ceil {rate_mbit}mbit burst {burst}kb"
    )
    chosen = ""
    for box in fabric.boxes:
        for dev in fabric.netdevs[box]:
            for name, cmd in (("tbf", tbf), ("htb", htb)):
                if chosen and name != chosen:
                    continue
                done = sh(box, cmd.format(dev=dev))
                if done.returncode == 0:
                    chosen = name
                    break
            else:
                raise RuntimeError(f"no tbf or htb qdisc on {box} {dev}: {done.stderr.strip()}")
    return chosen


def qdiscs(fabric: Fabric) -> str:
    """``tc -s qdisc`` of every rail interface (bytes each shaper sent)."""
    out = []
    for box in fabric.boxes:
        for dev in fabric.netdevs[box]:
            out.append(f"{box} {dev}: " + sh(box, f"tc -s qdisc show dev {dev}").stdout.strip())
    return "\n".join(out)


def docker_answers() -> bool:
    """A Docker engine answers (``docker version``): the lab's containers can run."""
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "version"], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def snapshot_script(repo: str, revision: str, shards: int, shard_mib: int) -> str:
    """Shell for a container: a hub cache entry of ``repo`` in ``/cache``, ``shards`` random
    files of ``shard_mib`` MiB named by their sha256 and linked from the snapshot, a manifest of
    every file's sha256, marked by the fetch step's ``mark``."""
    folder = f"/cache/models--{repo.replace('/', '--')}"
    snap = f"{folder}/snapshots/{revision}"
    return f"""set -eu
rm -rf /cache; mkdir -p {folder}/blobs {snap} {folder}/refs
add() {{ h=$(sha256sum "$1" | cut -c1-64); mv "$1" {folder}/blobs/$h; ln -s ../../blobs/$h {snap}/$2; }}
for i in $(seq 1 {shards}); do
  head -c {shard_mib}M /dev/urandom > /cache/shard
  add /cache/shard model-$(printf %05d $i)-of-$(printf %05d {shards}).safetensors
done
echo '{{"architectures": ["FakeForCausalLM"]}}' > /cache/cfg; add /cache/cfg config.json
printf {revision} > {folder}/refs/main
python3 - <<'PY'
import glob, json, os
snap = "{snap}"
files = {{os.path.relpath(p, snap): {{"size": os.path.getsize(p),
          "sha256": os.path.basename(os.path.realpath(p))}} for p in sorted(glob.glob(snap + "/*"))}}
doc = {{"repo": "{repo}", "revision": "{revision}", "commit": "{revision}", "files": files}}
open("/cache/manifest.json", "w").write(json.dumps(doc, indent=1, sort_keys=True) + "\\n")
PY
python3 {SCRIPT_DIR}/fetch_step.py mark --cache /cache --repo {repo} --revision {revision} \\
  --manifest /cache/manifest.json
"""
