"""The SR-IOV boot script's real-hardware branch, run against a fake sysfs and a recording `ip`.

The lab exercises the simulated branch on real containers; this pins what the script does on a
Spark: firmware refusals, the sriov_numvfs write, the VF MACs from the plan and the count check.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sparkrack.fabric.addressplan import NodeInput
from sparkrack.fabric.layout import compute_plan

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles" / "sriov" / "files" / "sparkrack-sriov"
PCI = "0000:01:00.0"


def planned_vfs(rails: tuple[str, ...] = ("enp1s0f0np0",)) -> str:
    plan = compute_plan(
        {
            "subnet": "10.77.0.0/24",
            "ports": ["enp1s0f0np0", "enP2p1s0f0np0"],
            "rails": list(rails),
            "vf_count": 4,
            "vfs_in_use": [0],
        },
        [NodeInput("spark1", "192.168.1.11"), NodeInput("spark2", "192.168.1.12")],
    )
    # Same format as roles/sriov/templates/sriov.env.j2: pf:index:netdev:mac
    return " ".join(f"{v.pf}:{v.index}:{v.netdev}:{v.mac}" for v in plan.node("spark2").vfs)


def fake_host(tmp_path: Path, total: int, vf_names: list[str] | None = None) -> dict[str, str]:
    sysfs = tmp_path / "sys"
    device = sysfs / "devices" / "pci0000:00" / PCI
    device.mkdir(parents=True)
    (device / "sriov_totalvfs").write_text(f"{total}\n")
    (device / "sriov_numvfs").write_text("0\n")
    for index, name in enumerate(vf_names or []):
        (device / f"virtfn{index}" / "net" / name).mkdir(parents=True)
    net = sysfs / "class" / "net" / "enp1s0f0np0"
    net.mkdir(parents=True)
    (net / "device").symlink_to(device)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ip = bin_dir / "ip"
    ip.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "ip.log"}\n')
    ip.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SRIOV_SYSFS": str(sysfs),
        "SPARKRACK_HARDWARE": "real",
        "SRIOV_PFS": "enp1s0f0np0",
        "SRIOV_VF_COUNT": "4",
        "SRIOV_TIMEOUT": "1",
        "SRIOV_TRUST": "on",
        "SRIOV_VFS": planned_vfs(),
    }


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False
    )


def test_firmware_with_sriov_off_is_a_clear_failure(tmp_path: Path) -> None:
    result = run(fake_host(tmp_path, total=0))
    assert result.returncode == 1
    assert f"SR-IOV is disabled in the firmware of enp1s0f0np0 ({PCI})" in result.stderr
    assert f"mlxconfig -d {PCI} set SRIOV_EN=1 NUM_OF_VFS=4" in result.stderr
    assert not (tmp_path / "ip.log").exists(), "nothing may change before the firmware check"


def test_too_few_vfs_in_firmware_is_refused(tmp_path: Path) -> None:
    result = run(fake_host(tmp_path, total=2))
    assert result.returncode == 1
    assert "supports 2 VFs, the plan needs 4 (fabric.vf_count)" in result.stderr


def test_missing_pf_is_named(tmp_path: Path) -> None:
    env = fake_host(tmp_path, total=8)
    env["SRIOV_PFS"] = "enp9s0f0np0"
    result = run(env)
    assert result.returncode == 1 and "PF enp9s0f0np0 did not appear" in result.stderr


def test_creates_vfs_sets_planned_macs_and_checks_count(tmp_path: Path) -> None:
    names = [f"enp1s0f0v{i}" for i in range(4)]
    env = fake_host(tmp_path, total=8, vf_names=names)
    result = run(env)
    assert result.returncode == 0, result.stderr
    device = Path(env["SRIOV_SYSFS"]) / "devices" / "pci0000:00" / PCI
    assert (device / "sriov_numvfs").read_text().strip() == "4"
    calls = (tmp_path / "ip.log").read_text().splitlines()
    for index, name in enumerate(names):
        mac = f"02:53:50:02:00:{index:02x}"
        assert f"link set dev enp1s0f0np0 vf {index} mac {mac} trust on" in calls
        assert f"link set dev {name} address {mac}" in calls
        assert f"link set dev {name} up" in calls
    assert not any(" name " in call for call in calls), "VFs already carry the planned names"


def test_vf_netdev_with_another_name_is_renamed_to_the_plan(tmp_path: Path) -> None:
    names = ["enp1s0f0v0", "eth7", "enp1s0f0v2", "enp1s0f0v3"]
    result = run(fake_host(tmp_path, total=4, vf_names=names))
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "ip.log").read_text().splitlines()
    assert "link set dev eth7 name enp1s0f0v1" in calls


@pytest.mark.parametrize("created", [2, 3])
def test_vf_that_never_appears_fails(tmp_path: Path, created: int) -> None:
    names = [f"enp1s0f0v{i}" for i in range(created)]
    result = run(fake_host(tmp_path, total=8, vf_names=names))
    assert result.returncode == 1
    assert f"VF {created} of enp1s0f0np0 has no netdev after 1s" in result.stderr


def test_every_rail_gets_its_vfs(tmp_path: Path) -> None:
    rails = ("enp1s0f0np0", "enP2p1s0f0np0")
    env = fake_host(tmp_path, total=8, vf_names=[f"enp1s0f0v{i}" for i in range(4)])
    sysfs = Path(env["SRIOV_SYSFS"])
    second = sysfs / "devices" / "pci0002:00" / "0002:01:00.0"
    second.mkdir(parents=True)
    (second / "sriov_totalvfs").write_text("8\n")
    (second / "sriov_numvfs").write_text("0\n")
    for index in range(4):
        (second / f"virtfn{index}" / "net" / f"enP2p1s0f0v{index}").mkdir(parents=True)
    (sysfs / "class" / "net" / rails[1]).mkdir(parents=True)
    (sysfs / "class" / "net" / rails[1] / "device").symlink_to(second)
    env.update({"SRIOV_PFS": " ".join(rails), "SRIOV_VFS": planned_vfs(rails)})
    result = run(env)
    assert result.returncode == 0, result.stderr
    assert (second / "sriov_numvfs").read_text().strip() == "4"
    calls = (tmp_path / "ip.log").read_text().splitlines()
    assert "link set dev enP2p1s0f0np0 vf 1 mac 02:53:50:02:01:01 trust on" in calls
    assert "link set dev enp1s0f0np0 vf 1 mac 02:53:50:02:00:01 trust on" in calls
    assert "link set dev enP2p1s0f0v3 up" in calls
    # negative control: a rail whose PF is missing stops the unit before anything changes
    (tmp_path / "ip.log").unlink()
    env["SRIOV_PFS"] = "enp1s0f0np0 enP9p1s0f0np0"
    result = run(env)
    assert result.returncode == 1 and "PF enP9p1s0f0np0 did not appear" in result.stderr
    assert not (tmp_path / "ip.log").exists()
