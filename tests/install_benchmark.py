"""Benchmark: the environments a fresh clone builds before its tests can run, each built cold
(an empty pip cache, an empty target), at this checkout and at another commit (not collected by
pytest).

    .venv/bin/python tests/install_benchmark.py [REF] [--no-record]

REF (default ``HEAD``) is checked out into a temporary worktree and built the same way, so the
two columns compare the same builders at two commits. Prints wall and CPU seconds per build with
the machine's load; writes the record ``docs/dev/measurements/cold-installs.json`` and rewrites
``docs/dev/measurements.md``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkrack.bench import measurements  # noqa: E402

ENGINE_ENVS = (
    "from sparkrack.serving.enginecheck import upstream as u\n"
    "for d in ('sglang', 'vllm'):\n"
    "    for v in u.supported_versions(d):\n"
    "        u.ensure_env(d, v)\n"
)
TSERVE = "import tests.bench.test_bench_real_server as t\nt._build_venv()\n"
LITELLM = "import tests.serving.deployments.test_gateway_litellm as t\nt.litellm.__wrapped__()\n"


def builds(tree: Path, out: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    """(what, argv, extra env) of each build, run in ``tree`` with its targets under ``out``."""
    python = str(ROOT / ".venv" / "bin" / "python")
    rel = os.path.relpath(out, tree)
    return [
        ("make setup (.venv)", ["make", "-s", "setup", f"VENV={rel}/venv"], {}),
        ("make scan-setup (checkov)", ["make", "-s", "scan-setup", f"SCAN_VENV={rel}/scan"], {}),
        (
            "engine-check environments (all 9)",
            [python, "-c", ENGINE_ENVS],
            {"SPARKRACK_CACHE_DIR": str(out / "cache")},
        ),
        (
            "transformers serve venv (bench)",
            [python, "-c", TSERVE],
            {"SPARKRACK_TSERVE_VENV": str(out / "tserve")},
        ),
        (
            "LiteLLM venv (gateway)",
            [python, "-c", LITELLM],
            {"SPARKRACK_CACHE_DIR": str(out / "cache")},
        ),
        (
            ".ci/install-check (3 Pythons side by side)",
            [".ci/install-check"],
            {"INSTALL_CHECK_DIR": str(out / "install-check")},
        ),
    ]


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(argv)[:80]} failed ({code}): {err.decode()[-800:]}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def measure(tree: Path) -> list[tuple[str, float, float]]:
    results = []
    out = tree / ".cache" / "install-benchmark"
    for what, argv, extra in builds(tree, out):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix="pipcache-") as pip_cache:
            env = {**os.environ, "PIP_CACHE_DIR": pip_cache, **extra}
            env.pop("VIRTUAL_ENV", None)
            env.pop("PYTHONPATH", None)  # the working directory decides which tree runs
            wall, cpu = run(argv, tree, env)
        shutil.rmtree(out, ignore_errors=True)
        print(
            f"  {what:45} wall {wall:6.1f} s  CPU {cpu:6.1f} s  load {measurements.load_now().text()}"
        )
        results.append((what, wall, cpu))
    return results


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--no-record"]
    ref = args[0] if args else "HEAD"
    before = measurements.load_now()
    print(f"load average {before.text()}")
    with tempfile.TemporaryDirectory(prefix="install-benchmark-") as tmp:
        worktree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(worktree), ref], cwd=ROOT, check=True
        )
        try:
            print(f"at {ref}:")
            old = measure(worktree)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False
            )
    print("at this checkout:")
    new = measure(ROOT)
    rows = [
        [what, f"{ow:.1f} s ({oc:.1f} s CPU)", f"{nw:.1f} s ({nc:.1f} s CPU)"]
        for (what, ow, oc), (_, nw, nc) in zip(old, new, strict=True)
    ]
    if "--no-record" in sys.argv:
        return
    record = measurements.measured(
        benchmark="tests/install_benchmark.py",
        section="The lab",
        command=f".venv/bin/python tests/install_benchmark.py {ref}",
        before=before,
        columns=["build, cold (empty pip cache and target)", f"at {ref}", "this checkout"],
        rows=rows,
        notes=[
            "Each build runs alone, one after the other, in a fresh pip cache; the downloads come "
            "from PyPI each time.",
            "CPU is the build's user + system time, its child processes included.",
        ],
    )
    print(f"wrote {measurements.write(record, 'cold-installs')}")


if __name__ == "__main__":
    main()
