"""Benchmark: the fetch step's push over both fabric rails, each shaped to the same rate R by
``tc``, between lab containers: a head and three peers, one Docker network per rail.

    flock /tmp/sparkrack-lab.lock .venv/bin/python lab/bench_rails.py [--rate-mbit 200]
        [--shard-mib 512] [--peers 3]

A snapshot of 4 random shards (4 x 512 MiB: 2 GiB) is made and marked on the head; then the
real ``receive`` and ``push`` steps run, fresh caches each time:

* ``rails2``: head -> every peer at once, one stream per rail per peer (what the plan renders);
* ``rail1``:  the same over the first rail only (the negative control: bounded by R);
* ``chain``:  head -> peer1 -> peer2 -> peer3, each hop over both rails, a hop starting when the
  peer before has verified and marked the snapshot (store and forward: what the fetch step's
  steps can do as they are);
* ``relay``:  the chain the plan renders: every hop at once, each peer's ``receive
  --relay-to`` passing every file on (over both rails) as soon as it has it whole, then
  pushing the rest and the manifest once its own copy verifies.

Per case: the seconds until every receiver has ended (verified and marked the model, and in a
chain pushed it on), the aggregate rate (model bytes x peers / those seconds) in units of R,
for fan-out and chain also the copy streams' own seconds (the slowest rail, from the push's
``copy per rail`` summary, per hop summed), the switch estimate of the shape (fan-out and
relay), the bytes each rail's shapers sent (``tc -s``), and the load average. The issue asks
for >= 1.7 x R aggregate (2 GB model, 3 peers). The cases, each with its load, are written as
the record ``docs/dev/measurements/bench-rails.json`` and ``docs/dev/measurements.md`` is
rewritten (``--no-record``: print only).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fetchlab  # noqa: E402
from fetchlab import Fabric, put, sh  # noqa: E402

from sparkrack.bench import measurements  # noqa: E402
from sparkrack.inputs.inventory import load_inventory  # noqa: E402
from sparkrack.planner.switch import Rates, chain_seconds, fan_out_seconds  # noqa: E402
from sparkrack.serving.switch import plan as fetchplan  # noqa: E402

PREFIX = "sparkrack-railbench"
REPO = "sparkrack/fake-rails"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SHARDS = 4
PORT = fetchplan.DEFAULT_PORT
SECRETS = "/run/sparkrack-rsync"
SUMMARY = "copy per rail json: "


def lab_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "sparkrack_lab", Path(__file__).with_name("lab.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sparkrack_lab"] = module
    spec.loader.exec_module(module)
    return module


def receive(
    fabric: Fabric,
    box: str,
    sender: str,
    cache: str,
    rails: int,
    need: int,
    relay_to: str | None = None,
) -> subprocess.Popen[str]:
    argv = fetchplan.receive_argv(
        cache, need, f"{SECRETS}/{fetchplan.SECRETS_KEY}", REPO, REVISION,
        list(fabric.addresses[sender][:rails]), PORT,
        address=list(fabric.addresses[box][:rails]), timeout_s=1800, interval_s=30,
        relay_to=list(fabric.addresses[relay_to][:rails]) if relay_to else [],
        relay_password_file=f"{SECRETS}/{fetchplan.PASSWORD_KEY}" if relay_to else None,
    )  # fmt: skip
    proc = subprocess.Popen(
        ["docker", "exec", box, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sh(box, f"grep -q ':{PORT:04X} ' /proc/net/tcp").returncode == 0:
            return proc
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"receive on {box} did not listen: {proc.communicate()[0]}")


def push(fabric: Fabric, sender: str, cache: str, peers: list[str], rails: int) -> dict[str, Any]:
    to = [[fabric.addresses[p][r] for p in peers] for r in range(rails)]
    argv = fetchplan.push_argv(
        cache, REPO, REVISION, to[0], f"{SECRETS}/{fetchplan.PASSWORD_KEY}", PORT,
        timeout_s=1800, interval_s=30, other_rails=to[1:],
    )  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(
        ["docker", "exec", sender, *argv], capture_output=True, text=True, timeout=1900, check=False
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"push from {sender} failed: {done.stdout[-3000:]}{done.stderr}")
    line = next(ln for ln in done.stdout.splitlines() if SUMMARY in ln)
    summary: dict[str, Any] = json.loads(line.split(SUMMARY, 1)[1])
    summary["wall"] = wall
    return summary


def sent_per_rail(fabric: Fabric) -> dict[str, int]:
    """Bytes every container's rail shapers have sent, summed per rail (``tc -s``)."""
    out: dict[str, int] = {}
    for box in fabric.boxes:
        for r, dev in enumerate(fabric.netdevs[box]):
            text = sh(box, f"tc -s qdisc show dev {dev}").stdout
            found = re.search(r"Sent (\d+) bytes", text)
            out[str(r)] = out.get(str(r), 0) + (int(found.group(1)) if found else 0)
    return out


def run_case(
    fabric: Fabric, head: str, peers: list[str], rails: int, need: int, case: str
) -> dict[str, Any]:
    for box in peers:
        sh(box, "rm -rf /peer")
    before = sent_per_rail(fabric)
    senders = [head, *peers[:-1]]
    copy_s = 0.0
    start = time.monotonic()
    if case in ("rails2", "rail1"):
        receivers = [receive(fabric, box, head, "/peer", rails, need) for box in peers]
        start = time.monotonic()
        summaries = [push(fabric, head, "/cache", peers, rails)]
    elif case == "chain":  # store and forward: a hop starts once the peer before has marked
        receivers, summaries = [], []
        for sender, target in zip(senders, peers, strict=True):
            receivers.append(receive(fabric, target, sender, "/peer", rails, need))
            cache = "/cache" if sender == head else "/peer"
            summaries.append(push(fabric, sender, cache, [target], rails))
    else:  # "relay": every hop at once, each peer relaying to the next as files arrive
        receivers = [
            receive(fabric, target, sender, "/peer", rails, need, after)
            for sender, target, after in zip(senders, peers, [*peers[1:], None], strict=True)
        ]
        start = time.monotonic()
        summaries = [push(fabric, head, "/cache", peers[:1], rails)]
    # Every receiver has ended: its copy verified and marked, and in a chain its push to the
    # next peer answered (the head's push ends when the first peer has verified).
    for proc in receivers:
        out, _ = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"receive failed: {out[-3000:]}")
    wall = time.monotonic() - start
    if case in ("rails2", "rail1", "chain"):
        copy_s = sum(max(r["seconds"] for r in s["rails"].values()) for s in summaries)
    after = sent_per_rail(fabric)
    for box in peers:
        marker = fetchplan.marker_path("/peer", REPO, REVISION)
        if sh(box, f"test -s {marker}").returncode != 0:
            raise RuntimeError(f"no marker on {box}")
    return {
        "copy_s": copy_s,
        "wall_s": wall,
        "rail_bytes": {r: after[r] - before.get(r, 0) for r in after},
        "load": os.getloadavg(),
    }


CASES = {
    "rails2": "fan-out, both rails",
    "rail1": "fan-out, first rail only",
    "chain": "chain, each hop after the last peer marked (store and forward)",
    "relay": "chain, every hop at once (`receive --relay-to`)",
}


def case_row(case: str, got: dict[str, Any]) -> list[str]:
    copy = f" (copy streams {got['copy_s']:.1f} s)" if got["copy_s"] else ""
    estimate = got["estimate_s"]
    return [
        CASES.get(case, case),
        f"{got['wall_s']:.1f} s{copy}",
        f"{got['aggregate_wall_R']:.2f} x R",
        "-" if estimate is None else f"{estimate:.1f} s",
        " ".join(f"{x:.2f}" for x in got["load"]),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate-mbit", type=int, default=200, help="R: every rail's rate")
    parser.add_argument("--shard-mib", type=int, default=512, help="4 shards of this size")
    parser.add_argument("--peers", type=int, default=3)
    parser.add_argument("--cases", default="rails2,rail1,chain,relay")
    parser.add_argument("--keep", action="store_true", help="leave the containers up")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()
    before = measurements.load_now()
    lab = lab_module()
    lab.ensure_engine()
    image, _ = lab.ensure_image()
    mtu = load_inventory(fetchlab.ROOT / "inventories" / "lab").plan().mtu
    names = ["head", *(f"peer{i}" for i in range(1, args.peers + 1))]
    boxes = [f"{PREFIX}-{n}" for n in names]
    try:
        fabric = fetchlab.up(PREFIX, names, 2, image, mtu)
        head, peers = boxes[0], boxes[1:]
        password = secrets.token_hex(16)
        data = fetchplan.rsync_secret_data(password)
        for box in boxes:  # every box pushes in the chain, every peer receives
            sh(box, f"mkdir -p {SECRETS}")
            for key in (fetchplan.PASSWORD_KEY, fetchplan.SECRETS_KEY):
                put(box, f"{SECRETS}/{key}", data[key])
        made = time.monotonic()
        out = sh(
            head, fetchlab.snapshot_script(REPO, REVISION, SHARDS, args.shard_mib), timeout=900
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        model = SHARDS * args.shard_mib * 2**20
        print(f"snapshot: {model / 1e9:.2f} GB made in {time.monotonic() - made:.0f} s")
        qdisc = fetchlab.shape(fabric, args.rate_mbit)
        rate = args.rate_mbit * 1e6 / 8
        print(f"R = {args.rate_mbit} Mbit/s = {rate / 1e6:.1f} MB/s per rail, egress {qdisc} on "
              f"every container's rail interfaces; {args.peers} peers; load {os.getloadavg()}")  # fmt: skip
        results = {}
        for case in args.cases.split(","):
            rails = 1 if case == "rail1" else 2
            got = run_case(fabric, head, peers, rails, model, case)
            wall = model * args.peers / got["wall_s"]
            copy = model * args.peers / got["copy_s"] if got["copy_s"] else 0.0
            got |= {"aggregate_wall_R": wall / rate, "aggregate_copy_R": copy / rate}
            rates = Rates(args.rate_mbit, 1_000, 100_000, cores=os.cpu_count() or 1)
            shard = args.shard_mib * 2**20
            estimate = {
                "rails2": fan_out_seconds(model, args.peers, 2, rates),
                "rail1": fan_out_seconds(model, args.peers, 1, rates),
                "relay": chain_seconds(model, args.peers, 2, rates, shard),
            }.get(case)
            got["estimate_s"] = estimate
            results[case] = got
            rails_txt = ", ".join(
                f"rail {r} {b / 1e9:.2f} GB ({b / got['wall_s'] / 1e6:.1f} MB/s)"
                for r, b in sorted(got["rail_bytes"].items())
            )
            copy_txt = (
                f"copy streams {got['copy_s']:.1f} s = {copy / rate:.2f} x R; "
                if got["copy_s"]
                else ""
            )
            print(
                f"{case:6s} all peers verified+marked in {got['wall_s']:6.1f} s: aggregate "
                f"{wall / 1e6:5.1f} MB/s = {wall / rate:.2f} x R; {copy_txt}"
                + (f"estimate {estimate:.1f} s; " if estimate else "")
                + "tc per rail: "
                f"{rails_txt}; load {' '.join(f'{x:.2f}' for x in got['load'])}",
                flush=True,
            )
        print(fetchlab.qdiscs(fabric))
        print(json.dumps({"rate_mbit": args.rate_mbit, "model_bytes": model, "qdisc": qdisc,
                          "results": results}, default=list))  # fmt: skip
        if not args.no_record:
            record = measurements.measured(
                "lab/bench_rails.py",
                "Weights: push over the rails",
                "flock /tmp/sparkrack-lab.lock .venv/bin/python lab/bench_rails.py "
                f"--rate-mbit {args.rate_mbit} --shard-mib {args.shard_mib} --peers {args.peers} "
                f"--cases {args.cases}",
                before,
                ["copy", "every peer verified and marked", "aggregate", "estimate", "load"],
                [case_row(case, got) for case, got in results.items()],
                [
                    f"Between lab containers, a head and {args.peers} peers, each rail shaped by "
                    f"`tc` ({qdisc}) to R = {args.rate_mbit} Mbit/s, a {model / 1e9:.2f} GB model "
                    f"({SHARDS} random shards of {args.shard_mib} MiB)."
                ],
            )
            print(f"record: {measurements.write(record, 'bench-rails')}")
    finally:
        if not args.keep:
            fetchlab.down(PREFIX, boxes, 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
