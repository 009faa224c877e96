"""Per-rail raw RDMA preflight: read ``ib_write_bw`` and the rail's link facts, judge the rail.

A rail (a PF in ``fabric.rails``) is one PCIe Gen5 x4 half of a GB10 QSFP cage, ~100 Gb/s. Link
checks alone miss a known failure: a ConnectX-7 endpoint negotiates 200 Gb/s Ethernet and PCIe
Gen5 x4, yet TCP and RDMA stay near 13 Gb/s (reproduced on four updated Sparks with DGX OS 7.5.0
and firmware 28.45.4028: 13.23 Gb/s with eight queue pairs, against ~92-97 Gb/s on a healthy
rail). Only a raw bandwidth test shows it, so the fabric gate runs ``ib_write_bw`` on every rail
between Spark pairs before the NCCL test.

Inputs, as the play collects them:

- perftest output of ``ib_write_bw ... --report_gbits`` (client side; the result row is
  ``#bytes #iterations BW peak BW average MsgRate``; only ``--report_gbits`` output (Gb/sec) is
  read, a MB/sec table is refused rather than converted with a guessed unit);
- ``rdma link show`` lines (``link rocep1s0f0/1 state ACTIVE physical_state LINK_UP netdev
  enp1s0f0np0``) for the RDMA device <-> netdev mapping;
- sysfs facts of the rail's netdev: ``speed`` (Mb/s), ``device/current_link_width``,
  ``device/current_link_speed`` and the RDMA device's ``fw_ver``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sparkrack.errors import Problem

DEFAULT_FLOOR_GBPS = 60.0
"""Per-rail floor: a healthy rail measures ~92-97 Gb/s, the degraded case ~13 Gb/s."""
DEGRADED_BAND_GBPS = (8.0, 25.0)
"""Bandwidth band of the degraded-ConnectX-7 case when link and PCIe look healthy."""
EXPECTED_LINK_MBPS = 200_000
EXPECTED_PCIE_WIDTH = 4

DEGRADED_CX7_FIX = (
    "known degraded ConnectX-7 initialisation (link and PCIe negotiate fully, bandwidth stays "
    "near 13 Gb/s): power-cycle the Spark completely -- shut down, remove AC power, wait, boot "
    "(a warm reboot is reported not to clear it) -- then rerun playbooks/fabric_check.yml; if "
    "the rail stays degraded, open an NVIDIA DGX Spark support case with the output of this check"
)

_UNITS = re.compile(r"BW peak\[(?P<unit>[A-Za-z/]+)\]")
_ROW = re.compile(
    r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>[\d.]+)\s+(?P<avg>[\d.]+)\s+(?P<rate>[\d.]+)\s*$"
)
_DEVICE = re.compile(r"Device\s*:\s*(?P<dev>\S+)")
_QPS = re.compile(r"Number of qps\s*:\s*(?P<qps>\d+)")
_LINK_TYPE = re.compile(r"Link type\s*:\s*(?P<link>\w+)")
_MTU = re.compile(r"\bMtu\s*:\s*(?P<mtu>\d+)")
_ERRORS = (
    re.compile(r"Couldn't connect to|Unable to init the socket connection|Couldn't read"),
    re.compile(r"IB device \S+ not found|No IB devices found|Couldn't get context"),
    re.compile(r"Failed to modify QP|Unable to Connect the HCA|ibv_modify_qp"),
)
_RDMA_LINK = re.compile(
    r"^link\s+(?P<dev>[^/\s]+)/(?P<port>\d+)\s+state\s+(?P<state>\S+)"
    r"(?:\s+physical_state\s+(?P<phys>\S+))?(?:\s+netdev\s+(?P<netdev>\S+))?"
)


@dataclass(frozen=True)
class WriteBw:
    """One ``ib_write_bw`` run as its output reports it."""

    device: str | None
    qps: int | None
    link_type: str | None
    mtu: int | None
    msg_bytes: int | None
    peak_gbps: float | None
    average_gbps: float | None
    error: str | None
    """First line that says why the run failed (connection, device, QP setup)."""


def parse_write_bw(text: str) -> WriteBw:
    """Parse perftest ``ib_write_bw`` output (client or server side)."""
    unit = "Gb/sec"
    device = link = error = None
    qps = mtu = msg = None
    peak = avg = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _UNITS.search(line):
            unit = m["unit"]
        elif (m := _ROW.match(raw)) and not line.startswith("#"):
            if unit.lower().startswith("gb"):
                msg, peak, avg = int(m["bytes"]), float(m["peak"]), float(m["avg"])
            elif error is None:
                error = (
                    f"result reported in {unit}, not Gb/sec: run ib_write_bw with --report_gbits"
                )
        if device is None and (m := _DEVICE.search(line)):
            device = m["dev"]
        if qps is None and (m := _QPS.search(line)):
            qps = int(m["qps"])
        if link is None and (m := _LINK_TYPE.search(line)):
            link = m["link"]
        if mtu is None and (m := _MTU.search(line)):
            mtu = int(m["mtu"])
        if error is None and any(p.search(line) for p in _ERRORS):
            error = line
    return WriteBw(device, qps, link, mtu, msg, peak, avg, error)


@dataclass(frozen=True)
class RdmaLink:
    device: str
    port: int
    state: str
    physical_state: str | None
    netdev: str | None


def parse_rdma_links(text: str) -> dict[str, RdmaLink]:
    """``rdma link show`` -> links by RDMA device."""
    links: dict[str, RdmaLink] = {}
    for raw in text.splitlines():
        if m := _RDMA_LINK.match(raw.strip()):
            links[m["dev"]] = RdmaLink(m["dev"], int(m["port"]), m["state"], m["phys"], m["netdev"])
    return links


@dataclass(frozen=True)
class RailFacts:
    """What the node says about one rail: mapping, negotiated speed, PCIe link, firmware."""

    netdev: str
    rdma_device: str
    mapped_netdev: str | None
    link_state: str | None
    speed_mbps: int | None
    pcie_width: int | None
    pcie_speed: str | None
    firmware: str | None


def _int_or_none(value: object) -> int | None:
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number >= 0 else None


def rail_facts(
    netdev: str, rdma_device: str, rdma_links: str, sysfs: Mapping[str, str]
) -> RailFacts:
    """Combine ``rdma link show`` and the sysfs reads (keys ``speed``, ``current_link_width``,
    ``current_link_speed``, ``fw_ver``; a missing or unreadable file is None)."""
    link = parse_rdma_links(rdma_links).get(rdma_device)
    width = sysfs.get("current_link_width")
    speed = sysfs.get("current_link_speed")
    firmware = sysfs.get("fw_ver")
    return RailFacts(
        netdev=netdev,
        rdma_device=rdma_device,
        mapped_netdev=link.netdev if link else None,
        link_state=link.state if link else None,
        speed_mbps=_int_or_none(sysfs.get("speed", "")),
        pcie_width=_int_or_none(width) if width is not None else None,
        pcie_speed=speed.strip() if speed else None,
        firmware=firmware.strip() if firmware else None,
    )


def describe(facts: RailFacts, result: WriteBw) -> str:
    """One report line per rail: mapping, speed, PCIe, firmware and bandwidth."""
    speed = f"{facts.speed_mbps // 1000} Gb/s" if facts.speed_mbps else "speed ?"
    width = f"x{facts.pcie_width}" if facts.pcie_width is not None else "x?"
    bw = f"{result.average_gbps:.2f} Gb/s" if result.average_gbps is not None else "no result"
    return (
        f"{facts.rdma_device} <-> {facts.mapped_netdev or '?'} ({facts.link_state or '?'}), "
        f"{speed}, PCIe {facts.pcie_speed or '?'} {width}, fw {facts.firmware or '?'}: "
        f"ib_write_bw {bw}"
    )


def judge_rail(
    facts: RailFacts,
    result: WriteBw,
    floor_gbps: float = DEFAULT_FLOOR_GBPS,
    source: str = "rdma preflight",
) -> list[Problem]:
    """Problems of one rail (empty = the rail carries at least ``floor_gbps`` of raw RDMA)."""
    key = f"{facts.netdev} ({facts.rdma_device})"
    problems: list[Problem] = []
    if facts.mapped_netdev is not None and facts.mapped_netdev != facts.netdev:
        problems.append(
            Problem(
                source,
                key,
                f"RDMA device {facts.rdma_device} belongs to {facts.mapped_netdev}, not "
                f"{facts.netdev}",
                "check fabric.rails / fabric.ports against `rdma link show` on the node",
                "rdma-mapping",
            )
        )
    if result.average_gbps is None:
        why = result.error or "ib_write_bw printed no result row"
        problems.append(
            Problem(
                source,
                key,
                f"no RDMA bandwidth result: {why}",
                "check the rail's PF address answers ping at MTU 9000 from the peer, "
                "`rdma link show` says ACTIVE/LINK_UP, and perftest is installed on both Sparks",
                "rdma-no-result",
            )
        )
        return problems
    bw = result.average_gbps
    if bw >= floor_gbps:
        return problems
    link_ok = facts.speed_mbps is not None and facts.speed_mbps >= EXPECTED_LINK_MBPS
    pcie_ok = facts.pcie_width is not None and facts.pcie_width >= EXPECTED_PCIE_WIDTH
    low, high = DEGRADED_BAND_GBPS
    link_gbps = (facts.speed_mbps or 0) // 1000
    if facts.pcie_width is not None and not pcie_ok:
        message = (
            f"{bw:.2f} Gb/s is below the floor of {floor_gbps:g} Gb/s and the PCIe link runs "
            f"at x{facts.pcie_width} instead of x{EXPECTED_PCIE_WIDTH}"
        )
        fix = (
            "update the system firmware/BIOS (fwupdmgr) so the ConnectX-7 function trains at "
            "Gen5 x4, then power-cycle and rerun the check"
        )
        rule = "rdma-pcie-width"
    elif facts.speed_mbps is not None and not link_ok:
        message = (
            f"{bw:.2f} Gb/s is below the floor of {floor_gbps:g} Gb/s and the Ethernet link "
            f"negotiated {link_gbps} Gb/s instead of {EXPECTED_LINK_MBPS // 1000}"
        )
        fix = "reseat or replace the QSFP cable (a 200G QSFP56/QSFP112 DAC) and check the peer port"
        rule = "rdma-link-speed"
    elif link_ok and pcie_ok and low <= bw <= high:
        message = (
            f"{bw:.2f} Gb/s with a healthy-looking link ({link_gbps} Gb/s, "
            f"PCIe x{facts.pcie_width}): the degraded ConnectX-7 case (~13 Gb/s)"
        )
        fix = DEGRADED_CX7_FIX
        rule = "rdma-degraded-cx7"
    else:
        message = f"{bw:.2f} Gb/s is below the floor of {floor_gbps:g} Gb/s"
        fix = (
            "check MTU 9000 on both ends, PFC/ECN on a switch, and rerun; compare with the other "
            "rail of the same Spark"
        )
        rule = "rdma-below-floor"
    problems.append(Problem(source, key, message, fix, rule))
    return problems


def pair_rounds(order: list[str]) -> list[dict[str, dict[str, str]]]:
    """Spark pairs for ``ib_write_bw``, as rounds whose pairs share no Spark.

    Ranks 0-1, 2-3, ... run together (even rank = server, odd = client); with an odd count the
    last Spark measures against rank 0 in a second round, so every Spark is tested once.
    Each round maps host -> ``{"role": "server" | "client", "peer": host}``.
    """
    first: dict[str, dict[str, str]] = {}
    for i in range(0, len(order) - 1, 2):
        server, client = order[i], order[i + 1]
        first[server] = {"role": "server", "peer": client}
        first[client] = {"role": "client", "peer": server}
    rounds = [first] if first else []
    if len(order) % 2 and len(order) > 1:
        last, head = order[-1], order[0]
        rounds.append(
            {head: {"role": "server", "peer": last}, last: {"role": "client", "peer": head}}
        )
    return rounds


def rail_verdict(
    output: str,
    netdev: str,
    rdma_device: str,
    rdma_links: str,
    sysfs: Mapping[str, str],
    floor_gbps: float = DEFAULT_FLOOR_GBPS,
    source: str = "rdma preflight",
) -> dict[str, object]:
    """Everything the play reports about one rail of one client: plain data for Ansible."""
    facts = rail_facts(netdev, rdma_device, rdma_links, sysfs)
    result = parse_write_bw(output)
    problems = judge_rail(facts, result, floor_gbps, source)
    return {
        "passed": not problems,
        "line": describe(facts, result),
        "average_gbps": result.average_gbps,
        "problems": [str(p) for p in problems],
        "rules": [p.rule for p in problems],
    }
