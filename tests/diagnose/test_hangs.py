"""NCCL hangs named from real two-GPU captures (tests/data/nccl/captured/hangs): who waited, who
is silent, who died, a mismatch; the healthy runs get no hang finding; flight-recorder dumps are
read without running anything in them; a bundle built from the captures round-trips through
``diagnose`` with no planted key anywhere."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from sparkrack.cli import main
from sparkrack.diagnose import bundle, flightrecorder, hangs
from sparkrack.diagnose.redact import MASK, redact
from sparkrack.diagnose.signatures import diagnose, load_signatures
from sparkrack.errors import SparkrackError

HANGS = Path(__file__).resolve().parents[1] / "data" / "nccl" / "captured" / "hangs"
HANG_IDS = {"nccl-hang-silent-rank", "nccl-hang-dead-rank", "nccl-collective-mismatch"}
HANG_SIGNATURES = {"nccl-collective-timeout", "nccl-dump-signal-from-peer"}

# scenario -> (verdict, waiting ranks, silent ranks, dead ranks, rank -> SeqNum it timed out in)
EXPECTED = {
    "rank1_stops": ("nccl-hang-silent-rank", (0,), (1,), (), {0: 6}),
    "socket_transport_rank1_stops": ("nccl-hang-silent-rank", (0,), (1,), (), {0: 6}),
    "rank1_killed": ("nccl-hang-dead-rank", (0,), (), (1,), {0: 6}),
    "rank1_oom": ("nccl-hang-dead-rank", (0,), (), (1,), {0: 6}),
    "size_mismatch": ("nccl-collective-mismatch", (0, 1), (), (), {0: 13, 1: 8}),
    "op_mismatch": ("nccl-collective-mismatch", (0, 1), (), (), {0: 9, 1: 13}),
}
HEALTHY = ("healthy", "socket_transport", "bad_socket_ifname")
# scenario -> diagnose's exit status: 1 when anything is named (a hang, or a signature in a rank's
# log: the bootstrap interface error, or channels over the socket transport), 0 for none.
EXIT = {**dict.fromkeys(EXPECTED, 1), "healthy": 0, "socket_transport": 1, "bad_socket_ifname": 1}
# scenario -> dead rank -> the signature its own log ends in (none named: the rank was SIGKILLed)
CAUSES = {"rank1_oom": {1: "cuda-out-of-memory"}}


def logs_of(scenario: str) -> dict[str, str]:
    return {p.name: p.read_text(errors="replace") for p in sorted((HANGS / scenario).glob("*.log"))}


def test_every_captured_scenario_is_covered() -> None:
    folders = {p.name for p in HANGS.iterdir() if p.is_dir()}
    assert folders == set(EXPECTED) | set(HEALTHY)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_hang_is_named_with_its_ranks(scenario: str) -> None:
    verdict, waiting, silent, dead, seqs = EXPECTED[scenario]
    found = hangs.analyse(logs_of(scenario))
    assert [f.id for f in found] == [verdict]
    finding = found[0]
    assert (finding.waiting, finding.silent, finding.dead) == (waiting, silent, dead)
    assert finding.causes == CAUSES.get(scenario, {})
    assert {
        r: int(t.split("SeqNum=")[1].split(",")[0]) for r, t in finding.timeouts.items()
    } == seqs
    assert all(f"ALLREDUCE SeqNum={s}" in finding.detail for s in seqs.values())
    assert "timeout 30000 ms" in finding.detail
    if verdict == "nccl-collective-mismatch":
        assert "SeqNums" in finding.detail and "differ" in finding.detail


@pytest.mark.parametrize("scenario", HEALTHY)
def test_runs_without_a_hang_get_no_hang_finding(scenario: str) -> None:
    assert hangs.analyse(logs_of(scenario)) == []
    for text in logs_of(scenario).values():
        assert not {f.id for f in diagnose(text)} & HANG_SIGNATURES


def test_the_bad_interface_is_named_with_its_fix() -> None:
    ids = {f.id for f in diagnose(logs_of("bad_socket_ifname")["rank0.log"])}
    assert "nccl-bootstrap-no-interface" in ids
    assert all(
        "nccl-bootstrap-no-interface" not in {f.id for f in diagnose(t)}
        for s in ("healthy", "socket_transport")
        for t in logs_of(s).values()
    )


def test_the_silent_rank_is_told_from_the_dead_one_by_its_answer_to_the_dump_signal() -> None:
    """Negative control of the silent/dead split: rank 1's answer removed, it reads as dead."""
    logs = logs_of("rank1_stops")
    logs["rank1.log"] = "\n".join(
        line for line in logs["rank1.log"].splitlines() if "Received a dump signal" not in line
    )
    assert [f.id for f in hangs.analyse(logs)] == ["nccl-hang-dead-rank"]


def test_the_dead_rank_is_named_with_the_error_its_own_log_ends_in() -> None:
    found = hangs.analyse(logs_of("rank1_oom"))
    assert (
        "rank 1 is dead: its log ends in torch.OutOfMemoryError (line 84, cuda-out-of-memory)"
        in (found[0].detail)
    )
    killed = hangs.analyse(logs_of("rank1_killed"))
    assert killed[0].causes == {} and "its log ends with no timeout" in killed[0].detail


def test_only_a_process_ending_signature_is_a_dead_ranks_cause() -> None:
    """Negative controls: without its OOM line rank 1's log names no cause, although another
    signature (nccl-socket-transport, not ``ends_rank``, from a channel line of the socket
    capture put in it) still matches in it; and the cause is read from the data, not a pattern
    of its own."""
    logs = logs_of("rank1_oom")
    channel = next(
        line
        for line in logs_of("socket_transport")["rank1.log"].splitlines()
        if "via NET/Socket/" in line
    )
    kept = [line for line in logs["rank1.log"].splitlines() if "OutOfMemoryError" not in line]
    logs["rank1.log"] = "\n".join([channel, *kept])
    assert "nccl-socket-transport" in {f.id for f in diagnose(logs["rank1.log"])}
    found = hangs.analyse(logs)
    assert [(f.id, f.dead, f.causes) for f in found] == [("nccl-hang-dead-rank", (1,), {})]
    assert "torch.OutOfMemoryError" not in found[0].detail
    ends = {s.id for s in load_signatures() if s.ends_rank}
    assert "cuda-out-of-memory" in ends and "nccl-socket-transport" not in ends


def test_the_out_of_memory_signature_is_held_by_the_capture() -> None:
    """cuda-out-of-memory's source is the capture: rank 1's real log matches, rank 0's (same
    run, no OOM) does not."""
    logs = logs_of("rank1_oom")
    oom = [f for f in diagnose(logs["rank1.log"]) if f.id == "cuda-out-of-memory"]
    assert [f.line for f in oom] == [84]
    assert "rank1_oom" in oom[0].seed
    assert "cuda-out-of-memory" not in {f.id for f in diagnose(logs["rank0.log"])}


def test_the_same_collective_on_every_rank_is_not_called_a_different_one() -> None:
    logs = logs_of("rank1_stops")
    timeout = next(line for line in logs["rank0.log"].splitlines() if "Watchdog caught" in line)
    one = timeout.replace("[rank0]", "[rank1]").replace("[Rank 0]", "[Rank 1]")
    found = hangs.analyse({"rank0.log": timeout, "rank1.log": one})
    assert [f.id for f in found] == ["nccl-collective-mismatch"]
    assert "same collective" in found[0].detail and "differ" not in found[0].detail


def test_one_log_names_the_timeout_but_no_peer() -> None:
    text = logs_of("rank1_stops")["rank0.log"]
    found = [f for f in diagnose(text) if f.id == "nccl-collective-timeout"]
    assert found and "SeqNum=6, OpType=ALLREDUCE" in found[0].evidence
    assert "Timeout(ms)=30000" in found[0].evidence
    assert hangs.analyse({"rank0.log": text}) == []


# --- flight recorder ------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_pickle_and_json_dumps_read_the_same(scenario: str) -> None:
    for pickled in sorted((HANGS / scenario).glob("fr_dump_rank_?")):
        rank = int(pickled.name[-1])
        a = flightrecorder.summary(flightrecorder.load(pickled.read_bytes()), rank)
        b = flightrecorder.summary(flightrecorder.load(pickled.with_suffix(".json").read_bytes()))
        assert a.last_enqueued == b.last_enqueued and a.pending == b.pending


def test_the_silent_ranks_dump_shows_it_never_enqueued_the_collective() -> None:
    dumps = {
        r: flightrecorder.summary(
            flightrecorder.load((HANGS / "rank1_stops" / f"fr_dump_rank_{r}").read_bytes()), r
        )
        for r in (0, 1)
    }
    assert (dumps[0].last_enqueued, dumps[0].last_completed) == (6, 5)
    assert [p.seq for p in dumps[0].pending] == [6]
    assert (dumps[1].last_enqueued, dumps[1].pending) == (5, ())


class _Boom:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_pickle_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = pickle.dumps({"entries": [], "x": _Boom(marker)}, protocol=4)
    # proof that the payload runs under a plain pickle.load (the negative control)
    pickle.loads(evil)
    assert marker.exists()
    marker.unlink()
    with pytest.raises(SparkrackError, match="names the global .*system"):
        flightrecorder.load(evil, "fr_dump_rank_1")
    assert not marker.exists()
    for bad in (b"not a dump", b"[1, 2]", pickle.dumps([1, 2]), b"\x80\x04garbage"):
        with pytest.raises(SparkrackError, match="flight-recorder"):
            flightrecorder.load(bad)


def _shared_bomb(levels: int) -> list[object]:
    """A list whose two items are the same list, ``levels`` deep: a few hundred bytes of pickle
    (its memo shares every level) that a walk of the loaded value visits 2**levels times."""
    value: list[object] = ["x"]
    for _ in range(levels):
        value = [value, value]
    return value


def test_a_dump_too_big_or_deep_once_loaded_is_refused() -> None:
    shared = pickle.dumps({"entries": [], "pg_config": _shared_bomb(60)}, protocol=2)
    assert len(shared) < 1000
    with pytest.raises(SparkrackError, match="more than .* items"):
        flightrecorder.load(shared, "fr_dump_rank_0")
    with pytest.raises(SparkrackError, match="JSON nested too deep"):
        flightrecorder.load(b"[" * 200_000 + b"]" * 200_000, "fr_dump_rank_0")
    nested = b'{"entries": [], "x": ' + b"[" * 100 + b"]" * 100 + b"}"
    for deep in (nested, pickle.dumps({"entries": [], "x": _deep(100)})):
        with pytest.raises(SparkrackError, match="nested more than"):
            flightrecorder.load(deep, "fr_dump_rank_0")
    # Negative control: the same shapes, small, load.
    small = {"entries": [], "pg_config": _shared_bomb(4), "x": _deep(20)}
    assert flightrecorder.load(pickle.dumps(small, protocol=2))["pg_config"] == small["pg_config"]


def _deep(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


def test_diagnose_reports_a_refused_dump_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    for name in ("rank0.log", "rank1.log"):
        (tmp_path / name).write_text(logs_of("rank1_stops")[name])
    (tmp_path / "fr_dump_rank_1").write_bytes(pickle.dumps({"entries": [_Boom(marker)]}))
    assert main(["diagnose", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "flight-recorder dump not read" in out and "names the global" in out
    assert "nccl-hang-silent-rank" in out and not marker.exists()


# --- secrets and the bundle round trip ------------------------------------------------------

SECRETS = {
    "engine": "sk-engine-4f1b9c7e",
    "admin": "adm-7c1d0e22a9",
    "gateway": "sk-gateway-91aa3f",
    "hf": "hf_QwErTyUiOpAsDfGhJkL123",
    "argv": "argvkey-5521ab",
}
PLANTED = "\n".join(
    (
        f"[2026-11-26 04:19:00] server_args=ServerArgs(model_path='m', api_key='{SECRETS['engine']}', "
        f"admin_api_key='{SECRETS['admin']}', port=30000, hf_token=None)",
        f"POST /v1/chat/completions headers={{'Authorization': 'Bearer {SECRETS['gateway']}'}}",
        f"Authorization: Bearer {SECRETS['gateway']}",
        f"python3 -m sglang.launch_server --api-key {SECRETS['argv']} --port 30000",
        f"HF_TOKEN={SECRETS['hf']} downloading",
    )
)


def test_redact_removes_every_planted_key() -> None:
    out = redact(PLANTED)
    assert not [s for s in SECRETS.values() if s in out]
    assert out.count(MASK) >= len(SECRETS) and "port=30000" in out and "hf_token=None" in out
    assert (
        redact("--port 30000 --tp 2 NCCL_SOCKET_IFNAME=net1")
        == "--port 30000 --tp 2 NCCL_SOCKET_IFNAME=net1"
    )


def _everything_in(path: Path) -> str:
    return "\n".join(
        p.read_bytes().decode("utf-8", "replace") for p in path.rglob("*") if p.is_file()
    )


def test_a_bundle_of_the_captures_round_trips_and_names_the_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = logs_of("rank1_stops")
    ranks = {
        "alpha-rank0-0": PLANTED + "\n" + logs["rank0.log"],
        "alpha-rank1-0": logs["rank1.log"] + "\n" + PLANTED,
    }
    dumps = {r: (HANGS / "rank1_stops" / f"fr_dump_rank_{r}").read_bytes() for r in (0, 1)}
    verdict = {"verdict": "stalled", "detail": f"Authorization: Bearer {SECRETS['gateway']}"}
    path = bundle.write(
        tmp_path / "evidence",
        bundle.Identity("alpha", "sparkrack", "model-alpha", "http://x:30000", tuple(ranks)),
        verdict,
        ranks,
        [{"message": f"--api-key {SECRETS['argv']}"}],
        [f"note {SECRETS['hf']}"],
        dumps=dumps,
    )
    assert sorted(p.name for p in (path / bundle.DUMPS_DIR).iterdir()) == [
        "fr_dump_rank_0.json",
        "fr_dump_rank_1.json",
    ]
    written = _everything_in(path)
    assert not [s for s in SECRETS.values() if s in written]
    assert main(["diagnose", str(path)]) == 1
    text = capsys.readouterr().out
    assert main(["diagnose", "--json", str(path)]) == 1
    report = json.loads(capsys.readouterr().out)
    group = next(r for r in report if "hangs" in r)
    assert [(h["id"], h["waiting"], h["silent"]) for h in group["hangs"]] == [
        ("nccl-hang-silent-rank", [0], [1])
    ]
    assert [d["last_enqueued"] for d in group["flight_recorder"]] == [6, 5]
    assert "rank 1 is silent" in text and "rank 0 timed out waiting in ALLREDUCE SeqNum=6" in text
    for out in (text, json.dumps(report)):
        assert not [s for s in SECRETS.values() if s in out]


def test_diagnose_output_of_a_planted_log_holds_no_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The finding's evidence line is the log line: a key on it must not come out."""
    log = tmp_path / "rank0.log"
    log.write_text(
        f"torch.OutOfMemoryError: CUDA out of memory api_key='{SECRETS['engine']}' "
        f"Authorization: Bearer {SECRETS['gateway']} {SECRETS['hf']}\n"
    )
    for argv in (["diagnose", str(log)], ["diagnose", "--json", str(log)]):
        assert main(argv) == 1
        out = capsys.readouterr().out
        assert "cuda-out-of-memory" in out
        assert not [s for s in SECRETS.values() if s in out]


def test_a_pickle_dump_that_names_globals_is_not_written_into_a_bundle(tmp_path: Path) -> None:
    evil = pickle.dumps({"entries": [_Boom(tmp_path / "ran")]})
    with pytest.raises(SparkrackError, match="names the global"):
        bundle.write(tmp_path / "ev", bundle.Identity("a"), {}, {"p": "x"}, dumps={0: evil})
    assert not (tmp_path / "ran").exists() and not (tmp_path / "ev").exists()


NEAR_MISSES = {
    "nccl-collective-timeout": "[Rank 0] ProcessGroupNCCL initialization options: TIMEOUT(ms): 30000",
    "nccl-dump-signal-from-peer": (
        "Received a dump signal due to a collective timeout from this local rank and we will "
        "try our best to dump the debug info. Last enqueued NCCL work: 6, last completed NCCL "
        "work: 5."
    ),
    "nccl-bootstrap-no-interface": "NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>",
    "cuda-out-of-memory": "Load weight end. avail mem=9.81 GB, mem usage=101.37 GB.",
    "nvrm-no-memory": "NVRM: nvAssertOkFailedNoLog: Assertion failed: [NV_ERR_INVALID_STATE]",
    "sglang-loading-barrier": "[TP0] Load weight end. type=NemotronHForCausalLM, dtype=bfloat16",
}


@pytest.mark.parametrize("sig_id", sorted(NEAR_MISSES))
def test_each_new_signature_has_a_negative_control(sig_id: str) -> None:
    excerpt = (Path(__file__).resolve().parents[1] / "data" / "logs" / f"{sig_id}.log").read_text()
    assert sig_id in {f.id for f in diagnose(excerpt)}
    assert diagnose(NEAR_MISSES[sig_id]) == []


@pytest.mark.parametrize(
    "line",
    [
        # PyTorch's C10_CUDA_CHECK around a runtime call (context creation, cuBLAS workspace)
        "torch.AcceleratorError: CUDA error: out of memory",
        "RuntimeError: CUDA error: out of memory",
        # NCCL's CUDACHECK/CUCHECK: WARN("Cuda failure %d '%s'") with the error's string
        "vm:12:12 [1] include/alloc.h:104 NCCL WARN Cuda failure 2 'out of memory'",
        "vm:12:12 [1] NCCL WARN Cuda failure 'out of memory'",
    ],
)
def test_cuda_out_of_memory_from_the_runtime_and_nccl_is_named(line: str) -> None:
    assert [f.id for f in diagnose(line)] == ["cuda-out-of-memory"]
    # Negative controls: another CUDA error and host memory words name nothing.
    other = line.replace("out of memory", "invalid argument")
    assert diagnose(other) == []


def test_the_python_api_redacts_its_evidence_for_every_caller() -> None:
    """The serve play's filter and the matrix records call diagnose() directly."""
    line = f"torch.OutOfMemoryError: CUDA out of memory --api-key {SECRETS['argv']} {SECRETS['hf']}"
    finding = diagnose(line)[0]
    assert finding.id == "cuda-out-of-memory"
    assert not [s for s in SECRETS.values() if s in str(finding)]


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_the_exit_status_says_whether_anything_was_named(
    json_flag: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The healthy capture exits 0; negative control: the same two logs with rank 1's captured
    OOM line put in exit 1, as does the same log given alone, and a log naming nothing given
    beside it does not bring the status back to 0."""
    assert main(["diagnose", *json_flag, str(HANGS / "healthy")]) == 0
    oom = next(
        line
        for line in logs_of("rank1_oom")["rank1.log"].splitlines()
        if "torch.OutOfMemoryError" in line
    )
    for name, text in logs_of("healthy").items():
        (tmp_path / name).write_text(text + (oom + "\n" if name == "rank1.log" else ""))
    assert main(["diagnose", *json_flag, str(tmp_path)]) == 1
    assert main(["diagnose", *json_flag, str(tmp_path / "rank1.log")]) == 1
    assert main(["diagnose", *json_flag, str(HANGS / "healthy" / "rank0.log")]) == 0
    argv = [str(HANGS / "healthy" / "rank0.log"), str(tmp_path / "rank1.log")]
    assert main(["diagnose", *json_flag, *argv]) == 1
    capsys.readouterr()


@pytest.mark.parametrize("scenario", sorted(EXPECTED) + list(HEALTHY))
def test_the_cli_names_each_captured_folder(
    scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folders as captured: rank logs, pickled dumps and their JSON conversions side by side."""
    assert main(["diagnose", "--json", str(HANGS / scenario)]) == EXIT[scenario]
    report = json.loads(capsys.readouterr().out)
    group = next(r for r in report if "hangs" in r)
    assert group["refused_dumps"] == []
    ids = [h["id"] for h in group["hangs"]]
    if scenario in HEALTHY:
        assert ids == [] and group["flight_recorder"] == []
        return
    verdict, waiting, silent, dead, _ = EXPECTED[scenario]
    assert [(h["id"], h["waiting"], h["silent"], h["dead"]) for h in group["hangs"]] == [
        (verdict, list(waiting), list(silent), list(dead))
    ]
    assert {int(r): c for r, c in group["hangs"][0]["causes"].items()} == CAUSES.get(scenario, {})
    dumped = sorted(int(p.name[-1]) for p in (HANGS / scenario).glob("fr_dump_rank_?"))
    assert [d["rank"] for d in group["flight_recorder"]] == dumped


def test_an_oversized_dump_is_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rank0.log").write_text("x\n")
    with (tmp_path / "fr_dump_rank_0").open("wb") as f:
        f.truncate(flightrecorder.MAX_DUMP_BYTES + 1)  # sparse: no memory used
    evidence = bundle.read(tmp_path)
    assert evidence.dumps == {} and "larger than" in evidence.refused[0]


def test_a_rank_whose_log_names_no_rank_is_known_by_its_pod() -> None:
    """A dead rank's log may end before PyTorch names its rank: the bundle's file name
    (``<pod>_<container>.log``, pod ``<headless>-r<rank>-0``) tells it; order does not."""
    logs = logs_of("rank1_killed")
    bare = "\n".join(line for line in logs["rank1.log"].splitlines() if "ank" not in line)
    found = hangs.analyse(
        {
            "logs/sparkrack-alpha-r1-0_sglang.log": bare,
            "logs/sparkrack-alpha-r0-0_sglang.log": logs["rank0.log"],
        }
    )
    assert [(f.id, f.waiting, f.dead) for f in found] == [("nccl-hang-dead-rank", (0,), (1,))]


# --- the owner's collection: dumps copied from the Sparks into the watchdog's bundle -----------


def _watchdog_bundle(root: Path, scenario: str) -> Path:
    """A bundle as the watchdog writes it: rank logs (with planted keys), no dumps (those stay on
    the Sparks' hostPath)."""
    logs = logs_of(scenario)
    ranks = {
        "alpha-rank0-0": PLANTED + "\n" + logs["rank0.log"],
        "alpha-rank1-0": logs["rank1.log"] + "\n" + PLANTED,
    }
    return bundle.write(
        root,
        bundle.Identity("alpha", "sparkrack", "model-alpha", "http://x:30000", tuple(ranks)),
        {"verdict": "stalled", "detail": f"Authorization: Bearer {SECRETS['gateway']}"},
        ranks,
        [{"message": f"--api-key {SECRETS['argv']}"}],
        [f"note {SECRETS['hf']}"],
    )


def _copied_from_the_sparks(tmp_path: Path, scenario: str) -> Path:
    """The dumps as the owner copies them off each Spark: rank 1's pickle as PyTorch wrote it,
    rank 0's JSON form with keys planted where a dump carries text (its process-group config)."""
    folder = tmp_path / "from-sparks"
    folder.mkdir()
    (folder / "fr_dump_rank_1").write_bytes((HANGS / scenario / "fr_dump_rank_1").read_bytes())
    dump = json.loads((HANGS / scenario / "fr_dump_rank_0.json").read_text())
    dump["pg_config"] = {"planted": PLANTED, "api_key": SECRETS["engine"]}
    (folder / "fr_dump_rank_0.json").write_text(json.dumps(dump))
    assert all(s in _everything_in(folder) for s in SECRETS.values())
    return folder


def test_dumps_added_to_a_watchdog_bundle_round_trip_and_name_the_silent_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _watchdog_bundle(tmp_path / "evidence", "rank1_stops")
    assert not (path / bundle.DUMPS_DIR).exists()
    folder = _copied_from_the_sparks(tmp_path, "rank1_stops")
    assert main(["diagnose", "--add-dumps", str(folder), str(path)]) == 1
    text = capsys.readouterr().out
    assert sorted(p.name for p in (path / bundle.DUMPS_DIR).iterdir()) == [
        "fr_dump_rank_0.json",
        "fr_dump_rank_1.json",
    ]
    assert not [s for s in SECRETS.values() if s in _everything_in(path)]
    assert "added from from-sparks" in json.loads((path / bundle.MANIFEST).read_text())["notes"][-1]
    assert main(["diagnose", "--json", str(path)]) == 1
    report = json.loads(capsys.readouterr().out)
    group = next(r for r in report if "hangs" in r)
    assert [(h["id"], h["waiting"], h["silent"], h["dead"]) for h in group["hangs"]] == [
        ("nccl-hang-silent-rank", [0], [1], [])
    ]
    assert [(d["rank"], d["last_enqueued"]) for d in group["flight_recorder"]] == [(0, 6), (1, 5)]
    assert "rank 1 is silent" in text and "ALLREDUCE SeqNum=6" in text
    for out in (text, json.dumps(report)):
        assert not [s for s in SECRETS.values() if s in out]


def test_without_the_dumps_the_bundle_still_names_the_hang_but_shows_no_recorder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative control of the collection: the watchdog's bundle alone has no dump to show."""
    path = _watchdog_bundle(tmp_path / "evidence", "rank1_stops")
    assert main(["diagnose", "--json", str(path)]) == 1
    group = next(r for r in json.loads(capsys.readouterr().out) if "hangs" in r)
    assert group["flight_recorder"] == [] and group["hangs"][0]["silent"] == [1]


def test_the_dead_ranks_bundle_gets_the_one_dump_there_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _watchdog_bundle(tmp_path / "evidence", "rank1_killed")
    folder = tmp_path / "from-sparks"
    folder.mkdir()
    (folder / "fr_dump_rank_0").write_bytes(
        (HANGS / "rank1_killed" / "fr_dump_rank_0").read_bytes()
    )
    assert main(["diagnose", "--add-dumps", str(folder), "--json", str(path)]) == 1
    group = next(r for r in json.loads(capsys.readouterr().out) if "hangs" in r)
    assert [(h["id"], h["dead"]) for h in group["hangs"]] == [("nccl-hang-dead-rank", [1])]
    assert [d["rank"] for d in group["flight_recorder"]] == [0]


def test_a_refused_dump_leaves_the_bundle_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _watchdog_bundle(tmp_path / "evidence", "rank1_stops")
    before = _everything_in(path)
    folder = tmp_path / "from-sparks"
    folder.mkdir()
    (folder / "fr_dump_rank_0").write_bytes((HANGS / "rank1_stops" / "fr_dump_rank_0").read_bytes())
    (folder / "fr_dump_rank_1").write_bytes(pickle.dumps({"entries": [_Boom(tmp_path / "ran")]}))
    assert main(["diagnose", "--add-dumps", str(folder), str(path)]) != 0
    assert "names the global" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()
    assert _everything_in(path) == before and not (path / bundle.DUMPS_DIR).exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["diagnose", "--add-dumps", str(empty), str(path)]) != 0
    assert main(["diagnose", "--add-dumps", str(folder), str(HANGS / "healthy")]) != 0
