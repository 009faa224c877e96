"""Phase 1 state of the lab after site.yml: systemd nodes, spark_base, the fabric port."""

from __future__ import annotations

import json
import re

from conftest import host_of, plan, role_defaults, topology

from sparkrack.contract import KUBELET_SYSCTLS


def test_systemd_is_pid1_and_running(node: str) -> None:
    host = host_of(node)
    assert host.check_output("readlink -f /proc/1/exe").endswith("/systemd")
    state = host.run("systemctl is-system-running").stdout.strip()
    failed = host.run("systemctl --failed --no-legend --plain").stdout
    assert state == "running", f"{node}: systemd {state}; failed units: {failed}"


def test_base_packages_installed(spark: str) -> None:
    host = host_of(spark)
    for name in role_defaults("spark_base")["spark_base_packages"]:
        assert host.package(name).is_installed, f"{spark}: {name} not installed"


def test_sysctl_file_holds_every_setting(spark: str) -> None:
    defaults = role_defaults("spark_base")
    conf = host_of(spark).file(defaults["spark_base_sysctl_file"])
    assert conf.is_file and conf.user == "root" and conf.mode == 0o644
    found = dict(
        (k.strip(), v.strip())
        for k, v in (
            ln.split("=", 1)
            for ln in conf.content_string.splitlines()
            if "=" in ln and not ln.startswith("#")
        )
    )
    # The Spark's own settings and those the kubelet's protect-kernel-defaults checks.
    wanted = {**defaults["spark_base_sysctl"], **KUBELET_SYSCTLS}
    assert found == {k: str(v) for k, v in wanted.items()}


def test_proc_sys_stays_read_only(spark: str) -> None:
    # The lab must never change the kernel of the machine it runs on: /proc/sys is read-only.
    result = host_of(spark).run("echo 1 > /proc/sys/net/ipv4/conf/all/arp_ignore")
    assert result.rc != 0 and "Read-only file system" in result.stderr


def test_pam_memlock_unlimited(spark: str) -> None:
    limits = host_of(spark).file(role_defaults("spark_base")["spark_base_limits_file"])
    entries = {
        tuple(ln.split())
        for ln in limits.content_string.splitlines()
        if ln and not ln.startswith("#")
    }
    assert {("*", "soft", "memlock", "unlimited"), ("*", "hard", "memlock", "unlimited")} <= entries


def test_memlock_dropin_applies_to_units(spark: str) -> None:
    """systemd loads the drop-in for each unit; a unit not installed yet gets a runtime stand-in
    that must start with LimitMEMLOCK=infinity (clamped by the container's hard limit)."""
    host = host_of(spark)
    defaults = role_defaults("spark_base")
    for unit in defaults["spark_base_memlock_units"]:
        dropin = f"/etc/systemd/system/{unit}.d/{defaults['spark_base_memlock_dropin_name']}"
        assert host.file(dropin).contains("^LimitMEMLOCK=infinity$")
        if host.check_output(f"systemctl show {unit} -p LoadState --value") != "not-found":
            # Installed by a later role (k3s_agent): the drop-in must be part of its definition.
            assert (
                dropin in host.check_output(f"systemctl show {unit} -p DropInPaths --value").split()
            )
            assert host.check_output(f"systemctl show {unit} -p LimitMEMLOCK --value") == "infinity"
            continue
        path = f"/run/systemd/system/{unit}"
        host.check_output(
            f"printf '[Service]\\nType=oneshot\\nExecStart=/bin/sh -c \"ulimit -l\"\\n' > {path}"
            " && systemctl daemon-reload"
        )
        try:
            assert host.check_output(f"systemctl show {unit} -p LimitMEMLOCK --value") == "infinity"
            start = host.run(f"systemctl start {unit}")
            assert start.rc == 0, (
                f"{unit} does not start with LimitMEMLOCK=infinity: {start.stderr}"
            )
        finally:
            host.run(f"rm -f {path} && systemctl daemon-reload && systemctl reset-failed {unit}")


def test_fabric_port_named_like_connectx7(spark: str) -> None:
    host = host_of(spark)
    node = plan()["nodes"][spark]
    rails = [p for p in node["ports"] if p["name"] in plan()["rails"]]
    assert [p["name"] for p in rails] == plan()["rails"]
    for port in rails:
        link = json.loads(host.check_output(f"ip -j addr show dev {port['name']}"))[0]
        assert link["mtu"] == plan()["mtu"] == 9000
        assert link["operstate"] == "UP"
        assert port["address"] in [a["local"] for a in link["addr_info"] if a["family"] == "inet"]


def test_control_plane_has_no_fabric_port(control_plane: str) -> None:
    host = host_of(control_plane)
    links = host.check_output("ip -o link show")
    for port in plan()["rails"]:
        assert not re.search(rf"\b{port}\b", links)
    mgmt = next(n.mgmt_ip for n in topology().nodes if n.host == control_plane)
    assert mgmt in host.interface("eth0").addresses
