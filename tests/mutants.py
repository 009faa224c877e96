"""The mutation check (``make mutants``): each mutation below breaks the code on purpose in a copy
of the checkout, and the test named beside it must fail on that copy. A mutation that survives
means its test asserts less than its name.

A mutation is one exact text replacement, or a few in one file (each text must occur once, so a
refactor that moves it makes the check fail loudly rather than pass untested). The copy holds the checkout's tracked and
untracked files (git ls-files), its caches left out; the test runs with the copy first on
sys.path, and the check proves that the mutated module was the one imported.

``python tests/mutants.py`` runs them all; ``python tests/mutants.py NAME...`` some; ``--list``
names them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    old: str
    new: str
    test: str
    """The pytest node id that must fail once the mutation is in."""
    also: tuple[tuple[str, str], ...] = ()
    """Further (old, new) replacements in the same file, applied with the first."""


RECEIVER = "sparkrack/serving/scripts/fetch_daemon.py"
RECEIVER_TEST = "tests/serving/scripts/test_fetch_receiver.py::test_receiver_refuses_the_attacks"
PROBE = "sparkrack/watch/probe.py"
MEMGUARD = "sparkrack/watch/memguard.py"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "receiver-without-chroot",
        RECEIVER,
        '"use chroot = yes",',
        '"use chroot = no",',
        RECEIVER_TEST,
    ),
    Mutation(
        "receiver-without-incoming-chmod",
        RECEIVER,
        '"incoming chmod = Du-s,Dg-s,Do-w,Fu-s,Fg-s,Fo-w,Fa-x",',
        "",
        RECEIVER_TEST,
    ),
    Mutation(
        # The stall deadline doubled while the probe reports a figure inside the S..S+1 band:
        # only a clock outside the probe sees it.
        "stall-deadline-doubled-and-hidden",
        PROBE,
        "return loop.time() + (self.t_last + self.cfg.stall_s - time.monotonic())",
        "return loop.time() + (self.t_last + 2 * self.cfg.stall_s - time.monotonic())",
        "tests/watch/test_watch_once.py::test_a_stall_is_reported_within_the_limit_by_the_tests_clock",
        also=(
            (
                "r.since_last_token_s = time.monotonic() - self.t_last",
                "r.since_last_token_s = self.cfg.stall_s + 0.5",
            ),
        ),
    ),
    Mutation(
        # A chain whose relay passes nothing on still ends verified (the final push sends it
        # all): only the relay's own evidence, files passed on before its copy verified, shows it.
        "relay-passes-nothing-on",
        "sparkrack/serving/scripts/fetch_relay.py",
        "ready = self._ready()",
        "ready: list[tuple[str, str]] = []",
        "tests/serving/scripts/test_fetch_chain.py"
        "::test_a_chain_relays_each_file_while_receiving_and_every_hop_verifies",
    ),
    Mutation(
        # A per-stream overhead five times the estimate's: inside the tolerance of an 8 s copy,
        # most of the figure for a copy of one small file.
        "copy-overhead-five-times",
        "sparkrack/planner/switch.py",
        "RAIL_OVERHEAD_S = 0.3",
        "RAIL_OVERHEAD_S = 1.5",
        "tests/serving/scripts/test_fetch_receiver.py"
        "::test_the_copy_estimate_matches_a_rate_limited_copy",
    ),
    Mutation(
        # The chain rendered as a plain fan-out (the head pushes to every peer, none relays): the
        # Docker lab's rate bar is met by a fan-out too; the rendered argv tell them apart.
        "chain-rendered-as-fan-out",
        "sparkrack/serving/switch/plan.py",
        "pushed_to = copy_rails if not chain else [rail[:1] for rail in copy_rails]",
        "pushed_to = copy_rails",
        "tests/serving/switch/test_switch_manifests.py"
        "::test_slow_rails_render_a_chain_each_receiver_taking_from_the_one_before",
        also=(
            (
                "upstream = [head, *peers[:-1]] if chain else [head] * len(peers)",
                "upstream = [head] * len(peers)",
            ),
            (
                "downstream: list[tuple[str, ...]] = [*peers[1:], ()] if chain else [()] * len(peers)",
                "downstream: list[tuple[str, ...]] = [()] * len(peers)",
            ),
        ),
    ),
    Mutation(
        "memguard-without-node-filter",
        MEMGUARD,
        'field_selector=f"spec.nodeName={self.node}",',
        "",
        "tests/watch/test_memguard.py::test_the_guard_asks_for_the_engine_pods_of_its_own_node",
    ),
    Mutation(
        # The guard selects every pod with a rank label: a fabric-check pod becomes a candidate.
        "memguard-selects-by-rank-label-only",
        MEMGUARD,
        "label_selector=contract.ENGINE_SELECTOR,",
        "label_selector=contract.LABEL_RANK,",
        "tests/watch/test_memguard.py::test_a_fabric_check_pod_is_no_engine_pod_to_the_guard",
    ),
    Mutation(
        # diagnose exits 0 whatever it names: a script cannot tell a named hang from nothing.
        "diagnose-exits-0-always",
        "sparkrack/cli/diagnose.py",
        "return ExitCode.FAILED if named else ExitCode.OK",
        "return ExitCode.OK",
        "tests/diagnose/test_hangs.py::test_the_exit_status_says_whether_anything_was_named",
    ),
    Mutation(
        # The argv shape's {0,40} with a space, which makes it literal text to match: a prefixed
        # key flag (--admin-api-key X, --hf-token X) goes unmasked.
        "redaction-misses-prefixed-argv",
        "sparkrack/diagnose/redact.py",
        "--[A-Za-z_-]{0,40}(?:api",
        "--[A-Za-z_-]{0, 40}(?:api",
        "tests/diagnose/test_redact.py::test_each_shape_of_a_key_is_masked",
    ),
    Mutation(
        # No policy for a one-Spark fetch pod: the default deny shuts its download off the Hub.
        "fetch-pod-without-its-policy",
        "sparkrack/serving/switch/objects.py",
        '*([] if pod.get("hostNetwork") else [fetch_policy(res, labels)]),',
        "",
        "tests/serving/objects/test_network_policy.py::"
        "test_a_one_spark_fetch_pod_reaches_the_dns_and_the_hub_only",
    ),
    Mutation(
        # 443 anywhere, the cluster included: the download reaches the API server and the pods.
        "fetch-egress-into-the-cluster",
        "sparkrack/serving/objects/network.py",
        '"except": inside',
        '"except": []',
        "tests/serving/objects/test_network_policy.py::"
        "test_a_one_spark_fetch_pod_reaches_the_dns_and_the_hub_only",
    ),
)


def copy_checkout(dest: Path) -> None:
    """The checkout's tracked and untracked (not ignored) files, as they are on disk."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree, not yet committed
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


def apply(copy: Path, mutation: Mutation) -> None:
    path = copy / mutation.file
    text = path.read_text()
    for old, new in ((mutation.old, mutation.new), *mutation.also):
        count = text.count(old)
        if count != 1:
            raise SystemExit(
                f"mutants: {mutation.name}: {old!r} occurs {count} times in {mutation.file}, "
                "not once: update the mutation to the code as it is now"
            )
        text = text.replace(old, new)
    path.write_text(text)


def run_test(copy: Path, mutation: Mutation) -> subprocess.CompletedProcess[str]:
    module = mutation.file.removesuffix(".py").replace("/", ".")
    env = {**os.environ, "PYTHONPATH": f"{copy}{os.pathsep}{copy / 'tests'}"}
    # The mutated module must be the copy's, not the checkout's (the dev venv's editable install).
    where = subprocess.run(
        [sys.executable, "-c", f"import {module} as m; print(m.__file__)"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not where.startswith(str(copy)):
        raise SystemExit(f"mutants: {module} imported from {where}, not from the copy {copy}")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
         mutation.test],
        cwd=copy, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def check(mutation: Mutation) -> tuple[bool, str]:
    """(caught, the test's last lines)."""
    with tempfile.TemporaryDirectory(prefix=f"sparkrack-mutant-{mutation.name}-") as tmp:
        copy = Path(tmp)
        copy_checkout(copy)
        apply(copy, mutation)
        proc = run_test(copy, mutation)
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
    # pytest: 1 = tests failed. 5 (nothing collected) or a skip is no catch.
    return proc.returncode == 1 and " failed" in proc.stdout, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="name the mutations and stop")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTATIONS}
    if unknown:
        parser.error(f"unknown mutation(s): {', '.join(sorted(unknown))}")
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.file} -> {m.test}")
        return 0
    survived = []
    for m in chosen:
        caught, tail = check(m)
        print(f"[mutants] {m.name}: {'caught' if caught else 'SURVIVED'} by {m.test}")
        if not caught:
            print(tail)
            survived.append(m.name)
    print(f"[mutants] {len(chosen) - len(survived)}/{len(chosen)} caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
