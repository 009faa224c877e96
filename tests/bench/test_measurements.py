"""docs/dev/measurements.md is what the benchmarks' records make, and every record names the
benchmark that made it and the load it ran under (sparkrack/bench/measurements.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.bench import measurements
from sparkrack.errors import SparkrackError

ROOT = measurements.ROOT


def _records() -> dict[str, dict[str, object]]:
    return {
        p.name: json.loads(p.read_text())
        for p in sorted((ROOT / measurements.RECORDS).glob("*.json"))
    }


def test_page_is_what_the_records_make() -> None:
    page = (ROOT / measurements.PAGE).read_text()
    assert measurements.stale_lines(page, measurements.render(measurements.load_records())) == []
    assert measurements.GENERATED in page.splitlines()


def test_a_hand_edited_line_is_found(tmp_path: Path) -> None:
    """Negative control: a figure edited by hand on the page, and a line added to it, are both
    named; ``--check`` exits 1 on that page and 0 on the page the records make."""
    page = measurements.render(measurements.load_records())
    edited = page.replace("| 0.61 % |", "| 0.16 % |") + "\nMeasured by hand: 9 s.\n"
    assert measurements.stale_lines(edited, page) == [
        "-| n=16 | 0.61 % | - |",
        "+| n=16 | 0.16 % | - |",
        "+",
        "+Measured by hand: 9 s.",
    ]
    (tmp_path / measurements.RECORDS).mkdir(parents=True)
    for name, data in _records().items():
        (tmp_path / measurements.RECORDS / name).write_text(json.dumps(data))
    (tmp_path / measurements.PAGE).write_text(edited)
    assert measurements.main(["--check", "--root", str(tmp_path)]) == 1
    assert measurements.main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / measurements.PAGE).read_text() == page
    assert measurements.main(["--check", "--root", str(tmp_path)]) == 0


def test_every_record_names_its_benchmark_and_carries_the_load() -> None:
    records = measurements.load_records()
    assert len(records) >= 10
    page = (ROOT / measurements.PAGE).read_text()
    for name, record in records.items():
        assert (ROOT / record.benchmark).is_file(), name
        assert record.load["cores"] >= 1, name
        if record.imported is None:
            assert len(record.load["before"]) == len(record.load["after"]) == 3, name
        else:
            assert record.load.get("reported"), name
            assert record.imported["from"] and record.imported["measured"], name
        assert f"`{record.benchmark}`: `{record.command}`." in page, name
    # The re-measured records say so, the imported ones say they were not.
    assert page.count("**Imported, not re-measured**") == sum(
        r.imported is not None for r in records.values()
    )


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"load": None}, "load"),
        ({"load": {"cores": 2}}, "load.before"),
        ({"load": {"cores": 2, "reported": "3.8"}}, "load.before"),
        ({"load": {"cores": 0, "before": [1, 1, 1], "after": [1, 1, 1]}}, "load.cores"),
        ({"benchmark": "lab/bench_nothing.py"}, "benchmark"),
        ({"benchmark": None}, "benchmark"),
        ({"section": "Elsewhere"}, "section"),
        ({"figures": []}, "figures"),
        ({"imported": {"from": "a page"}}, "imported"),
        ({"table": {"columns": ["a", "b"], "rows": [["1"]]}}, "table"),
    ],
)
def test_an_incomplete_record_is_refused(change: dict[str, object], key: str) -> None:
    """Negative controls: a record without its load, its benchmark or a section of the page is
    refused with the file and the key named (a key set to None here is left out)."""
    base = {
        "benchmark": "lab/bench_verify.py",
        "section": "Weights: verification",
        "command": ".venv/bin/python lab/bench_verify.py",
        "date": "2026-11-26 11:00 UTC",
        "machine": "a CPU, 2 cores",
        "load": {"cores": 2, "before": [1.0, 0.5, 0.2], "after": [1.2, 0.6, 0.3]},
        "table": {"columns": ["a"], "rows": [["1"]]},
    }
    measurements.parse("x.json", base)
    data = {k: v for k, v in (base | change).items() if v is not None}
    with pytest.raises(SparkrackError) as refused:
        measurements.parse("x.json", data)
    assert f"x.json: {key}:" in str(refused.value)


def test_an_imported_record_needs_the_load_it_was_measured_under() -> None:
    base = json.loads((ROOT / measurements.RECORDS / "bench-rails.json").read_text())
    measurements.parse("bench-rails.json", base)
    with pytest.raises(SparkrackError, match=r"bench-rails.json: load.reported: an imported"):
        measurements.parse("bench-rails.json", base | {"load": {"cores": 2}})


def test_a_benchmark_writes_its_record_and_the_page(tmp_path: Path) -> None:
    """lab/bench_verify.py, run on 2 small files, writes a record that names it and carries the
    load, and a page made from it."""
    run = subprocess.run(
        [sys.executable, "lab/bench_verify.py", "--gb", "0.04", "--dir", str(tmp_path)]
        + ["--root", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    records = measurements.load_records(tmp_path)
    assert list(records) == ["bench-verify.json"]
    record = records["bench-verify.json"]
    assert record.benchmark == "lab/bench_verify.py"
    assert record.imported is None
    assert record.load["cores"] >= 1 and len(record.load["before"]) == 3
    assert [row[0] for row in record.table["rows"]][0] == "1"
    page = (tmp_path / measurements.PAGE).read_text()
    assert page == measurements.render(records)
    assert "`lab/bench_verify.py`: `.venv/bin/python lab/bench_verify.py --gb 0.04`." in page


def test_the_rails_benchmark_rows_make_a_record() -> None:
    """lab/bench_rails.py needs the container lab; its rows, from what one case measures, make
    a record the reader accepts (a case without an estimate shows '-')."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_rails", ROOT / "lab" / "bench_rails.py")
    assert spec is not None and spec.loader is not None
    rails = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rails)
    got = {"wall_s": 136.4, "copy_s": 130.0, "aggregate_wall_R": 1.89, "estimate_s": None}
    row = rails.case_row("chain", got | {"load": (0.54, 0.4, 0.3)})
    assert row == [
        "chain, each hop after the last peer marked (store and forward)",
        "136.4 s (copy streams 130.0 s)",
        "1.89 x R",
        "-",
        "0.54 0.40 0.30",
    ]
    before = measurements.Load((0.5, 0.4, 0.3), 2)
    columns = ["copy", "every peer verified and marked", "aggregate", "estimate", "load"]
    record = measurements.measured(
        "lab/bench_rails.py", "Weights: push over the rails", "x", before, columns, [row]
    )
    parsed = measurements.parse("bench-rails.json", json.loads(record.to_json()))
    assert "| 1.89 x R | - | 0.54 0.40 0.30 |" in measurements.render({"r": parsed})
