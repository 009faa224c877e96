"""Read an NCCL ``NCCL_DEBUG=INFO`` log and decide whether the fabric did what was asked.

src:roce-post: NCCL falls back to TCP sockets *silently* (no error, ~2 GB/s) when the pod cannot open
the RDMA verbs devices; the only evidence is in the INFO lines. This module finds them:

- ``NET/IB : Using [0]rocep1s0f0v0:1/RoCE [RO]; OOB net1:10.77.0.17<0>`` — the IB/RoCE plugin found
  devices (``/RoCE`` or ``/IB`` is the link layer);
- ``NET/IB : No device found.`` and ``NET/Socket : Using [0]net1:10.77.0.17<0>`` — the socket
  transport was initialised instead;
- ``Using network IB`` / ``Using network Socket`` — the network NCCL picked for the communicator;
- ``Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0`` — what each channel actually uses (wins over
  the init lines: a single ``via NET/Socket`` channel means traffic goes over TCP);
- nccl-tests style result rows (``size count type redop root time algbw busbw #wrong ...``) and
  ``# Avg bus bandwidth : X`` — bus bandwidth in GB/s.

Lines may carry a ``host:pid:tid [dev]`` prefix and an ``srun``-style `` 0: `` rank prefix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sparkrack.errors import Problem
from sparkrack.fabric.addressplan import FabricPlan
from sparkrack.fabric.ncclenv import TRANSPORTS, Transport

NcclNet = Literal["IB", "Socket"]
"""The network NCCL reports it uses ("NET/IB" or "NET/Socket")."""

# Default floors of the fabric gate (GB/s, peak all-reduce bus bandwidth across all Sparks).
# src:roce-post: TCP sockets top out around 2 GB/s on the Grace CPU. Each rail (one PCIe Gen5 x4 half
# of a QSFP cage) carries ~100 Gb/s = 12.5 GB/s; public back-to-back measurements reached 98 Gb/s
# busbw on one rail and 161 Gb/s (20 GB/s) on two. 8 GB/s per rail = 4x the socket ceiling, and
# with two rails 16 GB/s is above what one rail can carry: a second rail left idle fails the gate.
MIN_BUSBW_PER_RAIL_GBPS = 8.0
MIN_BUSBW_SOCKET_GBPS = 1.0


def default_min_busbw(requested: str, rails: int = 1) -> float:
    """Default floor of the fabric gate: per rail in use for RoCE, flat for the socket baseline."""
    if requested == "socket":
        return MIN_BUSBW_SOCKET_GBPS
    return MIN_BUSBW_PER_RAIL_GBPS * max(rails, 1)


_RANK_PREFIX = r"^(?:\s*\d+:\s*)?"
_IB_USING = re.compile(r"NET/IB\s*:\s*Using\s*(?P<devs>(?:\s*\[\d+\]\S+)+)")
_IB_DEV = re.compile(r"\[(?P<idx>\d+)\](?P<dev>[^:\s]+):(?P<port>\d+)/(?P<link>RoCE|IB)")
_IB_NONE = re.compile(r"NET/IB\s*:\s*No device found")
_SOCKET_USING = re.compile(r"NET/Socket\s*:\s*Using\s*(?P<devs>(?:\s*\[\d+\]\S+)+)")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (?P<net>\w+)")
_CHANNEL = re.compile(
    r"Channel\s+\d+(?:/\d+)?\s*:\s*\d+\[\d+\]\s*->\s*\d+\[\d+\]\s*(?:\[\w+\]\s*)?via\s+NET/(?P<net>[A-Za-z]+)"
)
_ROW = re.compile(
    _RANK_PREFIX
    + r"\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>[a-z0-9_]+)\s+(?P<redop>[a-z]+)\s+(?P<root>-?\d+)"
    r"\s+(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)\s+(?P<wrong>\S+)"
    r"(?:\s+(?P<time2>[\d.]+)\s+(?P<algbw2>[\d.]+)\s+(?P<busbw2>[\d.]+)\s+(?P<wrong2>\S+))?\s*$"
)
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<bw>[\d.]+)")
_NET_INIT_FAILED = re.compile(r"Failed to initialize any NET plugin")
_IB_HCA_SET = re.compile(r"NCCL_IB_HCA set (?:by environment )?to (?P<hca>\S+)")
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)")
_CHANNEL_IB_DEV = re.compile(r"via NET/IB/(?P<dev>\d+)")
_CHANNEL_LOCAL = re.compile(
    r"Channel\s+\d+/\d+\s*:\s*\d+\[\d+\]\s*->\s*\d+\[\d+\].*via\s+(?:P2P|SHM)/"
)
_GID_UNREACHABLE = re.compile(r"ibv_modify_qp.*(Network is unreachable|errno 101)", re.IGNORECASE)


@dataclass(frozen=True)
class BwRow:
    size: int
    busbw_gbps: float
    wrong: int
    time_us: float | None = None
    """The row's fastest time of one all-reduce (out-of-place or in-place), microseconds."""


@dataclass(frozen=True)
class NcclReport:
    """What the log says. ``transport`` is None when the log has no transport evidence."""

    transport: NcclNet | None
    link_layer: str | None = None  # "RoCE" or "IB" when the IB plugin listed devices
    ib_devices: tuple[str, ...] = ()
    ib_channels: int = 0
    socket_channels: int = 0
    busbw_gbps: float | None = None  # peak bus bandwidth of the result rows (GB/s)
    avg_busbw_gbps: float | None = None  # "# Avg bus bandwidth" line
    rows: tuple[BwRow, ...] = ()
    wrong: int = 0
    gid_unreachable: bool = False
    lines: tuple[str, ...] = field(default_factory=tuple)
    net_init_failed: bool = False
    """``NCCL WARN Failed to initialize any NET plugin``: the communicator never came up."""
    ib_no_device: bool = False
    """``NET/IB : No device found.``: the IB/RoCE plugin saw no verbs device."""
    ib_hca: str | None = None
    """``NCCL_IB_HCA`` as NCCL read it (``NCCL_IB_HCA set to ...``)."""
    nccl_version: str | None = None
    local_channels: int = 0
    """Channels over P2P/SHM: between GPUs of one host, never over the fabric."""
    ib_channels_by_device: tuple[tuple[str, int], ...] = ()
    """(device, channels) for every device NCCL listed in ``NET/IB : Using``, in its order."""


def _wrong(value: str | None) -> int:
    if value is None or not value.isdigit():
        return 0
    return int(value)


def parse_nccl_log(text: str) -> NcclReport:
    """Parse an NCCL INFO log (any number of ranks concatenated)."""
    lines_used: list[str] = []
    ib_devices: list[str] = []
    link_layer: str | None = None
    init_ib = init_socket = False
    using_network: str | None = None
    ib_channels = socket_channels = 0
    rows: list[BwRow] = []
    avg: float | None = None
    gid_unreachable = net_init_failed = ib_no_device = False
    ib_hca: str | None = None
    version: str | None = None
    local_channels = 0
    by_index: dict[int, int] = {}
    for raw in text.splitlines():
        line = raw.rstrip()
        if m := _CHANNEL.search(line):
            if m["net"] == "IB":
                ib_channels += 1
                if d := _CHANNEL_IB_DEV.search(line):
                    by_index[int(d["dev"])] = by_index.get(int(d["dev"]), 0) + 1
            elif m["net"] == "Socket":
                socket_channels += 1
            lines_used.append(line)
        elif _CHANNEL_LOCAL.search(line):
            local_channels += 1
        elif _NET_INIT_FAILED.search(line):
            net_init_failed = True
            lines_used.append(line)
        elif m := _IB_HCA_SET.search(line):
            ib_hca = m["hca"]
            lines_used.append(line)
        elif m := _VERSION.search(line):
            version = version or m["version"]
        elif m := _IB_USING.search(line):
            init_ib = True
            for dev in _IB_DEV.finditer(m["devs"]):
                if dev["dev"] not in ib_devices:
                    ib_devices.append(dev["dev"])
                link_layer = dev["link"]
            lines_used.append(line)
        elif _IB_NONE.search(line):
            ib_no_device = True
            lines_used.append(line)
        elif _SOCKET_USING.search(line):
            init_socket = True
            lines_used.append(line)
        elif m := _USING_NETWORK.search(line):
            using_network = m["net"]
            lines_used.append(line)
        elif m := _AVG.search(line):
            avg = float(m["bw"])
            lines_used.append(line)
        elif _GID_UNREACHABLE.search(line):
            gid_unreachable = True
            lines_used.append(line)
        elif not line.lstrip().startswith("#") and (m := _ROW.match(line)):
            busbw, time_us = float(m["busbw"]), float(m["time"])
            if m["busbw2"] is not None:
                busbw = max(busbw, float(m["busbw2"]))
                time_us = min(time_us, float(m["time2"]))
            wrong = _wrong(m["wrong"]) + _wrong(m["wrong2"])
            rows.append(BwRow(int(m["size"]), busbw, wrong, time_us))
            lines_used.append(line)

    transport: NcclNet | None
    if socket_channels:
        transport = "Socket"
    elif ib_channels:
        transport = "IB"
    elif using_network in ("IB", "Socket"):
        transport = "Socket" if using_network == "Socket" else "IB"
    elif init_socket:
        transport = "Socket"
    elif init_ib:
        transport = "IB"
    else:
        transport = None
    return NcclReport(
        transport=transport,
        link_layer=link_layer,
        ib_devices=tuple(ib_devices),
        ib_channels=ib_channels,
        socket_channels=socket_channels,
        busbw_gbps=max((r.busbw_gbps for r in rows), default=None),
        avg_busbw_gbps=avg,
        rows=tuple(rows),
        wrong=sum(r.wrong for r in rows),
        gid_unreachable=gid_unreachable,
        lines=tuple(lines_used),
        net_init_failed=net_init_failed,
        ib_no_device=ib_no_device,
        ib_hca=ib_hca,
        nccl_version=version,
        local_channels=local_channels,
        ib_channels_by_device=tuple((dev, by_index.get(i, 0)) for i, dev in enumerate(ib_devices)),
    )


def check_transport(text: str, requested: Transport, source: str = "nccl log") -> list[Problem]:
    """Problems when the transport NCCL chose is not the one requested (empty = fine)."""
    report = parse_nccl_log(text)
    return _transport_problems(report, requested, source)


def _transport_problems(report: NcclReport, requested: str, source: str) -> list[Problem]:
    if requested not in TRANSPORTS:
        return [
            Problem(source, "requested", f"{requested!r} is not a transport", "use roce or socket")
        ]
    if report.net_init_failed:
        return [net_init_problem(report, source)]
    if report.transport is None:
        return [
            Problem(
                source,
                "transport",
                "the log shows no NCCL transport selection",
                "run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS including INIT,NET)",
                "nccl-no-evidence",
            )
        ]
    if requested == "roce" and report.transport == "Socket":
        if report.gid_unreachable:
            fix = (
                "give the VF its host-side IPv4 (netplan, same address as the pod's): without it the "
                "RoCE GID table holds only fe80:: entries and ibv_modify_qp fails (src:roce-post)"
            )
        else:
            fix = (
                "run the pods privileged so NCCL can open /dev/infiniband/* (host-device moves the "
                "netdev, not the verbs devices), and check NCCL_IB_HCA names the VF's RDMA device "
                "(src:roce-post)"
            )
        detail = (
            f"{report.socket_channels} channel(s) via NET/Socket"
            if report.socket_channels
            else "NCCL picked NET/Socket"
        )
        return [
            Problem(
                source,
                "transport",
                f"RoCE was requested but NCCL fell back to TCP sockets ({detail})",
                fix,
                "nccl-socket-fallback",
            )
        ]
    if requested == "roce" and report.link_layer == "IB":
        return [
            Problem(
                source,
                "transport",
                "NCCL uses an InfiniBand-link device, not a RoCE VF",
                "set NCCL_IB_HCA to the VF's RDMA device from the address plan",
                "nccl-not-roce",
            )
        ]
    if requested == "socket" and report.transport == "IB":
        return [
            Problem(
                source,
                "transport",
                "sockets were requested but NCCL uses NET/IB",
                "set NCCL_IB_DISABLE=1 for a socket baseline",
                "nccl-unexpected-ib",
            )
        ]
    return []


def net_init_problem(report: NcclReport, source: str) -> Problem:
    """Why NCCL could not bring up any network plugin, and the fix."""
    hca = f" (NCCL_IB_HCA={report.ib_hca})" if report.ib_hca else ""
    if report.ib_no_device:
        return Problem(
            source,
            "NET/IB",
            "NCCL found no verbs device ('NET/IB : No device found') and, with NCCL_NET=IB, "
            "failed at init ('Failed to initialize any NET plugin'): the RDMA devices are not "
            f"visible in the pod, or NCCL_IB_HCA names a device that does not exist{hca}",
            "run the pod privileged (host-device moves the VF netdev, not /dev/infiniband/*); on "
            "the node, `ls /sys/class/infiniband` must list every device of NCCL_IB_HCA (the VFs "
            "of every rail: systemctl status sparkrack-sriov); NCCL_IB_HCA comes from the address "
            "plan (`sparkrack addresses`)",
            "nccl-net-ib-no-device",
        )
    return Problem(
        source,
        "NCCL_NET",
        "NCCL could not initialise any network plugin ('Failed to initialize any NET plugin') "
        "and never tried NET/IB: NCCL_NET names a plugin that is neither built in nor installed "
        "as libnccl-net-<name>.so",
        "set NCCL_NET=IB (RoCE) or NCCL_NET=Socket, as sparkrack.fabric.ncclenv renders it",
        "nccl-net-plugin-not-found",
    )


SMALL_MESSAGE_MIN_BYTES = 8 << 10
"""The gate's sweep must start here (or lower)."""
SMALL_MESSAGE_MAX_BYTES = 1 << 20
"""Top of the small-message region (8 KiB .. 1 MiB): the all-reduces of tensor-parallel decode."""
SMALL_MESSAGE_LOW_RATIO = 0.4
"""The small region's peak busbw below this share of the large-message peak is LOW. Source: the
ratio rule 4-Spark operators use on a dual-QSFP link, where a mis-spanned cable shows a flat loss
at 8 KB .. 1 MB (92-95 Gbit/s against 185-190 spanned) while the large-message peak looks fine
(issue 35)."""


@dataclass(frozen=True)
class SizeRegions:
    """The small-message region next to the large-message peak, from one log's result rows."""

    small_peak_gbps: float
    small_peak_size: int
    small_latency_us: float | None
    """Time of one all-reduce of the smallest size measured (the latency floor)."""
    small_min_size: int
    large_peak_gbps: float
    large_peak_size: int

    @property
    def ratio(self) -> float:
        return self.small_peak_gbps / self.large_peak_gbps if self.large_peak_gbps else 0.0


def size_regions(report: NcclReport) -> SizeRegions | None:
    """None when the rows do not cover both regions (a sweep that starts above 1 MiB)."""
    small = [r for r in report.rows if r.size <= SMALL_MESSAGE_MAX_BYTES]
    large = [r for r in report.rows if r.size > SMALL_MESSAGE_MAX_BYTES]
    if not small or not large:
        return None
    peak = max(small, key=lambda r: r.busbw_gbps)
    first = min(small, key=lambda r: r.size)
    big = max(large, key=lambda r: r.busbw_gbps)
    return SizeRegions(
        peak.busbw_gbps, peak.size, first.time_us, first.size, big.busbw_gbps, big.size
    )


def small_message_problems(
    report: NcclReport, source: str, min_small_busbw_gbps: float | None = None
) -> tuple[list[Problem], list[Problem]]:
    """(failures, warnings) of the small-message region: a sweep without it is a failure (the
    gate must see the sizes decode uses); below :data:`SMALL_MESSAGE_LOW_RATIO` of the large
    peak a warning; below ``min_small_busbw_gbps`` (the rails' small-message floor) a failure."""
    if not report.rows:
        return [], []
    regions = size_regions(report)
    smallest = min(r.size for r in report.rows)
    if regions is None or smallest > SMALL_MESSAGE_MIN_BYTES:
        return [
            Problem(
                source,
                "sizes",
                f"the sweep starts at {smallest} B, above {SMALL_MESSAGE_MIN_BYTES} B: it skips "
                "the sizes of tensor-parallel decode's all-reduces",
                "run the fabric check's all-reduce from 8 KiB (SPARKRACK_MIN_BYTES; "
                "all_reduce_perf -b 8K)",
                "nccl-no-small-messages",
            )
        ], []
    failures: list[Problem] = []
    warnings: list[Problem] = []
    if regions.ratio < SMALL_MESSAGE_LOW_RATIO:
        warnings.append(
            Problem(
                source,
                "busbw",
                f"LOW small-message bandwidth: peak {regions.small_peak_gbps:.2f} GB/s at or "
                f"below {SMALL_MESSAGE_MAX_BYTES} B is {regions.ratio:.2f}x the large-message "
                f"peak {regions.large_peak_gbps:.2f} GB/s (below {SMALL_MESSAGE_LOW_RATIO}x)",
                "a flat loss at 8 KB .. 1 MB with a good large-message peak is the sign of a "
                "mis-spanned dual-QSFP link: check that each cable spans both cages' halves as "
                "the rails in fabric.rails say",
                "nccl-small-message-low",
            )
        )
    if min_small_busbw_gbps is not None and regions.small_peak_gbps < min_small_busbw_gbps:
        failures.append(
            Problem(
                source,
                "busbw",
                f"small-message peak {regions.small_peak_gbps:.2f} GB/s is below the rails' "
                f"small-message floor of {min_small_busbw_gbps:.2f} GB/s",
                "check the cabling of each rail, MTU 9000 end to end and the switch's RoCE settings",
                "nccl-small-message-floor",
            )
        )
    return failures, warnings


def rail_problems(report: NcclReport, hcas: Sequence[str], source: str) -> list[Problem]:
    """A rail whose VF device NCCL did not list in ``NET/IB : Using`` carries no traffic."""
    unused = [dev for dev in hcas if dev not in report.ib_devices]
    if not unused or report.transport != "IB":
        return []
    return [
        Problem(
            source,
            "NCCL_IB_HCA",
            f"NCCL does not use rail device(s) {', '.join(unused)} (it lists "
            f"{', '.join(report.ib_devices) or 'none'})",
            "check the VF exists on that rail (`ls /sys/class/infiniband` on the node), its "
            "NAD is attached to the pod and NCCL_IB_HCA lists it in the =dev1,dev2 form",
            "nccl-rail-unused",
        )
    ]


def hca_devices(hca: str) -> tuple[str, ...]:
    """Devices of an ``NCCL_IB_HCA`` value: ``=a,b`` -> (a, b); port suffixes dropped."""
    return tuple(part.split(":")[0] for part in hca.lstrip("^=").split(",") if part.split(":")[0])


@dataclass(frozen=True)
class Verdict:
    """The fabric gate's verdict on one log."""

    report: NcclReport
    problems: list[Problem]
    rails: tuple[str, ...]
    """The rail devices the ranks were given (``hcas`` or the log's NCCL_IB_HCA line)."""
    floor_gbps: float
    warnings: list[Problem] = field(default_factory=list)
    """What the gate reports without failing (the small-message ratio rule)."""
    regions: SizeRegions | None = None
    small_floor_gbps: float | None = None

    @property
    def passed(self) -> bool:
        return not self.problems

    def small_message_line(self) -> str:
        """The small-message region next to the large-message peak, for the gate's report."""
        r = self.regions
        if r is None:
            return "no small-message rows"
        latency = "n/a" if r.small_latency_us is None else f"{r.small_latency_us:.1f} us"
        floor = "" if self.small_floor_gbps is None else f", floor {self.small_floor_gbps:.2f}"
        return (
            f"peak {r.small_peak_gbps:.2f} GB/s at {r.small_peak_size} B, latency {latency} at "
            f"{r.small_min_size} B; large-message peak {r.large_peak_gbps:.2f} GB/s at "
            f"{r.large_peak_size} B; ratio {r.ratio:.2f} (LOW below {SMALL_MESSAGE_LOW_RATIO}"
            f"{floor})"
        )

    def rail_use(self) -> list[tuple[str, bool, int]]:
        """(rail device, listed by NCCL, channels on it) for every rail."""
        channels = dict(self.report.ib_channels_by_device)
        return [(dev, dev in channels, channels.get(dev, 0)) for dev in self.rails]


def gate(
    text: str,
    requested: Transport,
    min_busbw_gbps: float | None = None,
    source: str = "nccl log",
    hcas: Sequence[str] = (),
    min_small_busbw_gbps: float | None = None,
) -> Verdict:
    """The fabric gate with its defaults: the rails are ``hcas`` or, when empty, the devices of
    the log's ``NCCL_IB_HCA set to`` line; the floor defaults to :func:`default_min_busbw` for
    that many rails. ``min_small_busbw_gbps``: the small-message floor (None: only the ratio
    warning judges the small-message region)."""
    report = parse_nccl_log(text)
    rails = tuple(hcas) or (hca_devices(report.ib_hca) if report.ib_hca else ())
    floor = (
        min_busbw_gbps
        if min_busbw_gbps is not None
        else default_min_busbw(requested, len(rails) or 1)
    )
    _, problems = check_fabric(text, requested, floor, source, rails)
    small_failures, warnings = (
        ([], [])
        if report.net_init_failed
        else small_message_problems(report, source, min_small_busbw_gbps)
    )
    return Verdict(
        report,
        problems + small_failures,
        rails,
        floor,
        warnings,
        size_regions(report),
        min_small_busbw_gbps,
    )


def check_fabric(
    text: str,
    requested: Transport,
    min_busbw_gbps: float,
    source: str = "nccl log",
    hcas: Sequence[str] = (),
) -> tuple[NcclReport, list[Problem]]:
    """The fabric gate: transport as requested, every rail's device (``hcas``) in use, no wrong
    results, peak bus bandwidth >= floor."""
    report = parse_nccl_log(text)
    problems = _transport_problems(report, requested, source)
    if report.net_init_failed:
        return report, problems  # nothing ran: no rows to judge
    if requested == "roce":
        problems += rail_problems(report, hcas, source)
    if (
        report.transport is not None
        and report.ib_channels + report.socket_channels == 0
        and (report.local_channels)
    ):
        problems.append(
            Problem(
                source,
                "transport",
                f"all {report.local_channels} channel(s) run over P2P/SHM inside one host: the "
                "all-reduce never crossed the fabric",
                "run one rank per Spark (the fabric-check pods pin one per node)",
                "nccl-no-fabric",
            )
        )
    if report.busbw_gbps is None:
        problems.append(
            Problem(
                source,
                "busbw",
                "the log has no all-reduce result rows",
                "the test did not finish; read the pod logs for the error",
                "nccl-no-result",
            )
        )
    elif report.busbw_gbps < min_busbw_gbps:
        problems.append(
            Problem(
                source,
                "busbw",
                f"peak bus bandwidth {report.busbw_gbps:.2f} GB/s is below the floor of "
                f"{min_busbw_gbps:.2f} GB/s",
                "a TCP-socket path tops out near 2 GB/s on the Grace CPU (src:roce-post); check the "
                "transport lines, MTU 9000 end to end and the switch's RoCE settings",
                "nccl-busbw-floor",
            )
        )
    if report.gid_unreachable:
        problems.append(
            Problem(
                source,
                "ibv_modify_qp",
                "RoCE queue-pair setup failed with 'Network is unreachable'",
                "give the VF its host-side IPv4 (same address the pod gets): without it the RoCE "
                "GID table holds only fe80:: entries (src:roce-post)",
                "nccl-gid-unreachable",
            )
        )
    if report.wrong:
        problems.append(
            Problem(
                source,
                "#wrong",
                f"{report.wrong} element(s) had wrong all-reduce results",
                "the fabric corrupts data: check cables, FEC and firmware",
                "nccl-wrong-results",
            )
        )
    return report, problems


ALL_RAILS = "all-rails"
"""Name of the sweep over every rail at once (the way serving ranks use the fabric)."""


@dataclass(frozen=True)
class Sweep:
    """One all-reduce sweep of the fabric gate: the rails NCCL is given in it."""

    name: str
    rails: tuple[int, ...]
    """Positions in ``fabric.rails``."""
    devices: tuple[str, ...]
    """The head's RDMA device of each of those rails (what ``NCCL_IB_HCA`` lists)."""

    @property
    def one_rail(self) -> bool:
        return self.name != ALL_RAILS


def fabric_sweeps(plan: FabricPlan, vf_index: int | None = None) -> tuple[Sweep, ...]:
    """The sweeps the gate runs, one after another (each needs every Spark's GPU): every rail at
    once, then, with more than one rail, each rail alone. A mis-spanned or weak rail hides in
    the combined sweep, where the other rail carries the large messages; alone it shows."""
    index = plan.serving_vf_index if vf_index is None else vf_index
    vfs = plan.head.rail_vfs(index)
    combined = Sweep(ALL_RAILS, tuple(vf.rail for vf in vfs), tuple(vf.rdma_device for vf in vfs))
    if len(vfs) < 2:
        return (combined,)
    return (combined, *(Sweep(f"rail{vf.rail}", (vf.rail,), (vf.rdma_device,)) for vf in vfs))


def gate_sweeps(
    logs: Mapping[str, str],
    sweeps: Sequence[Sweep],
    requested: Transport,
    min_busbw_gbps: float | None = None,
    min_small_busbw_per_rail_gbps: float | None = None,
) -> list[tuple[Sweep, Verdict]]:
    """The fabric gate on every sweep's log (``logs`` by sweep name).

    Floors of the combined sweep: ``min_busbw_gbps`` (None: :func:`default_min_busbw` for its
    rails) and ``min_small_busbw_per_rail_gbps`` times its rails. Floors of a one-rail sweep:
    the combined floor's share of one rail, and ``min_small_busbw_per_rail_gbps`` itself. A
    sweep without a log fails."""
    verdicts: list[tuple[Sweep, Verdict]] = []
    count = max((len(s.rails) for s in sweeps), default=1) or 1
    for sweep in sweeps:
        source = f"fabric check {sweep.name}"
        rails = len(sweep.rails) or 1
        if min_busbw_gbps is None:
            floor = default_min_busbw(requested, rails)
        else:
            floor = min_busbw_gbps * rails / count
        small = None
        if min_small_busbw_per_rail_gbps is not None:
            small = min_small_busbw_per_rail_gbps * (rails if requested == "roce" else 1)
        text = logs.get(sweep.name)
        if text is None:
            problem = Problem(
                source,
                "log",
                f"no NCCL log for the {sweep.name} sweep",
                "run the fabric check's sweeps (playbooks/fabric_check.yml) and pass every log",
                "nccl-no-result",
            )
            empty = NcclReport(transport=None)
            verdicts.append((sweep, Verdict(empty, [problem], sweep.devices, floor)))
            continue
        hcas = sweep.devices if requested == "roce" else ()
        verdicts.append(
            (sweep, gate(text, requested, floor, source, hcas, min_small_busbw_gbps=small))
        )
    return verdicts
