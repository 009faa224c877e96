"""Two network namespaces shaped like two lab Sparks: a cluster (management) link with a default
route, and a fabric link whose interfaces carry the address plan's VF names and addresses."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sparkrack.serving.rehearsal.plan import Rehearsal


def available() -> str:
    """Why namespaces cannot be made here ("" when they can)."""
    import os

    missing = [t for t in ("ip", "iptables", "nsenter", "unshare") if shutil.which(t) is None]
    if missing:
        return f"missing {', '.join(missing)}"
    if os.geteuid() != 0:
        return "needs root"
    return ""


def _ip(*words: str) -> None:
    subprocess.run(["ip", *words], check=True, capture_output=True)


@contextmanager
def sparks(rehearsal: Rehearsal, prefix: str) -> Iterator[dict[str, str]]:
    """One namespace per rehearsed Spark, each with a cluster link and a fabric link to two
    bridges in a hub namespace (the switches); yields node -> netns path."""
    ranks: Sequence = rehearsal.ranks
    names = {r.node: f"{prefix}-{r.node}" for r in ranks}
    hub = f"{prefix}-hub"
    try:
        _ip("netns", "add", hub)
        for bridge in ("brmgmt", "brfab"):
            _ip("-n", hub, "link", "add", bridge, "type", "bridge")
            _ip("-n", hub, "link", "set", bridge, "up")
        for i, run in enumerate(ranks):
            ns = names[run.node]
            _ip("netns", "add", ns)
            fabric = run.env["POD_FABRIC_IFNAME"]
            for kind, bridge, dev, address in (
                ("m", "brmgmt", "eth0", run.pod.ip),
                ("f", "brfab", fabric, run.fabric_address),
            ):
                inner, outer = f"sr{kind}{i}", f"sr{kind}{i}h"
                _ip("link", "add", inner, "netns", ns, "type", "veth", "peer", outer, "netns", hub)
                _ip("-n", hub, "link", "set", outer, "master", bridge)
                _ip("-n", hub, "link", "set", outer, "up")
                _ip("-n", ns, "link", "set", inner, "name", dev)
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "dev", "eth0")
        yield {node: f"/run/netns/{name}" for node, name in names.items()}
    finally:
        for name in (*names.values(), hub):
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
