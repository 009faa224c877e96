"""`sparkrack diagnose`: one realistic log excerpt per known signature, each found with its id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkrack.cli import main
from sparkrack.diagnose.signatures import Finding, diagnose, load_signatures
from sparkrack.sources import expand

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
SIGNATURE_IDS = [s.id for s in load_signatures()]

# Every signature that must be recognised, by id, with the knob it names (the file
# tests/data/logs/<id>.log holds its excerpt).
REQUIRED = {
    "moe-runner-cutlass-assert": "sglang.moe_runner_backend",
    "cudnn-not-available": "sglang.fp4_gemm_backend",
    "mem-fraction-too-low": "sglang.mem_fraction_static",
    "piecewise-cuda-graph-fake-tensor": "sglang.disable_piecewise_cuda_graph",
    "illegal-instruction-graph-capture": "sglang.kv_cache_dtype",
    "illegal-instruction-decode": "sglang.attention_backend",
    "flashinfer-invalid-config-head-dim-256": "sglang.attention_backend",
    "gemma4-drafter-language-model": "image",
    "qwen35-spec-radix-mamba": "sglang.mamba_scheduler_strategy",
    "nccl-socket-transport": "transport",
    "roce-network-unreachable": None,
}


def test_every_required_signature_is_in_the_database() -> None:
    assert set(REQUIRED) <= set(SIGNATURE_IDS)
    for sig in load_signatures():
        assert sig.cause and sig.fix
        assert sig.seed.startswith(("src:", "captured: ", "upstream: "))


@pytest.mark.parametrize("sig_id", SIGNATURE_IDS)
def test_each_signature_is_detected_in_its_excerpt(sig_id: str) -> None:
    findings = diagnose((LOGS / f"{sig_id}.log").read_text())
    assert [f.id for f in findings] == [sig_id]
    finding = findings[0]
    if sig_id in REQUIRED:
        assert finding.profile_key == REQUIRED[sig_id]
    assert finding.line > 0 and finding.evidence
    assert expand(finding.seed) in str(finding) and "src:" not in str(finding)


def test_a_clean_log_gives_no_finding() -> None:
    assert diagnose((LOGS / "clean.log").read_text()) == []
    assert diagnose("") == []


def test_capture_and_decode_are_told_apart_by_context() -> None:
    capture = diagnose((LOGS / "illegal-instruction-graph-capture.log").read_text())[0]
    decode = diagnose((LOGS / "illegal-instruction-decode.log").read_text())[0]
    assert "capture" in capture.cause and "JIT" in capture.cause
    assert "decode time" in decode.cause
    assert capture.fix != decode.fix


def test_several_findings_in_one_log_come_in_order() -> None:
    text = "\n".join(
        (LOGS / f"{name}.log").read_text()
        for name in ("nccl-socket-transport", "mem-fraction-too-low")
    )
    findings = diagnose(text)
    assert [f.id for f in findings] == ["nccl-socket-transport", "mem-fraction-too-low"]
    assert findings[0].count == 1  # the channel line; the network's choice alone is not matched
    assert findings[0].line < findings[1].line


def test_finding_has_the_contract_fields() -> None:
    finding = diagnose((LOGS / "cudnn-not-available.log").read_text())[0]
    assert isinstance(finding, Finding)
    assert (finding.id, finding.profile_key) == ("cudnn-not-available", "sglang.fp4_gemm_backend")
    assert "flashinfer_cutlass" in finding.fix and "src:super-mtp-post" in finding.seed


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diagnose", str(LOGS / "qwen35-spec-radix-mamba.log"), str(LOGS / "clean.log")])
    out = capsys.readouterr().out
    assert code == 1
    assert "qwen35-spec-radix-mamba" in out and "extra_buffer" in out
    assert "clean.log: no known failure signature" in out
    assert main(["diagnose", "--json", str(LOGS / "roce-network-unreachable.log")]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data[0]["findings"][0]["id"] == "roce-network-unreachable"
    assert main(["diagnose", "/nonexistent/log"]) == 2


def test_one_rank_unhandled_system_error_over_ib_names_a_stale_gid() -> None:
    (finding,) = diagnose((LOGS / "roce-gid-index-stale.log").read_text())
    assert finding.id == "roce-gid-index-stale"
    assert "stale" in finding.cause and "gid_attrs/types" in finding.fix


def test_negative_control_unhandled_system_error_off_ib_is_not_a_gid() -> None:
    # The same NCCL error from the socket transport (no verbs call, no NET/IB): not a GID.
    text = "\n".join(
        [
            "node:1:9 [0] NCCL INFO NET/Socket : Using [0]net1:10.77.0.18<0>",
            "node:1:9 [0] NCCL INFO Using network Socket",
            "node:1:12 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
            "10.77.0.19<43011> failed : Software caused connection abort",
            "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:"
            "3699, unhandled system error (run with NCCL_DEBUG=INFO for details)",
        ]
    )
    assert "roce-gid-index-stale" not in [f.id for f in diagnose(text)]
    # and a GID table with no IPv4 entry at all stays its own finding
    unreachable = (LOGS / "roce-network-unreachable.log").read_text()
    ids = [f.id for f in diagnose(unreachable + "\nunhandled system error\n")]
    assert ids == ["roce-network-unreachable"]
