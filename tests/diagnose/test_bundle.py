"""The evidence bundle round-trips: what ``watch`` writes, ``diagnose`` reads and names the cause
of; a directory of rank logs (one NCCL log per rank) is read the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.bench.server import spawn
from sparkrack.cli import main
from sparkrack.diagnose import bundle
from sparkrack.errors import SparkrackError

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
HEALTHY_LOG = "[2026-11-23 22:00:01] INFO: Decode batch. #running-req: 1, gen throughput: 14.2\n"


def write_bundle(root: Path, logs: dict[str, str], name: str = "alpha", **kw: object) -> Path:
    identity = bundle.Identity(name, "sparkrack", f"model-{name}", "http://x:30000", tuple(logs))
    verdict = {"verdict": "stalled", "detail": "stalled after 3 tokens and 0.1 s", "tokens": 3}
    return bundle.write(root, identity, verdict, logs, [{"reason": "Killing"}], ["a note"], **kw)


def test_a_bundle_round_trips_through_diagnose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = {
        "alpha-rank0-0": (LOGS / "nccl-socket-transport.log").read_text(),
        "alpha-rank1-0": (LOGS / "illegal-instruction-decode.log").read_text(),
    }
    path = write_bundle(tmp_path, logs)
    back = bundle.read(path)
    assert back.identity == bundle.Identity(
        "alpha", "sparkrack", "model-alpha", "http://x:30000", ("alpha-rank0-0", "alpha-rank1-0")
    )
    assert back.verdict is not None and back.verdict["tokens"] == 3
    assert list(back.logs) == ["logs/alpha-rank0-0.log", "logs/alpha-rank1-0.log"]
    assert back.events == [{"reason": "Killing"}] and back.notes == ["a note"]

    assert main(["diagnose", "--json", str(path)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report[0]["verdict"]["verdict"] == "stalled"
    found = {
        r["log"].rsplit("/", 1)[-1]: [f["id"] for f in r["findings"]]
        for r in report[1:]
        if "log" in r
    }
    assert found == {
        "alpha-rank0-0.log": ["nccl-socket-transport"],
        "alpha-rank1-0.log": ["illegal-instruction-decode"],
    }
    assert main(["diagnose", str(path)]) == 1
    out = capsys.readouterr().out
    assert "deployment alpha (sparkrack) stalled: stalled after 3 tokens" in out


def test_a_bundle_of_clean_logs_names_no_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative control of the round trip: the same bundle with healthy logs."""
    path = write_bundle(tmp_path, {"alpha-rank0-0": HEALTHY_LOG, "alpha-rank1-0": HEALTHY_LOG})
    assert main(["diagnose", "--json", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["findings"] for r in report[1:] if "log" in r] == [[], []]


def test_a_directory_of_rank_logs_is_diagnosed_per_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rank0.log").write_text((LOGS / "roce-network-unreachable.log").read_text())
    (tmp_path / "rank1.log").write_text(HEALTHY_LOG)
    (tmp_path / "notes.md").write_text("not a log")
    assert main(["diagnose", "--json", str(tmp_path)]) == 1
    report = json.loads(capsys.readouterr().out)
    found = {Path(r["log"]).name: [f["id"] for f in r["findings"]] for r in report if "log" in r}
    assert found == {"rank0.log": ["roce-network-unreachable"], "rank1.log": []}


def test_logs_are_capped_and_old_bundles_rotated(tmp_path: Path) -> None:
    big = "".join(f"line {i} " + "x" * 90 + "\n" for i in range(5000))
    paths = [
        write_bundle(tmp_path, {"p": big}, keep=3, max_log_bytes=10_000, now=1_800_000_000 + i)
        for i in range(5)
    ]
    assert bundle.bundles(tmp_path) == paths[-3:]
    text = (paths[-1] / "logs" / "p.log").read_text()
    assert len(text.encode()) <= 10_000 and text.endswith("line 4999 " + "x" * 90 + "\n")
    assert text.startswith("line ")  # cut at a line boundary


def test_rotation_keeps_each_deployments_newest_bundles(tmp_path: Path) -> None:
    """Watchdogs of several deployments share one evidence directory: a deployment that stalls
    often deletes only its own old bundles."""
    other = write_bundle(tmp_path, {"p": HEALTHY_LOG}, name="beta", keep=2, now=1_800_000_000)
    mine = [
        write_bundle(tmp_path, {"p": HEALTHY_LOG}, keep=2, now=1_800_000_001 + i) for i in range(4)
    ]
    assert bundle.bundles(tmp_path) == [other, *mine[-2:]]
    # Negative control: a rotation of beta's own bundles does remove beta's oldest.
    newer = write_bundle(tmp_path, {"p": HEALTHY_LOG}, name="beta", keep=1, now=1_800_000_009)
    assert bundle.bundles(tmp_path) == [*mine[-2:], newer]


def test_a_bundle_pointing_outside_itself_is_refused(tmp_path: Path) -> None:
    path = write_bundle(tmp_path / "b", {"p": HEALTHY_LOG})
    manifest = json.loads((path / bundle.MANIFEST).read_text())
    (tmp_path / "secret.log").write_text("outside")
    manifest["logs"] = ["../../secret.log"]
    (path / bundle.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(SparkrackError, match="not a file inside the bundle"):
        bundle.read(path)
    (path / bundle.MANIFEST).write_text("{not json")
    with pytest.raises(SparkrackError, match="unreadable"):
        bundle.read(path)


def test_watch_writes_a_bundle_on_a_stall_and_none_when_healthy(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "sparkrack", "watch", "--once", "--stall-after", "1.5"]
    env = {**os.environ, "OPENAI_API_KEY": "sk-sentinel-4711"}
    keyed = ["--api-key-env", "OPENAI_API_KEY"]
    with spawn(["--rate", "100", *keyed], env=env) as url:
        ok = subprocess.run(
            [*cmd, "--url", url, "--evidence", str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
        )
    assert ok.returncode == 0 and bundle.bundles(tmp_path) == [], ok.stdout
    with spawn(["--rate", "100", "--stall-after", "2", *keyed], env=env) as url:
        sick = subprocess.run(
            [*cmd, "--url", url, "--evidence", str(tmp_path), "--name", "alpha"],
            env=env,
            capture_output=True,
            text=True,
        )
    assert sick.returncode == 1, sick.stdout + sick.stderr
    [path] = bundle.bundles(tmp_path)
    assert f"evidence {path}" in sick.stdout
    back = bundle.read(path)
    assert back.verdict is not None and back.verdict["verdict"] == "stalled"
    assert back.verdict["tokens"] == 2 and back.identity is not None
    assert back.identity.url == url
    assert any("no cluster access" in n for n in back.notes)
    assert all(b"sk-sentinel-4711" not in f.read_bytes() for f in path.rglob("*") if f.is_file())
    shown = subprocess.run(
        [sys.executable, "-m", "sparkrack", "diagnose", str(path)], capture_output=True, text=True
    )
    assert shown.returncode == 0 and "stalled after 2 tokens" in shown.stdout


PLANTED = "sk-planted-" + "5" * 24
PLANTED_ADMIN = "adm-planted-" + "6" * 24
# Every shape a key reaches a log in: SGLang's start-up line (entrypoints/engine.py logs
# f"{server_args=}"), an HTTP client's header, an argv word, an environment dump.
LEAKY_LOG = "\n".join(
    [
        "[2026-11-26 08:00:00] server_args=ServerArgs(model_path='nvidia/GLM-4.7-NVFP4', "
        f"api_key='{PLANTED}', admin_api_key='{PLANTED_ADMIN}', tp_size=4)",
        f"INFO: POST /v1/chat/completions Authorization: Bearer {PLANTED}",
        f"cmdline: python3 -m sglang.launch_server --api-key {PLANTED} --admin-api-key "
        f"{PLANTED_ADMIN}",
        f"SPARKRACK_ENGINE_KEY={PLANTED}",
        f"vllm serve m --api_key {PLANTED} --port 8000",
        f"launch --admin-api-key \\\n    {PLANTED_ADMIN}",
        f"api-key: {PLANTED}",
        f"gateway apiKey: {PLANTED}",
        f"api_key = {PLANTED}",
    ]
)


def test_a_planted_key_is_in_no_file_of_a_bundle_nor_its_diagnosis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    identity = bundle.Identity("alpha", "sparkrack", "m", "http://x:30000", ("alpha-rank0-0",))
    verdict = {"verdict": "stalled", "detail": f"500: api_key='{PLANTED}'"}
    events = [{"reason": "BackOff", "message": f"--admin-api-key {PLANTED_ADMIN}"}]
    path = bundle.write(
        tmp_path, identity, verdict, {"alpha-rank0-0": LEAKY_LOG}, events, [LEAKY_LOG]
    )
    files = [f for f in path.rglob("*") if f.is_file()]
    assert files
    for f in files:
        data = f.read_bytes()
        assert PLANTED.encode() not in data and PLANTED_ADMIN.encode() not in data, f
    assert b"server_args=ServerArgs(model_path=" in b"".join(f.read_bytes() for f in files)
    for argv in (["diagnose", str(path)], ["diagnose", "--json", str(path)]):
        main(argv)
        out = capsys.readouterr().out
        assert PLANTED not in out and PLANTED_ADMIN not in out
    # Negative control: the planted text itself carries both keys in every line shape.
    assert LEAKY_LOG.count(PLANTED) == 8 and LEAKY_LOG.count(PLANTED_ADMIN) == 3
