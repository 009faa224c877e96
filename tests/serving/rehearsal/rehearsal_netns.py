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
    """One namespace per rehearsed Spark (two), linked pairwise; yields node -> netns path."""
    ranks: Sequence = rehearsal.ranks
    assert len(ranks) == 2, "the helper links exactly two Sparks"
    names = {r.node: f"{prefix}-{r.node}" for r in ranks}
    try:
        for name in names.values():
            _ip("netns", "add", name)
        a, b = ranks
        na, nb = names[a.node], names[b.node]
        fabric = next(k for k in ("POD_FABRIC_IFNAME",) if k in a.env)
        _ip("link", "add", "srmgmt-a", "netns", na, "type", "veth", "peer", "srmgmt-b", "netns", nb)
        _ip("link", "add", "srfab-a", "netns", na, "type", "veth", "peer", "srfab-b", "netns", nb)
        for ns, mgmt, fab, run in ((na, "srmgmt-a", "srfab-a", a), (nb, "srmgmt-b", "srfab-b", b)):
            _ip("-n", ns, "link", "set", mgmt, "name", "eth0")
            _ip("-n", ns, "link", "set", fab, "name", run.env[fabric])
            _ip("-n", ns, "addr", "add", f"{run.pod.ip}/24", "dev", "eth0")
            _ip("-n", ns, "addr", "add", f"{run.fabric_address}/24", "dev", run.env[fabric])
            for dev in ("lo", "eth0", run.env[fabric]):
                _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "route", "add", "default", "dev", "eth0")
        yield {node: f"/run/netns/{name}" for node, name in names.items()}
    finally:
        for name in names.values():
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
