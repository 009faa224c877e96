"""Fabric state of the lab Sparks after site.yml: SR-IOV stand-ins, netplan, RoCE/driver configs.

Every expected address, MAC, MTU and name comes from the address plan (conftest.plan()).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import host_of, plan, role_defaults


def _node(spark: str) -> dict[str, Any]:
    node: dict[str, Any] = plan()["nodes"][spark]
    return node


def _links(spark: str) -> dict[str, dict[str, Any]]:
    data = json.loads(host_of(spark).check_output("ip -j addr show"))
    return {link["ifname"]: link for link in data}


def _ipv4(link: dict[str, Any]) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"]


def _networkd_file(spark: str, iface: str) -> dict[str, str]:
    text = host_of(spark).file(f"/run/systemd/network/10-netplan-{iface}.network").content_string
    pairs = (ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
    result: dict[str, str] = {}
    for key, value in pairs:
        result.setdefault(key.strip(), value.strip())
    return result


def test_netplan_file_is_private_and_skips_management(spark: str) -> None:
    host = host_of(spark)
    conf = host.file(role_defaults("qsfp_network")["qsfp_network_file"])
    assert conf.is_file and conf.mode == 0o600
    assert "eth0" not in conf.content_string
    # The management link keeps Docker's address and stays out of networkd's hands.
    assert _ipv4(_links(spark)["eth0"]) == [f"{_node(spark)['node_ip']}/24"]
    assert "unmanaged" in host.check_output("networkctl status eth0 --no-pager | grep -i state")


def test_networkd_files_hold_planned_pf_address_and_mtu(spark: str) -> None:
    for port in _node(spark)["ports"]:
        network = _networkd_file(spark, port["name"])
        assert network["Address"] == port["cidr"]
        assert network["MTUBytes"] == str(plan()["mtu"]) == "9000"


def test_networkd_files_hold_planned_vf_address_mac_and_mtu(spark: str) -> None:
    vfs_in_use = [vf for vf in _node(spark)["vfs"] if vf["in_use"]]
    assert vfs_in_use
    for vf in vfs_in_use:
        network = _networkd_file(spark, vf["netdev"])
        assert network["Address"] == vf["cidr"]
        assert network["MACAddress"] == vf["mac"]
        assert network["MTUBytes"] == "9000"
    for vf in _node(spark)["vfs"]:
        if not vf["in_use"]:
            assert (
                not host_of(spark)
                .file(f"/run/systemd/network/10-netplan-{vf['netdev']}.network")
                .exists
            )


def test_fabric_links_up_with_planned_addresses(spark: str) -> None:
    links = _links(spark)
    for port in _node(spark)["ports"]:
        link = links[port["name"]]
        assert link["operstate"] == "UP" and link["mtu"] == 9000
        assert _ipv4(link) == [port["cidr"]]
    for vf in _node(spark)["vfs"]:
        link = links[vf["netdev"]]
        assert link["address"] == vf["mac"], f"{vf['netdev']}: MAC {link['address']}"
        assert "UP" in link["flags"]
        assert _ipv4(link) == ([vf["cidr"]] if vf["in_use"] else [])


def test_sriov_unit_enabled_active_and_ordered_before_networking(spark: str) -> None:
    unit = host_of(spark).service(role_defaults("sriov")["sriov_unit"])
    assert unit.is_enabled and unit.is_running
    before = host_of(spark).check_output(
        f"systemctl show {role_defaults('sriov')['sriov_unit']} -p Before"
    )
    assert "network-pre.target" in before and "systemd-networkd.service" in before
    assert "k3s-agent.service" in before


def test_sriov_unit_recreates_a_missing_vf(spark: str) -> None:
    host = host_of(spark)
    vf = _node(spark)["vfs"][-1]
    host.check_output(f"ip link del {vf['netdev']}")
    host.check_output(f"systemctl restart {role_defaults('sriov')['sriov_unit']}")
    link = _links(spark)[vf["netdev"]]
    assert link["address"] == vf["mac"] and "UP" in link["flags"]


def _ping(spark: str, address: str, size: int) -> Any:
    return host_of(spark).run(f"ping -M do -s {size} -c 2 -i 0.2 -W 2 {address}")


def _rail_targets(node: dict[str, Any], kind: str) -> list[tuple[str, str]]:
    """(interface, address) of every rail of a peer: its PF, or its serving VF."""
    if kind == "pf":
        return [(p["name"], p["address"]) for p in node["ports"] if p["name"] in plan()["rails"]]
    return [
        (vf["netdev"], vf["address"]) for vf in node["vfs"] if vf["index"] == node["serving_vf"]
    ]


@pytest.mark.parametrize("kind", ["pf", "vf"])
def test_jumbo_ping_without_fragmentation_to_every_peer_on_every_rail(
    spark: str, kind: str
) -> None:
    for peer, node in plan()["nodes"].items():
        if peer == spark:
            continue
        targets = _rail_targets(node, kind)
        assert len(targets) == len(plan()["rails"]) == 2
        for iface, target in targets:
            result = _ping(spark, target, 8972)
            assert result.rc == 0, (
                f"{spark} -> {peer} {kind} {iface} {target}: {result.stdout}{result.stderr}"
            )
            assert "0% packet loss" in result.stdout


def test_each_rail_is_routed_over_its_own_pf(spark: str) -> None:
    """Rails live in their own networks: the kernel sends a rail's traffic out of that rail."""
    peer = next(n for name, n in plan()["nodes"].items() if name != spark)
    for iface, target in _rail_targets(peer, "pf"):
        route = json.loads(host_of(spark).check_output(f"ip -j route get {target}"))[0]
        assert route["dev"] in {iface} | {
            vf["netdev"] for vf in _node(spark)["vfs"] if vf["pf"] == iface and vf["in_use"]
        }, route


def test_frame_above_mtu_is_refused(spark: str) -> None:
    peer = next(n for name, n in plan()["nodes"].items() if name != spark)
    result = _ping(spark, peer["ports"][0]["address"], 8973)
    assert result.rc != 0
    assert "message too long" in (result.stdout + result.stderr).lower()


def test_nvidia_k3s_runtime_config_rendered_inactive(spark: str) -> None:
    defaults = role_defaults("nvidia_driver")
    host = host_of(spark)
    lab_copy = host.file(defaults["nvidia_driver_k3s_config_lab"])
    assert lab_copy.is_file
    assert (
        f"default-runtime: {defaults['nvidia_driver_k3s_default_runtime']}"
        in lab_copy.content_string
    )
    assert not host.file(defaults["nvidia_driver_k3s_config"]).exists


def test_rdma_userspace_installed_and_no_qos_unit_in_the_lab(spark: str) -> None:
    host = host_of(spark)
    for name in role_defaults("roce")["roce_packages"]:
        assert host.package(name).is_installed, name
    assert not host.file("/etc/systemd/system/sparkrack-roce-qos.service").exists
