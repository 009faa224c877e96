"""The switch estimate (sparkrack.planner.switch) and ``sparkrack plan -i``'s switch table.

The estimate against a measured, rate-limited copy between lab containers is
tests/serving/test_fetch_copy.py::test_the_copy_estimate_matches_a_rate_limited_copy.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from sparkrack.cli import main
from sparkrack.planner.switch import (
    CHAIN,
    FAN_OUT,
    LOAD_MBYTE_S,
    RAIL_OVERHEAD_S,
    RELAY_OVERHEAD_S,
    VERDICT_OVERHEAD_S,
    Rates,
    chain_seconds,
    copy_shape,
    fan_out_seconds,
    predict,
    table,
    within,
)

ROOT = Path(__file__).resolve().parents[2]
GB = 10**9


def test_each_phase_follows_its_rate() -> None:
    rates = Rates(rail_mbit_s=100_000, download_mbit_s=1_000, disk_mbyte_s=3_000)
    p = predict(100 * GB, peers=3, rails=1, rates=rates)
    # 100 GB at 1 Gbit/s; hashing bound by the disk (3 GB/s < 20 cores x 1 GB/s).
    assert p.seconds("download") == pytest.approx(800.0)
    assert p.seconds("verify") == pytest.approx(100 / 3)
    # Three copies share the head's rail (24 s on the wire), but a peer's disk writes one copy
    # in 33.3 s: the disk is the limit; then each peer hashes its copy (33.3 s) and answers.
    assert p.seconds("copy rail 0") == pytest.approx(100 / 3 + RAIL_OVERHEAD_S)
    assert p.seconds("peer-verify") == pytest.approx(100 / 3 + VERDICT_OVERHEAD_S)
    # Each rank loads its 25 GB at the loader's 181.6 MB/s (a 3 GB/s disk is faster).
    assert LOAD_MBYTE_S == 181.6
    assert p.seconds("engine load") == pytest.approx(25_000 / 181.6)
    assert p.outage_s == pytest.approx(25_000 / 181.6)  # wait-memory is 0 here
    assert p.seconds("pre-pull") is None
    assert p.total_s == pytest.approx(sum(e.seconds or 0 for e in p.phases))  # one rail
    slow = Rates(rail_mbit_s=10_000, download_mbit_s=1_000, disk_mbyte_s=3_000)
    one = predict(100 * GB, 3, 1, slow).seconds("copy rail 0")
    two = predict(100 * GB, 3, 2, slow)
    # On a slow rail the wire is the limit: two rails halve it, one phase per rail.
    assert one == pytest.approx(240 + RAIL_OVERHEAD_S)
    assert two.seconds("copy rail 1") == pytest.approx(120 + RAIL_OVERHEAD_S)
    assert two.seconds("peer-verify") == p.seconds("peer-verify")  # hashing is per peer, not rail
    assert [e.name for e in two.phases if e.name.startswith("copy")] == [
        "copy rail 0",
        "copy rail 1",
    ]
    # The rails copy at the same time: ready counts their copy once, not once per rail.
    assert two.total_s == pytest.approx(
        sum(e.seconds or 0 for e in two.phases) - (two.seconds("copy rail 1") or 0)
    )
    alone = predict(100 * GB, 0, 1, rates)
    assert alone.seconds("copy") == 0.0 and "no copy" in table(alone)[4]
    assert alone.seconds("peer-verify") is None
    with pytest.raises(ValueError):
        predict(0, 1, 1, rates)


def test_a_chain_streams_once_and_each_further_peer_lags_a_file_or_a_check() -> None:
    # The lab's figures: 2.15 GB in 512 MiB files, rails shaped to 200 Mbit/s (25 MB/s).
    lab = Rates(rail_mbit_s=200, download_mbit_s=1_000, disk_mbyte_s=1_000, cores=2)
    model, shard = 4 * 512 * 2**20, 512 * 2**20
    chain = predict(model, peers=3, rails=2, rates=lab, shape=CHAIN, largest_bytes=shard)
    stream = model / 2 / 25e6
    assert chain.shape == CHAIN
    assert chain.seconds("copy rail 0") == pytest.approx(stream + RAIL_OVERHEAD_S)
    # Each of the 2 further peers holds its bytes one 537 MB file on one 25 MB/s rail (21.5 s)
    # after the one before, longer than that one's check (2.15 GB at 1 GB/s and the answer):
    # the last peer has its bytes after two lags, then takes its manifest and checks (its
    # check stands in for the first peer's, which ran under the lags: peer-verify).
    lag = shard / 25e6 + RELAY_OVERHEAD_S
    check = model / 1e9 + VERDICT_OVERHEAD_S
    assert chain.seconds("relay") == pytest.approx(2 * lag + RAIL_OVERHEAD_S)
    assert chain.seconds("peer-verify") == pytest.approx(check)
    fan = predict(model, peers=3, rails=2, rates=lab)
    assert chain.total_s - fan.total_s == pytest.approx(
        chain_seconds(model, 3, 2, lab, shard) - fan_out_seconds(model, 3, 2, lab)
    )
    assert fan.shape == FAN_OUT and fan.seconds("relay") is None
    assert fan.seconds("copy rail 0") == pytest.approx(3 * stream + RAIL_OVERHEAD_S)
    # Here the chain is faster (86 s against 131 s): the head's rails carry one copy, not three.
    assert copy_shape(model, 3, 2, lab, shard) == CHAIN
    assert chain_seconds(model, 3, 2, lab, shard) < fan_out_seconds(model, 3, 2, lab)
    # A slow verification (1 core at 50 MB/s: 43 s, longer than a file's 21.5 s) sets the pace
    # instead: each further peer waits for the one before to have verified, then checks.
    slow_hash = Rates(200, 1_000, 100, cores=1, verify_mbyte_s_per_core=50)
    slow_check = model / 50e6 + VERDICT_OVERHEAD_S
    verify_lag = predict(model, 3, 2, slow_hash, CHAIN, shard).seconds("relay")
    assert verify_lag == pytest.approx(2 * (RAIL_OVERHEAD_S + slow_check))
    # Negative controls: with the disk the limit (fast rails, the default rates) the fan-out
    # wins, the chain only adding verifications; one peer never chains; a chain of one peer is
    # refused.
    spark = Rates(rail_mbit_s=100_000, download_mbit_s=1_000, disk_mbyte_s=3_000)
    assert copy_shape(100 * GB, 3, 2, spark) == FAN_OUT
    assert copy_shape(model, 1, 2, lab, shard) == FAN_OUT
    with pytest.raises(ValueError, match="two peers"):
        predict(model, 1, 2, lab, CHAIN)
    # One file as large as the model: the chain lags a whole model per hop and loses.
    assert copy_shape(model, 3, 2, lab, model) == FAN_OUT


def test_within_accepts_close_figures_only() -> None:
    assert within(10.0, 9.0, 0.2) and within(10.0, 11.0, 0.2)
    assert not within(5.0, 9.0, 0.2)  # negative control: a prediction off by half fails
    assert within(1.0, 1.4, 0.25, slack_s=0.5) and not within(1.0, 1.4, 0.25)
    assert not within(1.0, 2.0, 0.25, slack_s=0.5)  # the slack is seconds, not a free pass


def _inventory(tmp_path: Path, **extra: object) -> str:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text((ROOT / "inventories/example/hosts.yml").read_text())
    base = yaml.safe_load((ROOT / "inventories/example/group_vars/all.yml").read_text())
    base.update(extra)
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(base))
    return str(inv)


def test_plan_inventory_prints_the_switch_estimate_at_the_inventorys_rates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "-i", _inventory(tmp_path / "a"), "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    (name, sw), *_ = default["switch"].items()
    assert sw["peers"] >= 1 and sw["rails"] == 1
    assert sw["phases"]["pre-pull"] is None and sw["ready_s"] > 0
    assert any("cached" in a for a in sw["assumptions"])
    slow = _inventory(tmp_path / "b", serving_rail_mbit_s=1_000, serving_download_mbit_s=100)
    assert main(["plan", "-i", slow, "--json"]) == 0
    slower = json.loads(capsys.readouterr().out)["switch"][name]
    assert slower["phases"]["download"] == pytest.approx(10 * sw["phases"]["download"])
    assert slower["phases"]["copy rail 0"] > sw["phases"]["copy rail 0"]
    assert main(["plan", "-i", slow]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"switch to {name}: \d+\.\d GB to \d Spark\(s\), 1 rail\(s\) per peer", out)
    assert re.search(r"copy rail 0 +\d+\.\d s +\d peer\(s\) x .* at 1000 Mbit/s", out)
    assert "switch estimate assumptions" in out
    # The default rates (100 Gbit/s rails, a 3 GB/s disk): the disk is the limit, the fan-out
    # is chosen. Rails of 1 Gbit/s: the head's rails would carry every copy, the chain wins
    # and its relay phase shows.
    assert sw["shape"] == "fan-out" and "relay" not in sw["phases"]
    assert sw["peers"] == 3  # the example inventory: a chain is possible
    assert slower["shape"] == "chain" and slower["phases"]["relay"] > 0
    assert re.search(r"per peer, as a chain\n", out)
    assert re.search(r"relay +\d+\.\d s +\d further peer", out)


@pytest.mark.parametrize(
    ("key", "value"),
    [("serving_rail_mbit_s", 0), ("serving_download_mbit_s", "fast"), ("serving_disk_mbyte_s", -1)],
)
def test_a_bad_rate_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: object
) -> None:
    assert main(["plan", "-i", _inventory(tmp_path, **{key: value})]) != 0
    captured = capsys.readouterr()
    assert key in captured.out + captured.err
