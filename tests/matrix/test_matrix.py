"""`sparkrack matrix` orchestration with an injected deployer (the real one needs a cluster).

The fake cluster "deploys" a case by starting the real test server (HTTP/SSE on 127.0.0.1) at a
token rate that depends on the case's attention backend, or by returning a crash log; the bench
is the real harness.  So the whole loop — validate, deploy, diagnose, bench, record, resume,
summary, provenance write-back — runs for real except the cluster.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.bench import server
from sparkrack.bench.client import RequestSpec
from sparkrack.bench.report import validate_results, write_outputs
from sparkrack.bench.runner import BenchConfig, RunResult, run_bench
from sparkrack.cli import main
from sparkrack.cli.matrix import finish_matrix
from sparkrack.errors import Problem, SparkrackError
from sparkrack.matrix.runner import (
    AnsibleDeployer,
    Case,
    DeployOutcome,
    MatrixRunner,
    default_validator,
    load_matrix,
    winners,
    write_provenance,
)

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"

BASE = """\
# yaml-language-server: $schema=schema.json
# Test profile (shape of model_profiles/*.yml).
---
description: test model
model: org/test-model
engine: sglang
image: example/sglang:0.5.10
topology:
  tp: 4
  ep: 1
sglang:
  mem_fraction_static: 0.80
  attention_backend: flashinfer   # default
  moe_runner_backend: triton
  served_model_name: sparkrack-test
model_info:
  architecture: TestForCausalLM
provenance:
  seed: "003"
  date: "2026-04-16"
  image: example/sglang:0.5.10
  measured:
    n1: 22.2
    n4: 67.2
    n8: 101.3
  sources:
    - src:roce-post
"""

MATRIX = """\
name: Test Sweep
base_profile: base.yml
inventory: inventories/lab
bench: {concurrency: [1, 4, 8], max_tokens: 60}
cases:
  - name: low-mem
    overrides: {sglang.mem_fraction_static: 0.5}
axes:
  sglang.attention_backend: [flashinfer, triton]
  topology.ep: [1, 4]
"""

# Token rate per stream the fake cluster serves, by attention backend.
RATES = {"flashinfer": 500, "triton": 1000}


def rule_validator(data: dict[str, Any], source: str, nodes: int | None) -> list[Problem]:
    """Injected validator: refuses EP>1 with triton attention, like a profile rule would."""
    if data["topology"]["ep"] > 1 and data["sglang"]["attention_backend"] == "triton":
        return [
            Problem(source, "topology.ep", "EP>1 with triton attention", "use ep 1", "test-ep-rule")
        ]
    return []


class FakeCluster:
    def __init__(self, crash: dict[str, str], interrupt_on: str | None = None) -> None:
        self.crash = crash
        self.interrupt_on = interrupt_on
        self.calls: list[str] = []
        self.url = ""
        self._stack = contextlib.ExitStack()

    def deploy(self, case: Case, profile_file: Path, log_dir: Path) -> DeployOutcome:
        self.calls.append(case.name)
        # What gets deployed is the rendered case profile: base + overrides.
        assert yaml.safe_load(profile_file.read_text()) == case.profile
        if case.name == self.interrupt_on:
            raise KeyboardInterrupt
        self._stack.close()
        if case.name in self.crash:
            return DeployOutcome(ready=False, log=self.crash[case.name])
        rate = RATES[case.profile["sglang"]["attention_backend"]]
        self.url = self._stack.enter_context(
            server.spawn(["--rate", str(rate), "--tokens-per-chunk", "4", "--ttft", "0.01"])
        )
        return DeployOutcome(ready=True, log="ready")

    def bench(self, case: Case, case_dir: Path) -> RunResult:
        spec = RequestSpec(
            url=self.url, model=case.profile["sglang"]["served_model_name"], max_tokens=150
        )
        run = run_bench(
            BenchConfig(spec=spec, concurrency=[1, 4, 8], label=case.name, progress=False)
        )
        write_outputs(run, case_dir)
        return run

    def close(self) -> None:
        self._stack.close()


@pytest.fixture()
def matrix_file(tmp_path: Path) -> Path:
    (tmp_path / "base.yml").write_text(BASE)
    path = tmp_path / "matrix.yml"
    path.write_text(MATRIX)
    return path


@pytest.fixture()
def cluster() -> Iterator[FakeCluster]:
    crash = {"low-mem": (LOGS / "mem-fraction-too-low.log").read_text()}
    fake = FakeCluster(crash)
    yield fake
    fake.close()


def _runner(matrix_file: Path, out: Path, cluster: FakeCluster) -> MatrixRunner:
    return MatrixRunner(
        matrix=load_matrix(matrix_file),
        out_dir=out,
        deployer=cluster,
        bench=cluster.bench,
        validator=rule_validator,
        log=lambda _msg: None,
    )


def test_load_matrix_builds_cases_from_cases_and_axes(matrix_file: Path) -> None:
    m = load_matrix(matrix_file)
    assert m.name == "test-sweep"
    assert [c.name for c in m.cases] == [
        "low-mem",
        "attention_backend-flashinfer_ep-1",
        "attention_backend-flashinfer_ep-4",
        "attention_backend-triton_ep-1",
        "attention_backend-triton_ep-4",
    ]
    triton4 = m.cases[4]
    assert triton4.profile["sglang"]["attention_backend"] == "triton"
    assert triton4.profile["topology"] == {"tp": 4, "ep": 4}
    assert triton4.profile["sglang"]["moe_runner_backend"] == "triton"  # base kept
    assert m.base["topology"]["ep"] == 1  # the base itself is untouched


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("base_profile: base.yml\n", "cases"),
        ("cases: [{name: a}]\n", "base_profile"),
        ("base_profile: nope.yml\ncases: [{name: a}]\n", "base_profile"),
        ("base_profile: base.yml\ncases: [{name: a}, {name: a}]\n", "cases"),
        ("base_profile: base.yml\naxes: {sglang.x: []}\n", "axes"),
        ("base_profile: base.yml\ncases: [{name: a, overrides: {model.x: 1}}]\n", "a.model.x"),
    ],
)
def test_bad_matrix_files_are_refused(matrix_file: Path, text: str, key: str) -> None:
    matrix_file.write_text(text)
    with pytest.raises(SparkrackError) as err:
        load_matrix(matrix_file)
    assert err.value.problems[0].key == key and err.value.problems[0].file == str(matrix_file)


@pytest.mark.tools  # serves or probes HTTP on loopback
def test_full_run_refusal_crash_bench_and_winner(
    matrix_file: Path, tmp_path: Path, cluster: FakeCluster
) -> None:
    out = tmp_path / "results"
    state = _runner(matrix_file, out, cluster).run()
    cases = state["cases"]
    # Refused without deploying; crashed classified by diagnose; the rest benched.
    assert "attention_backend-triton_ep-4" not in cluster.calls
    refused = cases["attention_backend-triton_ep-4"]
    assert refused["status"] == "refused"
    assert refused["reason"].startswith("refused by rule test-ep-rule: topology.ep")
    crashed = cases["low-mem"]
    assert crashed["status"] == "crashed"
    assert crashed["findings"][0]["id"] == "mem-fraction-too-low"
    assert crashed["findings"][0]["profile_key"] == "sglang.mem_fraction_static"
    done = [n for n, c in cases.items() if c["status"] == "done"]
    assert sorted(done) == [
        "attention_backend-flashinfer_ep-1",
        "attention_backend-flashinfer_ep-4",
        "attention_backend-triton_ep-1",
    ]
    for name in done:
        data = json.loads((out / "cases" / name / "results.json").read_text())
        assert validate_results(data) == []
        assert (out / "cases" / name / "profile.yml").is_file()
    # The triton case runs at 3000 tok/s per stream vs 1500: it must win every level.
    best = winners(state)
    assert list(best) == ["1", "4", "8"]
    assert {w["case"] for w in best.values()} == {"attention_backend-triton_ep-1"}
    slow = cases["attention_backend-flashinfer_ep-1"]["levels"]
    for n, win in best.items():
        assert win["peak_tok_s"] > 1.5 * slow[n]["peak_tok_s"]  # 1000 vs 500 tok/s per stream
    summary = finish_matrix(load_matrix(matrix_file), state, out).read_text()
    assert "n=8: **attention_backend-triton_ep-1**" in summary
    winner = next(line for line in summary.splitlines() if line.startswith("- n=8: "))
    assert "tok/s peak, " in winner and winner.endswith("tok/s aggregate")
    assert (
        "refused by rule test-ep-rule" in summary
        and "startup crash: mem-fraction-too-low" in summary
    )
    testlog = (out / "TESTLOG.md").read_text()
    assert testlog.count("| attention_backend-") >= 3
    assert (out / "tok_s_vs_concurrency.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.tools  # serves or probes HTTP on loopback
def test_interrupted_matrix_resumes_where_it_stopped(matrix_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "results"
    crash = {"low-mem": (LOGS / "mem-fraction-too-low.log").read_text()}
    first = FakeCluster(crash, interrupt_on="attention_backend-flashinfer_ep-4")
    try:
        with pytest.raises(KeyboardInterrupt):
            _runner(matrix_file, out, first).run()
    finally:
        first.close()
    state = json.loads((out / "state.json").read_text())
    assert {n: c["status"] for n, c in state["cases"].items()} == {
        "low-mem": "crashed",
        "attention_backend-flashinfer_ep-1": "done",
        "attention_backend-flashinfer_ep-4": "deploying",  # interrupted mid-case
    }
    second = FakeCluster(crash)
    try:
        final = _runner(matrix_file, out, second).run()
    finally:
        second.close()
    # Finished cases are skipped; the interrupted one and the rest run.
    assert second.calls == ["attention_backend-flashinfer_ep-4", "attention_backend-triton_ep-1"]
    assert {c["status"] for c in final["cases"].values()} == {"crashed", "done", "refused"}
    assert len(final["cases"]) == 5
    # A third run has nothing left to do.
    third = FakeCluster(crash)
    _runner(matrix_file, out, third).run()
    assert third.calls == []


def _state(n8_best: str) -> dict[str, Any]:
    def case(peaks: tuple[float, float, float], failed: int = 0) -> dict[str, Any]:
        return {
            "status": "done",
            "overrides": {"sglang.attention_backend": "triton"},
            "levels": {
                str(n): {"peak_tok_s": p, "failed": failed if n == 8 else 0, "status": "ok"}
                for n, p in zip((1, 4, 8), peaks, strict=True)
            },
        }

    return {
        "cases": {
            "a": case((20.0, 60.0, 90.0)),
            n8_best: case((21.5, 67.8, 102.0)),
            "flaky": case((30.0, 90.0, 150.0), failed=1),  # 7/1 at n=8: not a clean winner
        }
    }


def test_winner_ignores_levels_with_failures() -> None:
    best = winners(_state("b"))
    assert best["8"]["case"] == "b"  # flaky is faster but had a failed request at n=8
    assert best["1"]["case"] == "flaky"


def test_write_provenance_changes_only_the_figures(matrix_file: Path) -> None:
    m = load_matrix(matrix_file)
    before = m.base_profile.read_text()
    note = write_provenance(m, _state("b"), today=__import__("datetime").date(2026, 11, 20))
    after = m.base_profile.read_text()
    assert "winner b (sglang.attention_backend=triton)" in note
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    removed = [line[1:].strip() for line in diff[2:] if line.startswith("-")]
    added = [line[1:].strip() for line in diff[2:] if line.startswith("+")]
    assert removed == ['date: "2026-04-16"', "n1: 22.2", "n4: 67.2", "n8: 101.3"]
    assert added == [
        'date: "2026-11-20"',
        "n1: 21.5",
        "n4: 67.8",
        "n8: 102.0",
        'unit: "tok/s"',
        f"note: {json.dumps(note)}",
    ]
    assert "  attention_backend: flashinfer   # default" in after  # comments survive
    data = yaml.safe_load(after)
    assert data["provenance"]["measured"]["note"] == note
    assert data["provenance"]["sources"] == ["src:roce-post"]
    base = yaml.safe_load(before)
    base["provenance"].pop("measured")
    base["provenance"].pop("date")
    data["provenance"].pop("measured")
    data["provenance"].pop("date")
    assert data == base


def test_write_provenance_refuses_flow_style(matrix_file: Path) -> None:
    base = matrix_file.parent / "base.yml"
    base.write_text(
        BASE.replace(
            "  measured:\n    n1: 22.2\n    n4: 67.2\n    n8: 101.3\n",
            "  measured: {n1: 22.2, n4: 67.2, n8: 101.3}\n",
        )
    )
    before = base.read_text()
    with pytest.raises(SparkrackError, match="matrix-provenance"):
        write_provenance(load_matrix(matrix_file), _state("b"))
    assert base.read_text() == before


def test_ansible_deployer_runs_the_serve_play(tmp_path: Path) -> None:
    fake = tmp_path / "ansible-playbook"
    fake.write_text(
        f'#!/bin/sh\necho "ARGS: $*"\ncat {LOGS / "moe-runner-cutlass-assert.log"}\nexit 2\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    deployer = AnsibleDeployer(inventory="inventories/lab", ansible_playbook=str(fake))
    profile = tmp_path / "profile.yml"
    profile.write_text("model: a/b\n")
    assert deployer.command(profile) == [
        str(fake),
        "playbooks/serve.yml",
        "-i",
        "inventories/lab",
        "-e",
        f"serving_profile_file={profile}",
    ]
    outcome = deployer.deploy(Case("c", {}, {}), profile, tmp_path)
    assert outcome.ready is False
    assert (
        f"ARGS: playbooks/serve.yml -i inventories/lab -e serving_profile_file={profile}"
        in outcome.log
    )
    assert (tmp_path / "deploy.log").read_text() == outcome.log


def test_cli_matrix_with_the_real_deployer_path(
    matrix_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`sparkrack matrix` through AnsibleDeployer; ansible-playbook is a stand-in that crashes."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "ansible-playbook"
    fake.write_text(f"#!/bin/sh\ncat {LOGS / 'cudnn-not-available.log'}\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("sparkrack.cli.matrix.default_validator", lambda: rule_validator)
    out = tmp_path / "m"
    assert main(["matrix", str(matrix_file), "--out", str(out), "--no-progress"]) == 0
    state = json.loads((out / "state.json").read_text())
    statuses = {n: c["status"] for n, c in state["cases"].items()}
    assert statuses["attention_backend-triton_ep-4"] == "refused"
    assert [
        c["findings"][0]["id"] for c in state["cases"].values() if c["status"] == "crashed"
    ] == ["cudnn-not-available"] * 4
    assert "No case finished cleanly." in capsys.readouterr().out
    matrix_file.write_text(MATRIX.replace("inventory: inventories/lab\n", ""))
    assert main(["matrix", str(matrix_file), "--out", str(out)]) == 2  # no inventory: usage


def test_default_validator_is_the_profiles_rule_engine() -> None:
    from sparkrack.serving import validate_profile

    assert default_validator() is validate_profile


@pytest.mark.tools  # serves or probes HTTP on loopback
def test_real_validator_refuses_a_case_of_a_shipped_profile(tmp_path: Path) -> None:
    """With the profiles' real rule engine, a seed trap (piecewise CUDA graph on NVFP4) is
    recorded as refused by its rule and never deployed; the clean case is deployed and benched."""
    validate = default_validator()
    base = Path(__file__).resolve().parents[2] / "model_profiles" / "glm-4.7-nvfp4.yml"
    matrix = tmp_path / "m.yml"
    matrix.write_text(
        f"base_profile: {base}\nnodes: 4\n"
        "cases:\n"
        "  - {name: as-shipped, overrides: {sglang.served_model_name: sparkrack-test}}\n"
        "  - name: piecewise-on\n"
        "    overrides: {sglang.served_model_name: sparkrack-test,"
        " sglang.disable_piecewise_cuda_graph: false}\n"
    )
    fake = FakeCluster({})
    try:
        runner = MatrixRunner(
            matrix=load_matrix(matrix),
            out_dir=tmp_path / "out",
            deployer=fake,
            bench=fake.bench,
            validator=validate,
            log=lambda _msg: None,
        )
        state = runner.run()
    finally:
        fake.close()
    assert fake.calls == ["as-shipped"]
    assert state["cases"]["as-shipped"]["status"] == "done"
    refused = state["cases"]["piecewise-on"]
    assert refused["status"] == "refused"
    assert refused["reason"].startswith("refused by rule ")
    assert "sglang.disable_piecewise_cuda_graph" in refused["reason"]


@pytest.mark.parametrize(
    ("profile", "served"),
    [
        ("nemotron-3-super-120b-a12b-nvfp4-vllm", "nemotron-3-super"),
        (
            "nemotron-3-super-120b-a12b-nvfp4-trtllm",
            "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        ),
        ("glm-4.7-nvfp4", "nvidia/GLM-4.7-NVFP4"),
    ],
)
def test_bench_asks_for_the_name_the_cases_engine_serves(profile: str, served: str) -> None:
    from sparkrack.cli.matrix import bench_model
    from sparkrack.serving import load_profile

    data = load_profile(profile).data
    assert bench_model({}, data) == served
    assert bench_model({"model": "pinned"}, data) == "pinned"


def test_a_vllm_case_is_benched_under_its_vllm_served_name() -> None:
    from sparkrack.cli.matrix import bench_model

    data = {"model": "org/m", "engine": "vllm", "vllm": {"served_model_name": "short"}}
    assert bench_model({}, data) == "short"
    # A key of another engine's block is not what this server answers to.
    assert bench_model({}, {**data, "vllm": {}, "sglang": {"served_model_name": "x"}}) == "org/m"
