"""The lab's measurements: one JSON record per benchmark run, and the page written from them.

A benchmark (``lab/bench_*.py``, ``tests/*_benchmark.py``, ``make lab`` and ``make molecule``
through ``lab/lab.py``) reads the machine's load before its run (:func:`load_now`), then hands
its figures to :func:`measured` (which adds the load after it) and :func:`write`, which stores
the record under ``docs/dev/measurements/`` and rewrites ``docs/dev/measurements.md`` from every
record there. Each record names the benchmark that made it, the command, the date, the machine
and its load. A record ``imported`` from the earlier
hand-written page says where and when it was measured and that it was not re-measured.

    python -m sparkrack.bench.measurements [--check]

rewrites the page from the records (``--check``: exit 1 and name the lines when the page
differs). ``tests/bench/test_measurements.py`` keeps the page equal to the records.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrack.errors import Problem, SparkrackError

ROOT = Path(__file__).resolve().parents[2]
RECORDS = Path("docs/dev/measurements")
PAGE = Path("docs/dev/measurements.md")
GENERATED = (
    "<!-- written by `python -m sparkrack.bench.measurements` from docs/dev/measurements/*.json;"
    " rerun the benchmark, not an edit of this page -->"
)

# The page's sections in order, each with what its figures are. A record names one of them.
SECTIONS: dict[str, str] = {
    "The lab": (
        "The lab's own costs: building the control plane, `make lab`, the control plane's start "
        "and memory, a converge with the API, the rank rehearsal, `molecule test` and CI."
    ),
    "Weights: verification": (
        "The fetch step's verification rate (what it does: [switch](../guide/switch.md)). GB "
        "hashed per CPU-second is what one core does whatever else shares the machine; the wall "
        "rate depends on that load."
    ),
    "Weights: push over the rails": (
        "The push over both rails, fan-out and chain (the shapes: [switch](../guide/switch.md)), "
        "each rail shaped to the same rate R. The estimate is `sparkrack.planner.switch` at R "
        "with the shard size known."
    ),
    "The copy estimate against a real copy": (
        "The switch's copy estimate against a real push (the check itself is described in "
        "[switch](../guide/switch.md))."
    ),
    "Benchmark client accuracy": (
        "The built-in HTTP/SSE test server (`sparkrack bench-server`) emits tokens at a known "
        "rate and logs the rate it delivered to each stream (`--send-log`); the client must "
        "report the delivered rate. `make test` fails above 1 %."
    ),
    "The watchdog": (
        "What `sparkrack watch` costs, and how fast the lab's stand-in group is replaced after a "
        "stall verdict."
    ),
    "sparkrack check": (
        "`sparkrack check` on the shipped inventories, each run a fresh process (Python start, "
        "imports, ansible-core's inventory reading, every check). Exit 1 is a refusal, given "
        "after every check has run: the example inventory's placeholder images and unset vault "
        "key are refused on purpose."
    ),
}

_KEYS = {"benchmark", "section", "command", "date", "machine", "load", "imported", "table", "notes"}
_REQUIRED = _KEYS - {"imported", "notes"}


@dataclass(frozen=True)
class Load:
    """The load average (1, 5 and 15 minutes, from ``/proc/loadavg``) and the core count."""

    average: tuple[float, float, float]
    cores: int

    def text(self) -> str:
        return " ".join(f"{x:.2f}" for x in self.average)


def load_now() -> Load:
    try:
        fields = Path("/proc/loadavg").read_text().split()[:3]
        average = (float(fields[0]), float(fields[1]), float(fields[2]))
    except (OSError, ValueError, IndexError):
        average = os.getloadavg()
    return Load(average, os.cpu_count() or 1)


def machine_now() -> str:
    """The CPU model, core count and memory of this machine (no host name)."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = " ".join(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    memory = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GiB memory"
                break
    except (OSError, ValueError):
        pass
    return f"{model}, {os.cpu_count() or 1} cores{memory}"


@dataclass(frozen=True)
class Record:
    """One benchmark run's figures: a table (columns, rows of text) and notes (paragraphs)."""

    benchmark: str
    section: str
    command: str
    date: str
    machine: str
    load: dict[str, Any]
    table: dict[str, list[Any]]
    notes: list[str] = field(default_factory=list)
    imported: dict[str, str] | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "benchmark": self.benchmark,
            "section": self.section,
            "command": self.command,
            "date": self.date,
            "machine": self.machine,
            "load": self.load,
            "table": self.table,
            "notes": self.notes,
        }
        if self.imported is not None:
            data["imported"] = self.imported
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def measured(
    benchmark: str,
    section: str,
    command: str,
    before: Load,
    columns: list[str],
    rows: list[list[str]],
    notes: list[str] | None = None,
) -> Record:
    """A record of a run that ends now, on this machine: its load before and after."""
    after = load_now()
    return Record(
        benchmark=benchmark,
        section=section,
        command=command,
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine_now(),
        load={"cores": after.cores, "before": list(before.average), "after": list(after.average)},
        table={"columns": columns, "rows": rows},
        notes=list(notes or []),
    )


def pytest_reports(test: str, runs: int, root: Path = ROOT) -> list[tuple[int, list[Any]]]:
    """Run the pytest node ``test`` ``runs`` times, each a fresh process that appends a JSON line
    per figure to the file named by ``SPARKRACK_BENCH_REPORT``: per run, pytest's exit code and
    those lines (a test that measures and asserts is also the benchmark of its figures)."""
    out = []
    with tempfile.TemporaryDirectory(prefix="sparkrack-bench-report-") as tmp:
        for i in range(runs):
            report = Path(tmp, f"run{i}.jsonl")
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                cwd=root,
                env={**os.environ, "SPARKRACK_BENCH_REPORT": str(report)},
                capture_output=True,
                text=True,
                check=False,
            )
            lines = report.read_text().splitlines() if report.is_file() else []
            out.append((proc.returncode, [json.loads(line) for line in lines]))
    return out


def _problem(name: str, key: str, message: str, fix: str) -> Problem:
    return Problem(name, key, message, fix, rule="measurement record")


def _load_problems(name: str, load: Any, imported: bool) -> list[Problem]:
    if not isinstance(load, dict):
        return [_problem(name, "load", "not a mapping", "the cores and the load average")]
    out = []
    if not isinstance(load.get("cores"), int) or isinstance(load.get("cores"), bool):
        out.append(_problem(name, "load.cores", "missing or not an integer", "os.cpu_count()"))
    elif load["cores"] < 1:
        out.append(_problem(name, "load.cores", "below 1", "os.cpu_count()"))
    averages = [load.get("before"), load.get("after")]
    has_averages = all(
        isinstance(a, list)
        and len(a) == 3
        and all(isinstance(x, int | float) and not isinstance(x, bool) and x >= 0 for x in a)
        for a in averages
    )
    reported = load.get("reported")
    unknown = sorted(set(load) - {"cores", "before", "after", "reported"})
    if unknown:
        out.append(_problem(name, f"load.{unknown[0]}", "unknown key", "cores, before, after"))
    if imported:
        if not (isinstance(reported, str) and reported.strip()) and not has_averages:
            out.append(
                _problem(
                    name,
                    "load.reported",
                    "an imported record without the load it was measured under",
                    "the load average the earlier page gave with these figures",
                )
            )
    elif not has_averages:
        out.append(
            _problem(
                name,
                "load.before",
                "before and after must each be the three load averages",
                "record load_now() before the run; measured() adds the load after it",
            )
        )
    return out


def parse(name: str, data: Any) -> Record:
    """A record from its JSON, refused (every problem named) unless complete; its benchmark must
    be a file of the repository."""
    if not isinstance(data, dict):
        raise SparkrackError(_problem(name, "(top)", "not a mapping", "a JSON object"))
    problems = [
        _problem(name, key, "unknown key", f"one of {', '.join(sorted(_KEYS))}")
        for key in sorted(set(data) - _KEYS)
    ]
    problems += [
        _problem(name, key, "missing", "the benchmark writes it; see sparkrack.bench.measurements")
        for key in sorted(_REQUIRED - set(data))
    ]
    for key in ("benchmark", "section", "command", "date", "machine"):
        if key in data and not (isinstance(data[key], str) and data[key].strip()):
            problems.append(_problem(name, key, "not a non-empty string", "fill it in"))
    bench = data.get("benchmark")
    if isinstance(bench, str) and bench and not (ROOT / bench).is_file():
        problems.append(
            _problem(name, "benchmark", f"{bench} is no file of the repository", "its path")
        )
    if data.get("section") not in SECTIONS and isinstance(data.get("section"), str):
        problems.append(
            _problem(name, "section", "not a section of the page", f"one of {list(SECTIONS)}")
        )
    imported = data.get("imported")
    if imported is not None and not (
        isinstance(imported, dict)
        and set(imported) == {"from", "measured"}
        and all(isinstance(v, str) and v.strip() for v in imported.values())
    ):
        problems.append(
            _problem(
                name,
                "imported",
                "must say where the figures were copied from and where they were measured",
                "{'from': 'page at commit', 'measured': 'where and when'}",
            )
        )
    if "load" in data:
        problems += _load_problems(name, data["load"], imported is not None)
    table = data.get("table")
    columns = table.get("columns") if isinstance(table, dict) else None
    rows = table.get("rows") if isinstance(table, dict) else None
    if "table" in data and not (
        isinstance(columns, list)
        and columns
        and all(isinstance(c, str) for c in columns)
        and isinstance(rows, list)
        and rows
        and all(
            isinstance(r, list) and len(r) == len(columns) and all(isinstance(c, str) for c in r)
            for r in rows
        )
    ):
        problems.append(
            _problem(name, "table", "needs columns and rows of as many strings", "the figures")
        )
    notes = data.get("notes", [])
    if not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        problems.append(_problem(name, "notes", "not a list of strings", "paragraphs"))
    if problems:
        raise SparkrackError(problems)
    return Record(
        benchmark=data["benchmark"],
        section=data["section"],
        command=data["command"],
        date=data["date"],
        machine=data["machine"],
        load=data["load"],
        table=data["table"],
        notes=list(notes),
        imported=imported,
    )


def load_records(root: Path = ROOT) -> dict[str, Record]:
    """Every record under ``docs/dev/measurements/``, by file name."""
    out = {}
    for path in sorted((root / RECORDS).glob("*.json")):
        name = str(path.relative_to(root))
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SparkrackError(_problem(name, "(top)", f"not JSON: {exc}", "rerun")) from exc
        out[path.name] = parse(name, data)
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    """``text`` as inline code, fenced with two backticks where it holds one."""
    text = _cell(text)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _where(record: Record) -> str:
    load = record.load
    if record.imported is not None:
        said = load.get("reported") or (
            f"{' '.join(map(str, load['before']))} before, {' '.join(map(str, load['after']))} after"
        )
        return (
            f"**Imported, not re-measured**: copied from {record.imported['from']}; measured "
            f"{record.imported['measured']}, on {record.machine} ({load['cores']} cores); load "
            f"average as reported then: {said}. Date of the figures: {record.date}."
        )
    before = " ".join(f"{x:.2f}" for x in load["before"])
    after = " ".join(f"{x:.2f}" for x in load["after"])
    return (
        f"Measured {record.date} on {record.machine}; load average (1, 5, 15 min) {before} "
        f"before the run, {after} after it, on {load['cores']} cores."
    )


def render(records: dict[str, Record]) -> str:
    """The page: each section's records in date order, each with its benchmark, command, date,
    machine, load, figures and notes."""
    out = [
        "# Measurements",
        "",
        GENERATED,
        "",
        "For developers: every figure the lab and the tests measured, with the machine and the "
        "load it was measured under, in one place. The guide pages link here instead of quoting "
        "them. Each benchmark writes a record under [measurements/](measurements/) and rewrites "
        "this page from all of them (`python -m sparkrack.bench.measurements` does the same "
        "from the records alone); a test fails when the page and the records differ. To update "
        "a figure, rerun its benchmark (the command is given with each) and commit its record "
        "with the page.",
    ]
    for section, intro in SECTIONS.items():
        found = sorted(
            (r for r in records.values() if r.section == section),
            key=lambda r: (r.date, r.benchmark, r.command),
        )
        out += ["", f"## {section}", "", intro]
        if not found:
            out += ["", "No record yet: run the section's benchmark."]
        for record in found:
            columns = record.table["columns"]
            out += [
                "",
                f"{_code(record.benchmark)}: {_code(record.command)}. {_where(record)}",
                "",
                "| " + " | ".join(_cell(c) for c in columns) + " |",
                "|" + "---|" * len(columns),
                *("| " + " | ".join(_cell(c) for c in row) + " |" for row in record.table["rows"]),
            ]
            for note in record.notes:
                out += ["", note]
    return "\n".join(out) + "\n"


def stale_lines(page: str, expected: str) -> list[str]:
    """Lines of ``page`` that the records do not make, and lines they make that it lacks."""
    return [
        line
        for line in difflib.unified_diff(expected.splitlines(), page.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def write(record: Record, name: str, root: Path = ROOT) -> Path:
    """Store ``record`` as ``docs/dev/measurements/<name>.json`` (after checking it as a reader
    would) and rewrite the page from every record. Returns the record's path."""
    path = root / RECORDS / f"{name}.json"
    parse(str(path), json.loads(record.to_json()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.to_json())
    (root / PAGE).write_text(render(load_records(root)))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page differs")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (%(default)s)")
    args = parser.parse_args(argv)
    try:
        expected = render(load_records(args.root))
    except SparkrackError as exc:
        print(exc, file=sys.stderr)
        return 1
    page = args.root / PAGE
    if args.check:
        stale = stale_lines(page.read_text() if page.is_file() else "", expected)
        for line in stale:
            print(f"{PAGE}: {line}", file=sys.stderr)
        return 1 if stale else 0
    page.write_text(expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
