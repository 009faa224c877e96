"""The plan of a switch: every command the fetch step runs for one deployment, and where.

The fetch step itself is :mod:`sparkrack.serving.scripts.fetch_step` with the two files it
imports (stdlib only, shipped verbatim in a ConfigMap). This module is the one owner of its command-line shape on the
rendering side: :func:`fetch_plan` builds a deployment's commands with the ``*_argv`` functions
below instead of spelling flags, and ``tests/serving/scripts/test_fetch_step.py`` parses every
argv built here with the script's own parser.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

from sparkrack import contract
from sparkrack.errors import Problem
from sparkrack.fabric.addressplan import FabricPlan, NodePlan
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.planner.switch import CHAIN, Rates, Shape, SwitchPrediction, copy_shape, predict
from sparkrack.serving import scripts
from sparkrack.serving.resolution import Resolution
from sparkrack.serving.scripts import fetch_base

SCRIPT_NAME: Final = contract.FETCH_FILE
SCRIPT_DIR: Final = PurePosixPath(contract.SWITCH_MOUNT)
"""Where the ConfigMap holding the script is mounted in the fetch Job and init containers."""
SCRIPT_PATH: Final = SCRIPT_DIR / SCRIPT_NAME
SCRIPT_FILES: Final = (
    SCRIPT_NAME,
    "fetch_base.py",
    "fetch_daemon.py",
    "fetch_receive.py",
    "fetch_relay.py",
    "fetch_push.py",
    "memsettle.py",
)
"""The fetch step (the entry point) and the files it imports, shipped in one ConfigMap."""
PYTHON: Final = "python3"
FETCH_IMAGE_NEEDS: Final = "python3 (3.10 or later) and rsync"
"""What the push and receiver containers run (``serving_fetch_image``, or the sparkrack image of
``serving_image_archive``, which carries both). The download runs in the
deployment's own engine image, which carries huggingface_hub."""
UNPINNED: Final = "main"
"""The revision the fetch step resolves when a profile pins none (the marker records the commit
it resolved; a switch back to the model finds the marker and downloads nothing)."""

DEFAULT_PORT: Final[int] = SERVING_DEFAULTS["serving_fetch_port"]
"""TCP port of the receivers' rsync daemon on the fabric PF addresses."""
RSYNC_USER: Final = fetch_base.RSYNC_USER
SPACE_MARGIN_BYTES: Final = fetch_base.SPACE_MARGIN_BYTES
DEFAULT_TIMEOUT_S: Final = dict(fetch_base.DEFAULT_TIMEOUT_S)

# Keys of the rsync Secret: the pusher reads the bare password, each receiver the
# ``user:password`` line rsyncd's secrets file format wants. One password, two renderings.
PASSWORD_KEY: Final = contract.FETCH_PASSWORD_KEY
SECRETS_KEY: Final = contract.FETCH_SECRETS_KEY


def script_files() -> dict[str, str]:
    """The switch ConfigMap's data: the fetch step's files as shipped, side by side."""
    return {name: scripts.text(name) for name in SCRIPT_FILES}


def rsync_secret_data(password: str) -> dict[str, str]:
    """``stringData`` of the rsync Secret for ``password`` (pusher and receivers share it)."""
    return {PASSWORD_KEY: password, SECRETS_KEY: f"{RSYNC_USER}:{password}\n"}


def marker_path(
    cache_dir: str | PurePosixPath, repo: str, revision: str | None = None
) -> PurePosixPath:
    """The completion marker of (repo, revision or :data:`UNPINNED`) under the cache directory."""
    return PurePosixPath(cache_dir) / fetch_base.marker_relpath(repo, revision or UNPINNED)


def _base(step: str) -> list[str]:
    return [PYTHON, str(SCRIPT_PATH), step]


def _timing(
    timeout_s: float | None, interval_s: float | None, phases: str | None = None
) -> list[str]:
    """``--timeout``/``--interval``, and ``--phases`` where the step's phase records go."""
    out = [] if phases is None else ["--phases", phases]
    if timeout_s is not None:
        out += ["--timeout", f"{timeout_s:g}"]
    if interval_s is not None:
        out += ["--interval", f"{interval_s:g}"]
    return out


def download_argv(
    repo: str,
    revision: str,
    cache_dir: str,
    need_bytes: int,
    timeout_s: float | None = None,
    interval_s: float | None = None,
    phases: str | None = None,
) -> list[str]:
    return [
        *_base("download"),
        "--repo", repo,
        "--revision", revision,
        "--cache", cache_dir,
        "--need-bytes", str(need_bytes),
        *_timing(timeout_s, interval_s, phases),
    ]  # fmt: skip


def receive_argv(
    cache_dir: str,
    need_bytes: int,
    secrets_file: str,
    repo: str,
    revision: str,
    allow: str | Sequence[str],
    port: int = DEFAULT_PORT,
    address: str | Sequence[str] | None = None,
    timeout_s: float | None = None,
    interval_s: float | None = None,
    relay_to: Sequence[str] = (),
    relay_password_file: str | None = None,
    phases: str | None = None,
    manifest_sha256_file: str = contract.FETCH_MANIFEST_FILE,
) -> list[str]:
    """``receive`` of (repo, revision) from the pusher at ``allow`` only (its address on every
    rail), verified against the manifest whose sha256 ``manifest_sha256_file`` holds (the head's,
    written there by the serve play); with ``address`` one daemon per address listens on it only (the Spark's fabric PFs,
    one per rail). With ``relay_to`` (the next Spark's address on every rail, rail order) a hop
    of a chain: it passes the model on as it arrives, authenticated by ``relay_password_file``."""
    if bool(relay_to) != (relay_password_file is not None):
        raise ValueError("receive_argv: relay_to and relay_password_file go together")
    allowed = [allow] if isinstance(allow, str) else list(allow)
    argv = [
        *_base("receive"),
        "--cache", cache_dir,
        "--need-bytes", str(need_bytes),
        "--port", str(port),
        "--secrets-file", secrets_file,
        "--allow", ",".join(allowed),
        "--repo", repo,
        "--revision", revision,
        "--manifest-sha256-file", manifest_sha256_file,
    ]  # fmt: skip
    for bound in [address] if isinstance(address, str) else address or []:
        argv += ["--address", bound]
    for host in relay_to:
        argv += ["--relay-to", host]
    if relay_password_file is not None:
        argv += ["--relay-password-file", relay_password_file]
    return argv + _timing(timeout_s, interval_s, phases)


PORT_SPAN: Final = contract.FETCH_PORT_SPAN


def deployment_port(base: int, deployment: str) -> int:
    """The receivers' port of one deployment: the inventory's base port plus a number derived
    from the deployment's name, so two deployments sharing a Spark listen on different ports
    (the same name always gets the same port)."""
    offset = int.from_bytes(hashlib.sha256(deployment.encode()).digest()[:4], "big") % PORT_SPAN
    return base + offset


def deployment_ports(base: int, deployments: Sequence[tuple[str, Sequence[str]]]) -> dict[str, int]:
    """The receivers' port of every deployment (name, its Sparks), none shared by two deployments
    on one Spark: in the order of their names, each takes :func:`deployment_port` unless a
    deployment before it on one of its Sparks has that port, then the next free one of the span
    (wrapping). The same inventory always gets the same ports."""
    taken: dict[str, set[int]] = {}
    ports: dict[str, int] = {}
    for name, sparks in sorted(deployments):
        used = set().union(*(taken.get(spark, set()) for spark in sparks))
        if len(used) >= PORT_SPAN:
            raise ValueError(f"{PORT_SPAN} deployments on one Spark leave no fetch port for {name}")
        port = deployment_port(base, name)
        while port in used:
            port = base + (port - base + 1) % PORT_SPAN
        ports[name] = port
        for spark in sparks:
            taken.setdefault(spark, set()).add(port)
    return ports


def push_argv(
    cache_dir: str,
    repo: str,
    revision: str,
    hosts: list[str],
    password_file: str,
    port: int = DEFAULT_PORT,
    bwlimit_kib: int | None = None,
    timeout_s: float | None = None,
    interval_s: float | None = None,
    other_rails: Sequence[Sequence[str]] = (),
    phases: str | None = None,
) -> list[str]:
    """``push`` to ``hosts`` (the peers' first-rail addresses) and, one stream per rail per peer,
    to the same peers' addresses on every rail of ``other_rails`` (same peer order)."""
    if not hosts:
        raise ValueError("push_argv: no peer to push to")
    if any(len(rail) != len(hosts) for rail in other_rails):
        raise ValueError("push_argv: every rail lists the same peers")
    argv = [
        *_base("push"),
        "--cache", cache_dir,
        "--repo", repo,
        "--revision", revision,
        "--to", ",".join(hosts),
        *[arg for rail in other_rails for arg in ("--to", ",".join(rail))],
        "--port", str(port),
        "--password-file", password_file,
    ]  # fmt: skip
    if bwlimit_kib is not None:
        argv += ["--bwlimit", str(bwlimit_kib)]
    return argv + _timing(timeout_s, interval_s, phases)


def wait_argv(
    cache_dir: str,
    repo: str,
    revision: str,
    timeout_s: float | None = None,
    interval_s: float | None = None,
    phases: str | None = None,
) -> list[str]:
    return [
        *_base("wait"),
        "--cache", cache_dir,
        "--repo", repo,
        "--revision", revision,
        *_timing(timeout_s, interval_s, phases),
    ]  # fmt: skip


def memwait_argv(
    need_gb: float,
    timeout_s: float | None = None,
    interval_s: float | None = None,
    meminfo: str | None = None,
    phases: str | None = None,
    vm: str | None = None,
) -> list[str]:
    """``memwait``: ``need_gb`` is the rank's planned footprint (``sparkrack plan``); ``vm``
    stands in for ``/proc/sys/vm`` (tests and the lab)."""
    argv = [*_base("memwait"), "--need-gb", f"{need_gb:g}"]
    if meminfo is not None:
        argv += ["--meminfo", meminfo]
    if vm is not None:
        argv += ["--vm", vm]
    return argv + _timing(timeout_s, interval_s, phases)


def settle_argv(ready_url: str, max_s: float, interval_s: float | None = None) -> list[str]:
    """The settle sidecar: flush every interval while the engine loads, until ``ready_url``
    answers 2xx or ``max_s`` passed, then idle (a sidecar that exits is restarted)."""
    argv = [PYTHON, f"{contract.SWITCH_MOUNT}/memsettle.py"]
    if interval_s is not None:
        argv += ["--interval", f"{interval_s:g}"]
    return [*argv, "hold", "--ready-url", ready_url, "--max-s", f"{max_s:g}", "--idle"]


def push_rails(res: Resolution) -> int:
    """The rails the push of one deployment copies over, one stream per rail per peer: every
    rail the head and all its peers have (none without a peer; the switch estimate divides the
    copy by this)."""
    if len(res.nodes) < 2:
        return 0
    return min(len(rail_addresses(res.ctx.plan, n)) for n in res.nodes)


def estimate(res: Resolution) -> SwitchPrediction:
    """The switch estimate of one deployment: its checkpoint, its peers and the push's rails, at
    the inventory's rates (``serving_rail_mbit_s``, ``serving_download_mbit_s``,
    ``serving_disk_mbyte_s``), the copy in the faster shape (:func:`copy_shape`)."""
    ctx = res.ctx
    rates = Rates(ctx.rail_mbit_s, ctx.download_mbit_s, ctx.disk_mbyte_s)
    peers, rails = len(res.nodes) - 1, max(1, push_rails(res))
    shape = copy_shape(res.weights_bytes, peers, rails, rates)
    return predict(res.weights_bytes, peers, rails, rates, shape)


def shape_of(res: Resolution) -> Shape:
    """How one deployment's checkpoint travels: a fan-out from the head or a chain."""
    return estimate(res).shape


def pf_address(plan: FabricPlan, node: NodePlan) -> str:
    """The Spark's address on its first fabric rail's PF."""
    return rail_addresses(plan, node)[0]


def rail_addresses(plan: FabricPlan, node: NodePlan) -> tuple[str, ...]:
    """The Spark's PF address on every fabric rail, in rail order (the plan's ``rails``): where
    its receiver listens and where a push to it goes, one stream per rail."""
    by_name = {port.name: port.address for port in node.ports}
    found = tuple(by_name[rail] for rail in plan.rails if rail in by_name)
    if found:
        return found
    return (by_name.get(plan.sriov_port, node.ports[0].address),)


@dataclass(frozen=True)
class FetchPlan:
    """Every command of one deployment's switch, in the order they run."""

    revision: str
    """The revision the fetch step downloads (:data:`UNPINNED` when the profile pins none)."""
    download: list[str]
    """On the head's Spark, in the engine image: the snapshot into the node's HF cache."""
    push: list[str] | None
    """On the head's Spark, in the fetch image: the snapshot to every other Spark (None: one)."""
    receive: list[tuple[NodePlan, list[str]]]
    """On every other Spark: the rsync daemon on its fabric PF address, until the marker."""
    wait: list[str]
    """Before every rank: the marker is on its Spark."""
    memwait: list[str]
    """Then: after a flush of the page cache, MemFree covers the rank's planned footprint."""
    copy_to: list[str]
    """The first-rail PF addresses the snapshot is copied to (in a chain, in the chain's
    order)."""
    copy_rails: list[list[str]]
    """The same peers' PF addresses on every rail (``copy_rails[0] == copy_to``; empty: no
    peer)."""
    shape: Shape
    """``fan-out``: the head pushes to every peer; ``chain``: to the first, each peer relays
    to the next."""
    port: int
    """The receivers' port (:func:`deployment_ports`)."""
    marker: str
    marker_on_host: str


def fetch_plan(res: Resolution) -> FetchPlan:
    """The fetch step's commands of one deployment, from its resolution."""
    profile, ctx = res.profile, res.ctx
    revision = profile.revision or UNPINNED
    cache = contract.HF_HUB_CACHE_MOUNT
    others = res.nodes[1:]
    peers = [rail_addresses(ctx.plan, n) for n in others]
    head = rail_addresses(ctx.plan, res.nodes[0])
    rails = push_rails(res)
    copy_rails = [[p[r] for p in peers] for r in range(rails)] if peers else []
    copy_to = copy_rails[0] if peers else []
    port = ctx.deployment_fetch_port or deployment_port(ctx.fetch_port, res.name)
    timeout = ctx.fetch_timeout
    secrets = f"{contract.FETCH_SECRET_MOUNT}/{SECRETS_KEY}"
    password = f"{contract.FETCH_SECRET_MOUNT}/{PASSWORD_KEY}"
    phases = contract.PHASE_FILE
    shape = shape_of(res)
    chain = shape == CHAIN
    # A fan-out: the head pushes to every peer, every peer takes it from the head. A chain: the
    # head pushes to the first peer only; each peer takes it from the one before and relays
    # to the one after.
    pushed_to = copy_rails if not chain else [rail[:1] for rail in copy_rails]
    upstream = [head, *peers[:-1]] if chain else [head] * len(peers)
    downstream: list[tuple[str, ...]] = [*peers[1:], ()] if chain else [()] * len(peers)
    return FetchPlan(
        revision=revision,
        download=download_argv(
            profile.model, revision, cache, res.need_bytes, timeout_s=timeout, phases=phases
        ),
        push=push_argv(
            cache,
            profile.model,
            revision,
            pushed_to[0],
            password,
            port=port,
            timeout_s=timeout,
            other_rails=pushed_to[1:],
            phases=phases,
        )
        if others
        else None,
        receive=[
            (
                node,
                receive_argv(
                    cache,
                    res.need_bytes,
                    secrets,
                    profile.model,
                    revision,
                    source[:rails],
                    port=port,
                    address=addresses[:rails],
                    timeout_s=timeout,
                    relay_to=after[:rails],
                    relay_password_file=password if after else None,
                    phases=phases if after else None,
                ),
            )
            for node, addresses, source, after in zip(
                others, peers, upstream, downstream, strict=True
            )
        ],
        wait=wait_argv(cache, profile.model, revision, timeout_s=timeout, phases=phases),
        memwait=memwait_argv(res.memwait_gb, timeout_s=ctx.memwait_timeout, phases=phases),
        copy_to=copy_to,
        copy_rails=copy_rails,
        shape=shape,
        port=port,
        marker=str(marker_path(cache, profile.model, profile.revision)),
        marker_on_host=str(marker_path(f"{ctx.hf_cache}/hub", profile.model, profile.revision)),
    )


LOADING_BARRIER_MARGIN = 1.25
"""How much longer than its estimate a load may take before the estimate is called near a
barrier: the published loads the rate is checked against run from 19 % slower to 23 % faster
than it (docs/design/switch-estimate.md; Nemotron-3-Ultra, src:ultra-post: 433 s estimated from
its checkpoint, ~490 s measured), and a rank reading a cold or busy disk loads slower still."""


def loading_barrier_warnings(res: Resolution, source: str) -> list[Problem]:
    """A warning when the deployment's estimated engine load, with :data:`LOADING_BARRIER_MARGIN`,
    reaches the engine's hard-coded loading barrier (a multi-rank engine whose pinned releases
    read no variable for it)."""
    barrier = res.engine.loading_barrier_s
    if barrier is None or res.engine.loading_barrier_env is not None or len(res.nodes) < 2:
        return []
    load = next(p.seconds for p in estimate(res).phases if p.name == "engine load")
    if load is None or load * LOADING_BARRIER_MARGIN <= barrier:
        return []
    return [
        Problem(
            source,
            "model",
            f"{res.profile.name}: each rank's weights load in about {load:.0f} s (estimate), "
            f"{load * LOADING_BARRIER_MARGIN:.0f} s with a {LOADING_BARRIER_MARGIN:g}x margin, "
            f"near or past {res.engine.name}'s loading barrier of {barrier:.0f} s, which its "
            "pinned releases hard-code: a rank that loads late kills the group with 'TP rank X "
            "could finish the model loading, but there are other ranks that didn't finish "
            "loading'",
            "keep the weights on each Spark's local NVMe with the page cache warm (the fetch "
            "step), spread the model over more Sparks, or use an image whose engine reads a "
            "variable for the barrier",
            "loading-barrier",
        )
    ]
