"""How long a model switch takes, phase by phase, from the model's size and the inventory's rates.

A switch runs: pre-pull (the images), download (the head Spark fetches the checkpoint from the
Hub), verify (every byte against the Hub's hashes), copy (one stream per rail to each peer),
peer-verify (a peer hashes what arrived and answers its pusher), wait-memory (a rank waits until
the old model freed its memory), engine load (the weights read from disk) and ready.

The copy has two shapes (:func:`copy_shape` picks the faster): a **fan-out**, the head pushing
to every peer at once (its rails carry every copy), or a **chain**, the head pushing to the
first peer only and each peer relaying every file to the next as soon as it has it whole
(``relay``: each further peer holds the bytes one file after the one before, and verifies
once that one has verified and pushed it the manifest).

:func:`predict` is the one model of those times; the serve play prints the measured timeline
beside it (:mod:`sparkrack.serving.switch.timeline`); ``tests/serving/test_fetch_copy.py`` and
``tests/serving/test_fetch_chain_lab.py`` check its copy figures against rate-limited copies
between lab containers, and ``lab/bench_rails.py`` measures both shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from sparkrack.planner.load_figures import fitted_rate

MB = 1_000_000
VERIFY_MBYTE_S_PER_CORE = 1_000
"""sha256 per core with SHA extensions (measured 1.7 GB per CPU-second in lab/bench_verify.py;
1 GB/s per core is the figure the verification is held to)."""
SPARK_CORES = 20
"""A GB10's CPU cores (10 Cortex-X925 + 10 Cortex-A725): the verification hashes in parallel."""
RAIL_OVERHEAD_S = 0.3
"""Fixed cost of one rail's stream to a peer: its rsync connections (snapshot folder, shared
blobs). Measured 0.13 s on loopback (32 MB at --bwlimit=4000 KiB/s: 7.94 s against 7.81 s on the
wire)."""
VERDICT_OVERHEAD_S = 1.0
"""Fixed cost of the peer's answer: two rsync connections (manifest, round) and the verdict,
polled every 0.5 s. Measured 1.06-1.12 s on loopback, 1.08 s between lab containers."""
RELAY_OVERHEAD_S = 1.0
"""Fixed cost of one hop of a chain beyond its bytes and hashing: the relay noticing a whole
file (every 0.25 s), its rsync processes, and the peer's stop after its verdict before its
final push."""
LARGEST_FILE_BYTES = 5_000_000_000
"""The largest file of a checkpoint when nothing says: 5 GB, the usual safetensors shard size
on the Hub. An assumption: the render knows a model's size, not its files'."""
LOAD_MBYTE_S: Final = round(fitted_rate(), 1)
"""Weights one GB10 rank loads per second (181.6 MB/s): the loader's copy out of memory-mapped
file pages into the GPU's allocation, fit on published loads
(:data:`sparkrack.planner.load_figures.FIT`). A faster disk does not shorten it; a slower disk
does (:attr:`Rates.load_mbyte_s`)."""
OUTAGE_PHASES: Final = ("wait-memory", "engine load")
"""The phases during which no engine of the deployment serves: the old one is stopped once the
copy has verified, the new one serves once its weights are loaded. Download, verify and copy run
while the old model still serves."""
Shape = Literal["fan-out", "chain"]
FAN_OUT: Final[Shape] = "fan-out"
CHAIN: Final[Shape] = "chain"


@dataclass(frozen=True)
class Rates:
    """The rates a switch moves bytes at: the inventory's ``serving_rail_mbit_s``,
    ``serving_download_mbit_s``, ``serving_disk_mbyte_s``, and the CPU's hashing."""

    rail_mbit_s: float
    download_mbit_s: float
    disk_mbyte_s: float
    cores: int = SPARK_CORES
    verify_mbyte_s_per_core: float = VERIFY_MBYTE_S_PER_CORE
    loader_mbyte_s: float = LOAD_MBYTE_S

    @property
    def load_mbyte_s(self) -> float:
        """A rank loads its weights no faster than the loader's copy, nor than its disk reads."""
        return min(self.disk_mbyte_s, self.loader_mbyte_s)

    @property
    def verify_mbyte_s(self) -> float:
        """Hashing is bound by the CPU's cores or by the disk, whichever is slower."""
        return min(self.disk_mbyte_s, self.cores * self.verify_mbyte_s_per_core)


@dataclass(frozen=True)
class PhaseEstimate:
    name: str
    seconds: float | None
    """None: not predicted (``how`` says why)."""
    how: str


def total_seconds(phases: dict[str, float | None]) -> float:
    """Predicted phases (name -> seconds, None: not predicted) one after another, the rails'
    copies once (they run at the same time)."""
    timed = {name: s for name, s in phases.items() if s is not None}
    copies = [s for name, s in timed.items() if name.startswith("copy")]
    rest = sum(s for name, s in timed.items() if not name.startswith("copy"))
    return rest + max(copies, default=0.0)


@dataclass(frozen=True)
class SwitchPrediction:
    model_bytes: int
    peers: int
    rails: int
    phases: tuple[PhaseEstimate, ...]
    assumptions: tuple[str, ...] = field(default=())
    shape: Shape = FAN_OUT

    @property
    def total_s(self) -> float:
        """The phases one after another, the rails' copies once (they run at the same time)."""
        return total_seconds({p.name: p.seconds for p in self.phases})

    def seconds(self, name: str) -> float | None:
        return next((p.seconds for p in self.phases if p.name == name), None)

    @property
    def outage_s(self) -> float:
        """How long the deployment serves nothing: old engine stopped -> new one ready
        (:data:`OUTAGE_PHASES`)."""
        return sum(self.seconds(name) or 0.0 for name in OUTAGE_PHASES)


def copy_seconds(model_bytes: int, peers: int, rails: int, rates: Rates) -> float:
    """Wall seconds of one rail's stream when the head pushes to ``peers`` Sparks over ``rails``
    rails: the head's rails carry ``peers`` copies at once (its links are the bottleneck), no
    faster than a peer's disk writes the whole copy (the rails write it at once)."""
    if peers == 0:
        return 0.0
    wire = peers * model_bytes * 8 / (rails * rates.rail_mbit_s * MB)
    disk = model_bytes / (rates.disk_mbyte_s * MB)
    return max(wire, disk) + RAIL_OVERHEAD_S


def peer_verify_seconds(model_bytes: int, peers: int, rates: Rates) -> float:
    """Wall seconds from the end of the streams to the peer's verdict: each peer hashes its whole
    copy (the peers at once), then answers the head."""
    if peers == 0:
        return 0.0
    return model_bytes / (rates.verify_mbyte_s * MB) + VERDICT_OVERHEAD_S


def relay_seconds(
    model_bytes: int, peers: int, rates: Rates, largest_bytes: int | None = None
) -> float:
    """What a chain adds after the first peer has verified, until the last has. Peer k holds
    every byte one file (the largest, on one rail) after peer k-1; it verifies once it has them
    and peer k-1, verified itself, has pushed it the manifest: each hop waits for the later of
    the two, then hashes the model and answers."""
    if peers < 2:
        return 0.0
    largest = min(model_bytes, largest_bytes or LARGEST_FILE_BYTES)
    lag = largest * 8 / (rates.rail_mbit_s * MB) + RELAY_OVERHEAD_S
    check = peer_verify_seconds(model_bytes, 1, rates)
    arrived, verified = 0.0, check  # peer 1: its bytes at 0, verified after its check
    for _ in range(peers - 1):
        arrived += lag
        verified = max(verified, arrived) + RAIL_OVERHEAD_S + check
    return verified - check


def chain_seconds(
    model_bytes: int, peers: int, rails: int, rates: Rates, largest_bytes: int | None = None
) -> float:
    """From the start of the copy until the last peer of a chain has verified: the first hop's
    streams, the first peer's check, then the relay."""
    return (
        copy_seconds(model_bytes, min(peers, 1), rails, rates)
        + peer_verify_seconds(model_bytes, min(peers, 1), rates)
        + relay_seconds(model_bytes, peers, rates, largest_bytes)
    )


def fan_out_seconds(model_bytes: int, peers: int, rails: int, rates: Rates) -> float:
    """From the start of the copy until every peer of a fan-out has verified."""
    return copy_seconds(model_bytes, peers, rails, rates) + peer_verify_seconds(
        model_bytes, peers, rates
    )


def copy_shape(
    model_bytes: int, peers: int, rails: int, rates: Rates, largest_bytes: int | None = None
) -> Shape:
    """The faster shape by :func:`chain_seconds` against :func:`fan_out_seconds` (a chain
    needs two peers or more; a tie keeps the fan-out)."""
    if peers < 2:
        return FAN_OUT
    chain = chain_seconds(model_bytes, peers, rails, rates, largest_bytes)
    return CHAIN if chain < fan_out_seconds(model_bytes, peers, rails, rates) else FAN_OUT


def predict(
    model_bytes: int,
    peers: int,
    rails: int,
    rates: Rates,
    shape: Shape = FAN_OUT,
    largest_bytes: int | None = None,
) -> SwitchPrediction:
    """Each phase of a switch to a model of ``model_bytes`` on ``1 + peers`` Sparks, the copy
    over ``rails`` rails per peer in ``shape``, nothing of it in any cache yet."""
    if model_bytes <= 0 or peers < 0 or rails < 1:
        raise ValueError(f"predict: {model_bytes} bytes, {peers} peers, {rails} rails")
    if shape == CHAIN and peers < 2:
        raise ValueError(f"predict: a chain needs two peers or more, not {peers}")
    chain = shape == CHAIN
    size_mb = model_bytes / MB
    download = max(
        model_bytes * 8 / (rates.download_mbit_s * MB), model_bytes / (rates.disk_mbyte_s * MB)
    )
    verify = size_mb / rates.verify_mbyte_s
    streams = 1 if chain else peers
    copy = copy_seconds(model_bytes, streams, rails, rates)
    checked = peer_verify_seconds(model_bytes, streams, rates)
    largest = min(model_bytes, largest_bytes or LARGEST_FILE_BYTES)
    load = load_seconds(model_bytes // (1 + peers), rates)
    phases = (
        PhaseEstimate("pre-pull", None, "not predicted: sparkrack does not know an image's size"),
        PhaseEstimate(
            "download",
            download,
            f"{size_mb / 1000:.1f} GB at {rates.download_mbit_s:g} Mbit/s "
            f"(no faster than the disk's {rates.disk_mbyte_s:g} MB/s)",
        ),
        PhaseEstimate(
            "verify", verify, f"sha256 at {rates.verify_mbyte_s:g} MB/s (CPU cores or disk)"
        ),
        *(
            (
                PhaseEstimate(
                    f"copy rail {rail}",
                    copy,
                    f"{streams} peer(s) x {size_mb / rails / 1000:.1f} GB over rail {rail} at "
                    f"{rates.rail_mbit_s:g} Mbit/s, +{RAIL_OVERHEAD_S:g} s per stream"
                    + (" (the head to the first peer of the chain)" if chain else ""),
                )
                for rail in range(rails)
            )
            if peers
            else (PhaseEstimate("copy", 0.0, "one Spark: no copy"),)
        ),
        *(
            (
                PhaseEstimate(
                    "relay",
                    relay_seconds(model_bytes, peers, rates, largest_bytes),
                    f"{peers - 1} further peer(s), each one file ({largest / 1e9:.1f} GB at "
                    f"{rates.rail_mbit_s:g} Mbit/s, +{RELAY_OVERHEAD_S:g} s) behind the one "
                    "before, then its manifest after that one's check, then its own check",
                ),
            )
            if chain
            else ()
        ),
        *(
            (
                PhaseEstimate(
                    "peer-verify",
                    checked,
                    f"{'the first' if chain else 'each'} peer hashes {size_mb / 1000:.1f} GB at "
                    f"{rates.verify_mbyte_s:g} MB/s, +{VERDICT_OVERHEAD_S:g} s for its answer",
                ),
            )
            if peers
            else ()
        ),
        PhaseEstimate("wait-memory", 0.0, "0: the Sparks' memory is free when the switch starts"),
        PhaseEstimate(
            "engine load",
            load,
            f"each rank loads its share ({size_mb / (1 + peers) / 1000:.1f} GB) at "
            f"{rates.load_mbyte_s:g} MB/s (the loader's copy, or the disk if slower); graph "
            "capture and warm-up not included",
        ),
    )
    shaped = (
        (
            f"a chain head -> peer -> peer: faster here than a fan-out "
            f"({chain_seconds(model_bytes, peers, rails, rates, largest_bytes):.0f} s against "
            f"{fan_out_seconds(model_bytes, peers, rails, rates):.0f} s); its largest file "
            f"{largest / 1e9:.1f} GB"
        )
        if chain
        else "the rails of the head carry every peer's copy at once: the head's links are the limit"
    )
    assumptions = (
        "nothing of the model is cached on any Spark (a cached model downloads and copies nothing)",
        shaped,
        f"sha256 at {rates.verify_mbyte_s_per_core:g} MB/s per core on {rates.cores} cores",
        "the copies of the rails run in parallel: one copy phase per rail, the same time each",
        "ready = the sum of the predicted phases, the rails' copies counted once (pre-pull not "
        "included)",
        "outage = " + " + ".join(OUTAGE_PHASES) + ": the old model serves through download, "
        "verify and copy",
    )
    return SwitchPrediction(model_bytes, peers, rails, phases, assumptions, shape)


def load_seconds(share_bytes: int, rates: Rates) -> float:
    """Seconds one rank takes to load ``share_bytes`` of weights (its share of the model)."""
    return share_bytes / (rates.load_mbyte_s * MB)


def within(predicted_s: float, measured_s: float, tolerance: float, slack_s: float = 0.0) -> bool:
    """The prediction is within ``tolerance`` (a fraction) of the measurement, or within
    ``slack_s`` seconds of it (for a phase of about a second, where a process start is 10 %)."""
    return abs(predicted_s - measured_s) <= max(tolerance * measured_s, slack_s)


def table(prediction: SwitchPrediction) -> list[str]:
    """The prediction as lines: one per phase with its seconds and how it was reckoned."""
    lines = [f"{'phase':<12} {'predicted':>10}  how"]
    for p in prediction.phases:
        shown = "-" if p.seconds is None else f"{p.seconds:.1f} s"
        lines.append(f"{p.name:<12} {shown:>10}  {p.how}")
    lines.append(
        f"{'ready':<12} {prediction.total_s:>8.1f} s  the phases above in turn, the rails' copies at once"
    )
    lines.append(
        f"{'outage':<12} {prediction.outage_s:>8.1f} s  no model served: "
        + " + ".join(OUTAGE_PHASES)
        + " (the old model serves until then)"
    )
    return lines
