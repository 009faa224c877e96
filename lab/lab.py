#!/usr/bin/env python3
"""The sparkrack container lab: five systemd containers that stand in for a real cluster.

One driver for everything that touches Docker (``make lab``, ``make lab-down`` and molecule's
create/destroy all call this file; callers serialize on ``flock /tmp/sparkrack-lab.lock``):

* ``engine``   ensure a Docker engine (install Debian's docker.io if absent, start dockerd if it
               is not running; an engine that already runs is left alone);
* ``image``    build the node image from scratch (mmdebstrap -> docker import), tagged with the
               hash of its recipe (lab/image/*) so it is rebuilt only when the recipe changes;
* ``up``       networks + nodes: ``sparkrack-<host>`` for every host of inventories/lab on the
               management network, and on the Sparks one fabric network per rail
               (``fabric.rails``, each in its own planned network), its NIC renamed to the real
               ConnectX-7 port name and attached with the planned PF address; then the
               Kubernetes control plane (lab/controlplane.py) in the control-plane node's
               network namespace, with K3s' admin kubeconfig and certificates written into it;
* ``converge`` build the sparkrack image (lab/sparkimage.py, cached by the hash of its inputs)
               and write its archive, then run site.yml with ``serving_image_archive`` set to it,
               run it again and fail unless the rerun reports changed=0. The serve play's import
               play copies the archive onto every node; **the import into containerd is a
               stand-in** (no containerd in a lab node: the node's copy is checked by sha256);
* ``lab``      all of the above plus the rank rehearsal, a per-node summary and the converge/rerun
               wall times;
* ``rehearse`` the rank-connectivity rehearsal (sparkrack/serving/rehearsal) in the running lab:
               each multi-rank deployment's ranks run SGLang's own dist-init and broadcaster in
               their Sparks' network namespaces, behind the kube-router stand-in;
* ``molecule before|after`` molecule's steps around ``make lab`` (``make molecule``), each one's
               wall time printed;
* ``down``     stop the control plane, remove the containers and networks above, by name.

Addresses come from the address plan (``sparkrack addresses --json``); nothing here
computes a fabric address. The engine and the image live in lab/labhost.py, the topology,
networks, nodes and control plane in lab/labnodes.py; this file holds the converge, the
timings, the rehearsal, molecule's steps and the command line. Stdlib only (and
lab/controlplane.py; the rehearsal imports sparkrack), typed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# lab/ is a folder of scripts, not a package: its modules are imported from beside this one.
import controlplane  # noqa: E402
from labhost import (  # noqa: E402
    IMAGE_REPO,
    INVENTORY,
    PREFIX,
    ROOT,
    STATE_DIR,
    VENV_BIN,
    LabError,
    docker,
    engine_answers,
    ensure_engine,
    ensure_image,
    image_tag,
    log,
    venv_tool,
)
from labnodes import CONTROL_PLANE_STATE, down, up  # noqa: E402

from sparkrack.bench import measurements  # noqa: E402

# --- converge -----------------------------------------------------------------------------

FACT_CACHE = STATE_DIR / "facts"
"""Facts gathered by the converge, reused by its rerun (emptied at the start of each converge)."""
FACT_CACHE_ENV = {
    "ANSIBLE_GATHERING": "smart",
    "ANSIBLE_CACHE_PLUGIN": "jsonfile",
    "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(FACT_CACHE),
    "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "3600",
}

_RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")


def playbook(
    extra: Sequence[str], logfile: Path, playbooks: Sequence[str] = ("site.yml",)
) -> tuple[float, dict[str, dict[str, int]]]:
    """Run site.yml (or the given playbooks) against the lab; return wall seconds and the recap."""
    cmd = [venv_tool("ansible-playbook"), *playbooks, "-i", str(INVENTORY), *extra]
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0"}
    env.update(FACT_CACHE_ENV)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    start = time.monotonic()
    recap: dict[str, dict[str, int]] = {}
    with logfile.open("w") as out:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            out.write(line)
            match = _RECAP.match(line.strip())
            if match:
                host, ok, changed, unreachable, failed = match.groups()
                recap[host] = {
                    "ok": int(ok),
                    "changed": int(changed),
                    "unreachable": int(unreachable),
                    "failed": int(failed),
                }
        proc.wait()
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise LabError(f"ansible-playbook site.yml failed (exit {proc.returncode}); log: {logfile}")
    return seconds, recap


IMAGE_ARCHIVE_GLOB = "sparkrack-image-*.tar"


def image_archive() -> tuple[Path, float]:
    """The sparkrack image of this checkout as the archive the serve play imports, and the
    seconds it took. Built by lab/sparkimage.py over the node image; the archive is named by the
    image's tag (the hash of its inputs), so an unchanged checkout reuses both."""
    import sparkimage

    start = time.monotonic()
    try:
        tag, _ = sparkimage.build(ensure_image()[0], log)
    except sparkimage.ImageError as exc:
        raise LabError(str(exc)) from exc
    path = STATE_DIR / IMAGE_ARCHIVE_GLOB.replace("*", tag.rsplit(":", 1)[1])
    if path.is_file():
        log(f"image archive: {path.name} (cached, image {tag})")
    else:
        for old in STATE_DIR.glob(IMAGE_ARCHIVE_GLOB):
            old.unlink()
        partial = path.with_suffix(".partial")
        try:
            reference = sparkimage.save(tag, partial)
        except sparkimage.ImageError as exc:
            raise LabError(str(exc)) from exc
        partial.rename(path)
        log(f"image archive: {path.name} ({reference})")
    log(
        "image import: STAND-IN: the serve play copies the archive into every node's K3s airgap "
        "image directory and compares its sha256; no containerd runs in a lab node, so "
        "`k3s ctr images import` is not run"
    )
    return path, time.monotonic() - start


def converge(playbooks: Sequence[str] = ("site.yml",)) -> dict[str, Any]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    summary_file = STATE_DIR / "summary.json"
    archive, image_s = image_archive()
    extra = [
        "-e",
        f"sparkrack_summary_file={summary_file}",
        "-e",
        f"serving_image_archive={archive}",
    ]
    shutil.rmtree(FACT_CACHE, ignore_errors=True)
    log("converge: ansible-playbook site.yml -i inventories/lab (facts cached for the rerun)")
    first, _ = playbook(extra, STATE_DIR / "converge.log", playbooks)
    log("rerun: must report changed=0")
    second, recap = playbook(extra, STATE_DIR / "rerun.log", playbooks)
    changed = {h: r["changed"] for h, r in recap.items() if r["changed"]}
    result = {
        "image_seconds": round(image_s, 1),
        "converge_seconds": round(first, 1),
        "rerun_seconds": round(second, 1),
    }
    (STATE_DIR / "timings.json").write_text(json.dumps(result, indent=2) + "\n")
    if not recap:
        raise LabError("rerun printed no PLAY RECAP")
    if changed:
        raise LabError(f"rerun is not idempotent: changed tasks per host {changed}")
    return result


def print_summary() -> None:
    """Per node: addresses and units; then each simulated item once, with the nodes it applies to."""
    path = STATE_DIR / "summary.json"
    if not path.exists():
        log(f"no summary ({path} missing)")
        return
    data: dict[str, dict[str, Any]] = json.loads(path.read_text())
    print("\n== sparkrack lab summary ==")
    simulated: dict[str, list[str]] = {}
    for host, info in data.items():
        print(f"{host}  ({', '.join(info.get('groups', []))})")
        print(f"  mgmt        {info.get('mgmt_ip', '-')}")
        for line in info.get("addresses", []):
            print(f"  address     {line}")
        units = info.get("units", [])
        print(f"  units       {', '.join(units) if units else '-'}")
        for item in info.get("simulated", []):
            simulated.setdefault(item, []).append(host)
    print(
        f"\n== simulated (not done in the lab; docs/dev/lab.md: What the lab does not prove): {len(simulated)} =="
    )
    for item, hosts in simulated.items():
        print(f"  [{','.join(hosts)}] {item}")


def timing_rows(result: dict[str, Any], build: float | None) -> list[tuple[str, str]]:
    """What ``make lab`` measured, one (what, figure) pair per line of its timings."""
    conv, rerun = result["converge_seconds"], result["rerun_seconds"]
    ratio = 100 * rerun / conv if conv else 0.0
    rows = [("image build", "cached" if build is None else f"{build:.0f} s")]
    if "image_seconds" in result:
        rows.append(
            (
                "sparkrack image",
                f"{result['image_seconds']} s (build + archive; cached by input hash)",
            )
        )
    built_file, start_file = (
        STATE_DIR / "controlplane-build.json",
        STATE_DIR / "controlplane-start.json",
    )
    if built_file.is_file():
        built: dict[str, float | None] = json.loads(built_file.read_text())
        rows.append(
            (
                "control plane",
                ", ".join(
                    f"{k} {'cached' if v is None else f'built in {v:.0f} s'}"
                    for k, v in built.items()
                ),
            )
        )
    if start_file.is_file():
        started: dict[str, Any] = json.loads(start_file.read_text())
        rows.append(
            ("control plane", f"/readyz {started['readyz_seconds']} s after start (goal <= 20 s)")
        )
    rss = controlplane.ControlPlane.load(CONTROL_PLANE_STATE).rss_mib()
    if rss:
        rows.append(
            (
                "control plane",
                "RSS now "
                + ", ".join(f"{k} {v:.0f}" for k, v in rss.items())
                + f" = {sum(rss.values()):.0f} MiB",
            )
        )
    rows.append(("converge", f"{conv:.1f} s  (goal <= 240 s)"))
    rows.append(
        (
            "idempotent rerun",
            f"{rerun:.1f} s  ({ratio:.0f} % of converge; changed=0, cluster tasks included)",
        )
    )
    return rows


def print_timings(result: dict[str, Any], build: float | None) -> None:
    print("\n== timings ==")
    for what, figure in timing_rows(result, build):
        print(f"{what:<16} {figure}")


def record_lab(
    before: measurements.Load,
    result: dict[str, Any],
    build: float | None,
    root: Path = measurements.ROOT,
) -> Path:
    """``make lab``'s timings and the rank rehearsal's, with the load before and after, as the
    record named ``lab`` in docs/dev/measurements/ (and the page rewritten)."""
    rows = [[what, figure] for what, figure in timing_rows(result, build)]
    rehearsal = STATE_DIR / "rehearsal.json"
    if rehearsal.is_file():
        done: dict[str, Any] = json.loads(rehearsal.read_text())
        rows.append(
            [
                "rank rehearsal",
                f"{done['seconds']} s, {done['step_seconds']} s with the render "
                f"({'passed' if done['ok'] else 'FAILED'})",
            ]
        )
    record = measurements.measured(
        "lab/lab.py", "The lab", "SPARKRACK_RECORD=1 make lab", before, ["step", "time"], rows
    )
    return measurements.write(record, "lab", root)


def rehearse_ranks(
    host_ip: str = "render", filtered: bool = True, switch: dict[str, str] | None = None
) -> dict[str, Any]:
    """The rank-connectivity rehearsal in the lab Sparks' network namespaces (see
    sparkrack/serving/rehearsal): each engine's own dist-init and broadcaster per rank, behind
    the kube-router stand-in. ``switch`` (deployment -> profile): the deployments as the
    one-line switch of their profile would run them. Uses the engine-check environment in the repository's .cache (the one
    the unit tests build), so it downloads nothing the test run did not."""
    started = time.monotonic()
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(ROOT / ".cache"))
    from sparkrack.serving.enginecheck.upstream import ensure_env
    from sparkrack.serving.rehearsal.plan import HostIp, plan_inventory
    from sparkrack.serving.rehearsal.run import rehearse

    mode: HostIp = "fabric" if host_ip == "fabric" else "unset" if host_ip == "unset" else "render"
    plan = plan_inventory(str(INVENTORY), host_ip=mode, switch=switch)
    for version in sorted({(r.engine, r.version) for r in plan.ranks}):
        ensure_env(*version)
    pids = {
        r.node: docker("inspect", "-f", "{{.State.Pid}}", PREFIX + r.node).stdout.strip()
        for r in plan.ranks
    }
    outcome = rehearse(plan, lambda node: f"/proc/{pids[node]}/ns/net", filtered=filtered, say=log)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for line in outcome.lines:
        log(f"rehearsal: {line}")
    step = round(time.monotonic() - started, 1)
    log(
        f"rehearsal: {'passed' if outcome.ok else 'FAILED'} in {outcome.seconds} s, "
        f"{step} s with the render (load {load})"
    )
    result = {
        "ok": outcome.ok,
        "seconds": outcome.seconds,
        "step_seconds": step,
        "load": load,
        "lines": outcome.lines,
    }
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / "rehearsal.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def lab() -> None:
    before = measurements.load_now()
    ensure_engine()
    _, build = ensure_image()
    up()
    result = converge()
    if not rehearse_ranks()["ok"]:
        raise LabError(f"rank rehearsal failed; see {STATE_DIR}/rehearsal.json")
    print_summary()
    print_timings(result, build)
    if RECORD:
        log(f"record: {record_lab(before, result, build)}")


# --- molecule -----------------------------------------------------------------------------

MOLECULE_BEFORE = ("destroy", "syntax", "create")
"""molecule's steps before the converge: the syntax check and a fresh lab."""
MOLECULE_AFTER = ("check", "verify", "destroy")
"""molecule's steps after it: site.yml --check and testinfra against the converged lab, then the
lab removed."""
MOLECULE_TIMINGS = STATE_DIR / "molecule-timings.json"
RECORD = os.environ.get("SPARKRACK_RECORD") == "1"
"""``SPARKRACK_RECORD=1 make lab`` (or ``make molecule``) stores its figures as a measurement
record and rewrites docs/dev/measurements.md; without it the checkout stays untouched."""
MOLECULE_LOAD = STATE_DIR / "molecule-load.json"
"""The load average when ``make molecule``'s first step began."""


def molecule_steps(steps: Sequence[str]) -> None:
    """``molecule STEP`` of the default scenario for each step, each step's wall time recorded.

    ``make molecule`` runs :data:`MOLECULE_BEFORE`, then ``make lab`` itself (the converge, the
    ``changed=0`` rerun and the summary: the README's first command, exactly as an owner types
    it), then :data:`MOLECULE_AFTER`; the lab that molecule created is the one ``make lab``
    converges (``up`` keeps running nodes)."""
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0", "NO_COLOR": "1"}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env.pop("ANSIBLE_CONFIG", None)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    first = bool(steps) and steps[0] == MOLECULE_BEFORE[0]
    if not first and MOLECULE_TIMINGS.is_file():
        timings = json.loads(MOLECULE_TIMINGS.read_text())
    if first:
        MOLECULE_LOAD.write_text(json.dumps(list(measurements.load_now().average)) + "\n")
    with (STATE_DIR / "molecule.log").open("w" if first else "a") as out:
        for step in steps:
            log(f"molecule {step}")
            mark = time.monotonic()
            proc = subprocess.Popen(
                [venv_tool("molecule"), step, "--scenario-name", "default"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=ROOT,
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                out.write(line)
            proc.wait()
            timings[step if step not in timings else f"{step} (end)"] = round(
                time.monotonic() - mark, 1
            )
            MOLECULE_TIMINGS.write_text(json.dumps(timings, indent=2) + "\n")
            if proc.returncode != 0:
                raise LabError(
                    f"molecule {step} failed (exit {proc.returncode}); log: {STATE_DIR}/molecule.log"
                )
    print("\n== molecule step wall times ==")
    for step, seconds in timings.items():
        print(f"{step:<14} {seconds:6.1f} s")
    lab_timings = STATE_DIR / "timings.json"
    if steps == list(MOLECULE_AFTER) and lab_timings.is_file():
        conv: dict[str, float] = json.loads(lab_timings.read_text())
        print(f"make lab       converge {conv['converge_seconds']} s, "
              f"rerun {conv['rerun_seconds']} s (changed=0)")  # fmt: skip
    if RECORD and steps == list(MOLECULE_AFTER):
        log(f"record: {record_molecule(timings)}")


def record_molecule(timings: dict[str, float], root: Path = measurements.ROOT) -> Path:
    """``make molecule``'s step wall times, with the load when its first step began and after
    its last, as the record named ``molecule`` in docs/dev/measurements/ (and the page rewritten)."""
    now = measurements.load_now()
    average = json.loads(MOLECULE_LOAD.read_text()) if MOLECULE_LOAD.is_file() else now.average
    before = measurements.Load((average[0], average[1], average[2]), now.cores)
    rows = [[step, f"{seconds:.1f} s"] for step, seconds in timings.items()]
    rows.append(["total", f"{sum(timings.values()):.1f} s"])
    record = measurements.measured(
        "lab/lab.py",
        "The lab",
        "SPARKRACK_RECORD=1 make molecule",
        before,
        ["molecule step", "wall time"],
        rows,
        [
            "The total is molecule's own steps; `make lab`, which `make molecule` runs between "
            "`create` and `check`, writes its own record."
        ],
    )
    return measurements.write(record, "molecule", root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lab/lab.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("engine", help="ensure a running Docker engine")
    sub.add_parser("image", help="build the node image unless cached")
    up_p = sub.add_parser("up", help="start the lab nodes (idempotent)")
    up_p.add_argument("--fresh", action="store_true", help="remove existing lab nodes first")
    conv_p = sub.add_parser(
        "converge", help="site.yml twice; fail unless the rerun changes nothing"
    )
    conv_p.add_argument(
        "playbooks", nargs="*", default=["site.yml"], help="playbooks to run (default site.yml)"
    )
    sub.add_parser("summary", help="print the last converge summary")
    sub.add_parser("lab", help="engine + image + up + converge + summary + timings")
    mol_p = sub.add_parser(
        "molecule", help="molecule steps of the default scenario, each one's wall time printed"
    )
    mol_p.add_argument(
        "part",
        choices=("before", "after"),
        help=f"before: {' '.join(MOLECULE_BEFORE)}; after: {' '.join(MOLECULE_AFTER)}",
    )
    reh_p = sub.add_parser("rehearse", help="the rank-connectivity rehearsal in the running lab")
    reh_p.add_argument("--host-ip", choices=["render", "fabric", "unset"], default="render")
    reh_p.add_argument("--no-filter", action="store_true", help="without the kube-router stand-in")
    down_p = sub.add_parser("down", help="remove the lab containers and networks, by name")
    down_p.add_argument("--image", action="store_true", help="also remove the node image")
    args = parser.parse_args(argv)
    try:
        if args.command == "engine":
            ensure_engine()
        elif args.command == "image":
            ensure_engine()
            ensure_image()
        elif args.command == "up":
            up(fresh=args.fresh)
        elif args.command == "converge":
            result = converge(args.playbooks)
            print_summary()
            print_timings(result, None)
        elif args.command == "summary":
            print_summary()
        elif args.command == "lab":
            lab()
        elif args.command == "molecule":
            ensure_engine()
            molecule_steps(list(MOLECULE_BEFORE if args.part == "before" else MOLECULE_AFTER))
        elif args.command == "rehearse":
            if not rehearse_ranks(args.host_ip, filtered=not args.no_filter)["ok"]:
                return 1
        elif args.command == "down":
            if not engine_answers():
                log("no docker engine answers: nothing to remove")
                return 0
            down()
            if args.image:
                for line in docker(
                    "image", "ls", IMAGE_REPO, "--format", "{{.Repository}}:{{.Tag}}"
                ).stdout.split():
                    docker("image", "rm", line, check=False)
            else:
                log(
                    f"kept the node image {image_tag()} (build cache; `lab/lab.py down --image` removes it)"
                )
    except LabError as exc:
        print(f"[lab] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
