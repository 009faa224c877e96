"""The lab driver (lab/lab.py) without Docker: image cache key and topology from the plan."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from sparkrack.inputs.inventory import load_inventory

ROOT = Path(__file__).resolve().parent.parent


def _module(lab: ModuleType, name: str) -> ModuleType:
    """A module beside lab/lab.py that the driver imported (lab/labhost.py, lab/labnodes.py): the
    one whose globals its own functions read, so the one a test patches."""
    module = sys.modules[name]
    assert Path(str(module.__file__)) == Path(str(lab.__file__)).with_name(f"{name}.py")
    return module


def test_image_tag_follows_the_recipe(
    lab: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = tmp_path / "image"
    image.mkdir()
    (image / "packages.txt").write_text("# comment\nsystemd\npython3  # inline\n\n")
    (image / "customize.sh").write_text("#!/bin/sh\n")
    host = _module(lab, "labhost")
    monkeypatch.setattr(host, "IMAGE_DIR", image)
    monkeypatch.setattr(host, "apt_sources", lambda: [])
    assert host.packages() == ["systemd", "python3"]
    first = host.recipe_hash()
    assert first == host.recipe_hash() and len(first) == 12
    assert host.image_tag() == f"sparkrack-node:{first}"
    (image / "packages.txt").write_text("systemd\npython3\nrdma-core\n")
    assert host.recipe_hash() != first
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://deb.debian.org/debian\n")
    before = host.recipe_hash()
    monkeypatch.setattr(host, "apt_sources", lambda: [sources])
    assert host.recipe_hash() != before, "a different mirror must give a different image"


def test_shipped_recipe_has_what_the_roles_need(lab: ModuleType) -> None:
    wanted = {"systemd", "systemd-sysv", "dbus", "udev", "python3", "iproute2", "netplan.io"}
    wanted |= {"iputils-ping", "procps", "sudo", "rdma-core", "ibverbs-utils"}
    assert wanted <= set(_module(lab, "labhost").packages())


def test_topology_reads_the_plan(lab: ModuleType) -> None:
    topo = _module(lab, "labnodes").load_topology()
    plan = load_inventory(ROOT / "inventories" / "lab").plan()
    assert len(plan.rails) == 2, "the lab runs both halves of the QSFP cage as rails"
    assert [n.host for n in topo.nodes] == ["cp1", *(n.name for n in plan.nodes)]
    for node in topo.nodes:
        assert node.container == f"sparkrack-{node.host}"
        assert ipaddress.IPv4Address(node.mgmt_ip) in _module(lab, "labhost").MGMT_SUBNET
        if node.spark:
            ports = {p.name: p.address for p in plan.node(node.host).ports}
            assert [(f.name, f.address, f.network) for f in node.fabric] == [
                (rail, ports[rail], "sparkrack-fabric" if r == 0 else f"sparkrack-fabric{r}")
                for r, rail in enumerate(plan.rails)
            ]
        else:
            assert node.fabric == ()
    assert [str(r.subnet) for r in topo.rails] == list(plan.rail_subnets)
    assert topo.fabric_mtu == plan.mtu == 9000
    used = {p.address for n in plan.nodes for p in n.ports} | {
        v.address for n in plan.nodes for v in n.vfs
    }
    for rail in topo.rails:
        assert rail.gateway not in used
        assert ipaddress.IPv4Address(rail.gateway) in rail.subnet
    for node in topo.nodes:
        for port in node.fabric:
            rail = next(r for r in topo.rails if r.name == port.network)
            assert ipaddress.IPv4Address(port.address) in rail.subnet


def test_recap_parser(lab: ModuleType) -> None:
    line = (
        "spark1                     : ok=14   changed=3    unreachable=0    failed=1    skipped=0"
    )
    match = lab._RECAP.match(line)
    assert match is not None and match.groups() == ("spark1", "14", "3", "0", "1")


def test_timings_print_both_runs_and_the_control_plane(
    lab: ModuleType,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lab, "STATE_DIR", tmp_path)
    monkeypatch.setattr(lab, "CONTROL_PLANE_STATE", tmp_path / "controlplane")
    (tmp_path / "controlplane-build.json").write_text('{"controlplane": 291.0, "kwok": null}')
    (tmp_path / "controlplane-start.json").write_text('{"readyz_seconds": 2.8, "rss_mib": {}}')
    lab.print_timings(
        {"image_seconds": 7.3, "converge_seconds": 180.0, "rerun_seconds": 45.0}, None
    )
    out = capsys.readouterr().out
    assert "sparkrack image  7.3 s (build + archive; cached by input hash)" in out
    assert "converge         180.0 s" in out
    assert "idempotent rerun 45.0 s  (25 % of converge; changed=0" in out
    assert "controlplane built in 291 s, kwok cached" in out
    assert "/readyz 2.8 s after start (goal <= 20 s)" in out


def _result(code: int, stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["docker"], code, "", stderr)


def test_network_removal_waits_for_released_endpoints(
    lab: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = "Error response from daemon: error while removing network: x has active endpoints"
    answers = [_result(1, busy), _result(1, busy), _result(0)]
    calls: list[tuple[str, ...]] = []

    def fake_docker(*args: str, check: bool = True) -> object:
        calls.append(args)
        return answers.pop(0)

    monkeypatch.setattr(_module(lab, "labnodes"), "docker", fake_docker)
    monkeypatch.setattr(lab.time, "sleep", lambda _s: None)
    _module(lab, "labnodes")._remove_network("sparkrack-mgmt")
    assert calls == [("network", "rm", "sparkrack-mgmt")] * 3


def test_network_removal_fails_at_once_on_other_errors(
    lab: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        _module(lab, "labnodes"), "docker", lambda *a, check=True: _result(1, "permission denied")
    )
    with pytest.raises(lab.LabError, match="permission denied"):
        _module(lab, "labnodes")._remove_network("sparkrack-mgmt")


def test_leaked_endpoint_on_an_empty_network_is_left_with_a_warning(
    lab: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = "network x has active endpoints"

    def fake_docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if args[:2] == ("network", "inspect"):
            return subprocess.CompletedProcess(["docker"], 0, "{}", "")
        return _result(1, busy)

    monkeypatch.setattr(_module(lab, "labnodes"), "docker", fake_docker)
    monkeypatch.setattr(lab.time, "sleep", lambda _s: None)
    _module(lab, "labnodes")._remove_network("sparkrack-mgmt", timeout=0.0)
    assert "stale endpoint on the empty network sparkrack-mgmt" in capsys.readouterr().out


def test_network_with_containers_attached_is_an_error(
    lab: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = "network x has active endpoints"
    attached = '{"abc": {"Name": "sparkrack-spark1"}}'

    def fake_docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if args[:2] == ("network", "inspect"):
            return subprocess.CompletedProcess(["docker"], 0, attached, "")
        return _result(1, busy)

    monkeypatch.setattr(_module(lab, "labnodes"), "docker", fake_docker)
    monkeypatch.setattr(lab.time, "sleep", lambda _s: None)
    with pytest.raises(lab.LabError, match="still has containers attached \\(sparkrack-spark1\\)"):
        _module(lab, "labnodes")._remove_network("sparkrack-mgmt", timeout=0.0)


def _make_recipe(target: str) -> tuple[list[str], list[str]]:
    """(prerequisites, recipe lines) of one Makefile target."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"{target}:"):
            recipe = []
            for body in lines[i + 1 :]:
                if not body.startswith("\t"):
                    break
                recipe.append(body.strip())
            return line.split(":", 1)[1].split(), recipe
    raise AssertionError(f"no target {target} in the Makefile")


def test_the_gate_runs_make_lab_as_the_readme_types_it(lab: ModuleType) -> None:
    """`make test` -> `make molecule` -> `make lab`: CI runs the README's first command."""
    test_needs, _ = _make_recipe("test")
    assert "molecule" in test_needs
    _, recipe = _make_recipe("molecule")
    assert recipe.index("$(MAKE) lab") > 0, recipe
    assert "lab/lab.py molecule before" in recipe[0]
    assert "lab/lab.py molecule after" in recipe[-1]
    _, lab_recipe = _make_recipe("lab")
    assert any("lab/lab.py lab" in line for line in lab_recipe)
    # molecule's own sequence holds no converge of its own: the converge is `make lab`'s.
    scenario = yaml.safe_load((ROOT / "molecule" / "default" / "molecule.yml").read_text())
    sequence = scenario["scenario"]["test_sequence"]
    assert "converge" not in sequence and "idempotence" not in sequence
    # `molecule check` runs its own sequence, whose default converges a second lab.
    check = scenario["scenario"].get("check_sequence", ["converge (molecule's default)"])
    assert check == ["check"], check
    assert tuple(sequence[: len(lab.MOLECULE_BEFORE)]) == lab.MOLECULE_BEFORE
    assert tuple(sequence[len(lab.MOLECULE_BEFORE) :]) == lab.MOLECULE_AFTER


def test_make_lab_and_molecule_write_their_records(
    lab: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timings ``make lab`` prints, the rank rehearsal's and molecule's step times become
    records that name lab/lab.py and carry the load, and the page is written from them."""
    from sparkrack.bench import measurements

    state, root = tmp_path / "state", tmp_path / "repo"
    state.mkdir()
    monkeypatch.setattr(lab, "STATE_DIR", state)
    monkeypatch.setattr(lab, "CONTROL_PLANE_STATE", state / "controlplane")
    monkeypatch.setattr(lab, "MOLECULE_LOAD", state / "molecule-load.json")
    (state / "controlplane-start.json").write_text('{"readyz_seconds": 2.8, "rss_mib": {}}')
    (state / "rehearsal.json").write_text('{"ok": true, "seconds": 9.5, "step_seconds": 12.0}')
    (state / "molecule-load.json").write_text("[3.5, 2.0, 1.0]\n")
    before = measurements.Load((1.5, 1.0, 0.5), 2)
    lab.record_lab(before, {"converge_seconds": 180.0, "rerun_seconds": 45.0}, 300.0, root)
    lab.record_molecule({"destroy": 8.0, "verify": 789.0}, root)
    records = measurements.load_records(root)
    assert sorted(records) == ["lab.json", "molecule.json"]
    made, molecule = records["lab.json"], records["molecule.json"]
    assert (made.benchmark, made.command) == ("lab/lab.py", "SPARKRACK_RECORD=1 make lab")
    assert made.load["before"] == [1.5, 1.0, 0.5] and len(made.load["after"]) == 3
    assert made.table["rows"][0] == ["image build", "300 s"]
    assert ["rank rehearsal", "9.5 s, 12.0 s with the render (passed)"] in made.table["rows"]
    assert ["converge", "180.0 s  (goal <= 240 s)"] in made.table["rows"]
    assert molecule.command == "SPARKRACK_RECORD=1 make molecule" and molecule.load["before"] == [
        3.5,
        2.0,
        1.0,
    ]
    assert molecule.table["rows"][-1] == ["total", "797.0 s"]
    assert (root / measurements.PAGE).read_text() == measurements.render(records)


def _dry_run(target: str) -> list[str]:
    """The commands ``make -n TARGET`` prints (sub-makes run, dry, too), make's own lines dropped."""
    proc = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, check=True
    )
    return [line for line in proc.stdout.splitlines() if not line.startswith(("make[", "make:"))]


@pytest.mark.tools
def test_make_unit_builds_the_control_plane_beside_tools_and_runs_api_beside_docker() -> None:
    """``make unit``: the fast tier, then one parallel make in which the control plane builds at
    nice 19 beside the tools tier, and the api and docker tiers each start after the tools tier
    (the api tier after the build as well), never beside it; then the docker tier's serial
    tests, alone."""
    lines = _dry_run("unit")
    fast = [i for i, line in enumerate(lines) if '-m "fast and not serial"' in line]
    parallel = [i for i, line in enumerate(lines) if line.split()[:2] == ["make", "-j2"]]
    assert fast and len(parallel) == 1 and fast[0] < parallel[0], lines
    targets = [t for t in lines[parallel[0]].split()[2:] if not t.startswith("-")]

    def order(commands: list[str], needle: str) -> int:
        found = [i for i, line in enumerate(commands) if needle in line]
        assert len(found) <= 1, commands
        return found[0] if found else -1

    runs = {target: _dry_run(target) for target in targets}
    api = [c for c in runs.values() if order(c, "-m api tests") >= 0]
    docker = [c for c in runs.values() if order(c, '-m "docker and not serial" tests') >= 0]
    assert len(api) == 1 and len(docker) == 1 and api != docker, runs
    for tier, commands in (("api", api[0]), ("docker", docker[0])):
        tools_done = order(commands, '-m "tools and serial"')
        tier_runs = order(commands, f"-m {tier} tests" if tier == "api" else f'-m "{tier} and not')
        assert 0 <= tools_done < tier_runs, (tier, commands)
    build = order(api[0], "controlplane.py build > ")
    assert 0 <= build < order(api[0], "-m api tests"), api[0]
    assert api[0][build].startswith("nice -n 19 "), api[0][build]
    assert order(docker[0], "controlplane.py build") == -1, "the docker tier waits for no build"
    assert order(api[0] + docker[0], '-m "docker and serial"') == -1, "serial tests run beside"
    alone = [i for i, line in enumerate(lines) if '-m "docker and serial" tests' in line]
    assert len(alone) == 1 and alone[0] > parallel[0], lines


@pytest.mark.tools
def test_make_docker_runs_its_serial_tests_after_the_rest() -> None:
    """``make docker`` alone runs the whole tier: its serial tests once, after the others."""
    lines = _dry_run("docker")
    beside = [i for i, line in enumerate(lines) if '-m "docker and not serial" tests' in line]
    alone = [i for i, line in enumerate(lines) if '-m "docker and serial" tests' in line]
    assert len(beside) == len(alone) == 1 and beside[0] < alone[0], lines
