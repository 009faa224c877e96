"""``sparkrack matrix MATRIX.yml``: run a list of serving configurations one after the other.

Each case = the base profile + overrides (dotted profile keys).  Per case: validate (the profile
rules of ``sparkrack.profiles.validate_profile``) -> deploy (the serve play, through
:class:`AnsibleDeployer`) -> wait until ready, or classify the startup crash with
``sparkrack.diagnose`` -> bench -> record -> next case.

Resumable: ``state.json`` in the matrix's results folder is rewritten after every case; a rerun
skips every case that already has a final record (done, refused, crashed, bench-failed).  One
results folder per matrix (default ``matrix-results/<matrix name>/``).  The summary names the
winner per concurrency level and can write the winner's figures into the base profile's
``provenance.measured`` (the rest of the file is preserved byte for byte).

MATRIX.yml::

    name: qwen35-ep1-moe-sweep          # results folder name (default: file stem)
    base_profile: model_profiles/qwen3.5-397b-a17b-nvfp4.yml
    inventory: inventories/lab          # for the real deployer
    bench: {concurrency: [1, 4, 8], max_tokens: 3072, url: "http://127.0.0.1:30000",
            model: null, thinking: null}
    cases:                              # explicit cases ...
      - name: triton-moe
        overrides: {sglang.moe_runner_backend: triton}
    axes:                               # ... and/or the cartesian product of value lists
      sglang.attention_backend: [flashinfer, triton]
      sglang.disable_cuda_graph: [false, true]
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from sparkrack import safeyaml
from sparkrack.bench.runner import RunResult
from sparkrack.diagnose import diagnose
from sparkrack.errors import Problem, SparkrackError

STATE_FILE = "state.json"
FINAL = ("done", "refused", "crashed", "bench-failed")

Validator = Callable[[dict[str, Any], str, int | None], list[Problem]]
BenchFn = Callable[["Case", Path], RunResult]


@dataclass(frozen=True)
class Case:
    name: str
    overrides: dict[str, Any]
    profile: dict[str, Any]


@dataclass(frozen=True)
class DeployOutcome:
    ready: bool
    log: str
    """Everything the deployment printed (the serve play's output, pod logs on failure)."""


class Deployer(Protocol):
    def deploy(self, case: Case, profile_file: Path, log_dir: Path) -> DeployOutcome: ...


@dataclass
class Matrix:
    name: str
    path: Path
    base_profile: Path
    base: dict[str, Any]
    cases: list[Case]
    bench: dict[str, Any] = field(default_factory=dict)
    inventory: str | None = None
    nodes: int | None = None


# -- loading ------------------------------------------------------------------------------------
def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise KeyError(key)
        node = child
    node[parts[-1]] = value


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(value).lower()).strip("-")


def _problem(path: Path, key: str, msg: str, fix: str) -> SparkrackError:
    return SparkrackError(Problem(str(path), key, msg, fix, "matrix-file"))


def load_matrix(path: Path) -> Matrix:
    raw = safeyaml.load_file(path)
    if not isinstance(raw, dict):
        raise _problem(path, "(root)", "must be a mapping", "see `sparkrack matrix --help`")
    ref = raw.get("base_profile")
    if not isinstance(ref, str):
        raise _problem(path, "base_profile", "missing", "name the base profile file")
    base_path = (path.parent / ref) if not Path(ref).is_absolute() else Path(ref)
    if not base_path.is_file():
        from_repo = Path(ref)
        if from_repo.is_file():
            base_path = from_repo
        else:
            raise _problem(path, "base_profile", f"{ref}: no such file", "give a profile path")
    base = safeyaml.load_file(base_path)
    if not isinstance(base, dict):
        raise _problem(base_path, "(root)", "profile must be a mapping", "fix the profile")
    specs: list[tuple[str, dict[str, Any]]] = []
    for i, item in enumerate(raw.get("cases") or []):
        if not isinstance(item, dict) or not isinstance(item.get("overrides", {}), dict):
            raise _problem(path, f"cases[{i}]", "needs name + overrides mapping", "fix the case")
        overrides = dict(item.get("overrides") or {})
        name = str(item.get("name") or "_".join(f"{k}={v}" for k, v in overrides.items()) or "base")
        specs.append((name, overrides))
    axes = raw.get("axes") or {}
    if not isinstance(axes, dict) or not all(isinstance(v, list) and v for v in axes.values()):
        raise _problem(path, "axes", "must map profile keys to non-empty lists", "fix the axes")
    if axes:
        keys = list(axes)
        for values in itertools.product(*(axes[k] for k in keys)):
            overrides = dict(zip(keys, values, strict=True))
            name = "_".join(f"{k.rsplit('.', 1)[-1]}-{_slug(v)}" for k, v in overrides.items())
            specs.append((name, overrides))
    if not specs:
        raise _problem(path, "cases", "no cases", "add `cases:` and/or `axes:`")
    names = [n for n, _ in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise _problem(path, "cases", f"duplicate case names {dupes}", "name cases uniquely")
    cases = []
    for name, overrides in specs:
        profile = copy.deepcopy(base)
        for key, value in overrides.items():
            try:
                set_dotted(profile, key, value)
            except KeyError as exc:
                raise _problem(
                    path, f"{name}.{key}", "path crosses a non-mapping value", "fix the key"
                ) from exc
        cases.append(Case(name=_slug(name), overrides=overrides, profile=profile))
    return Matrix(
        name=_slug(raw.get("name") or path.stem),
        path=path,
        base_profile=base_path,
        base=base,
        cases=cases,
        bench=dict(raw.get("bench") or {}),
        inventory=raw.get("inventory"),
        nodes=raw.get("nodes"),
    )


# -- the real deployer --------------------------------------------------------------------------
@dataclass
class AnsibleDeployer:
    """Deploys through the serve play, exactly as a user would (needs a cluster)."""

    inventory: str
    playbook: str = "playbooks/serve.yml"
    ansible_playbook: str = "ansible-playbook"

    def command(self, profile_file: Path) -> list[str]:
        return [
            self.ansible_playbook,
            self.playbook,
            "-i",
            self.inventory,
            "-e",
            f"serving_profile_file={profile_file.resolve()}",
        ]

    def deploy(self, case: Case, profile_file: Path, log_dir: Path) -> DeployOutcome:
        proc = subprocess.run(
            self.command(profile_file),
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "ANSIBLE_FORCE_COLOR": "0"},
        )
        log = proc.stdout + proc.stderr
        (log_dir / "deploy.log").write_text(log, encoding="utf-8")
        return DeployOutcome(ready=proc.returncode == 0, log=log)


def default_validator() -> Validator:
    try:
        from sparkrack.profiles import validate_profile
    except ImportError as exc:  # an install without the serving-profile package
        raise SparkrackError(
            Problem(
                "sparkrack/profiles",
                "validate_profile",
                f"profile validator unavailable ({exc})",
                "install a sparkrack that has sparkrack.profiles.validate_profile",
                "matrix-validator",
            )
        ) from exc
    fn: Validator = validate_profile
    return fn


# -- orchestration ------------------------------------------------------------------------------
def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)  # atomic: an interruption never leaves half a state file


@dataclass
class MatrixRunner:
    matrix: Matrix
    out_dir: Path
    deployer: Deployer
    bench: BenchFn
    validator: Validator
    log: Callable[[str], None] = print
    state: dict[str, Any] = field(default_factory=dict)

    def _load_state(self) -> None:
        path = self.out_dir / STATE_FILE
        if path.is_file():
            self.state = json.loads(path.read_text(encoding="utf-8"))
            if self.state.get("matrix_sha256") != _sha(self.matrix.path):
                self.log(
                    f"note: {self.matrix.path} changed since the last run; finished cases kept"
                )
        else:
            self.state = {"matrix": str(self.matrix.path), "cases": {}}
        self.state["matrix_sha256"] = _sha(self.matrix.path)

    def _save(self) -> None:
        _write_json(self.out_dir / STATE_FILE, self.state)

    def _record(self, case: Case, **fields: Any) -> None:
        entry = {"overrides": case.overrides, **fields}
        entry["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.state["cases"][case.name] = entry
        self._save()

    def run(self) -> dict[str, Any]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._load_state()
        self._save()
        for case in self.matrix.cases:
            prior = self.state["cases"].get(case.name, {})
            if prior.get("status") in FINAL:
                self.log(f"[skip] {case.name}: already {prior['status']}")
                continue
            self.run_case(case)
        return self.state

    def run_case(self, case: Case) -> None:
        case_dir = self.out_dir / "cases" / case.name
        case_dir.mkdir(parents=True, exist_ok=True)
        profile_file = case_dir / "profile.yml"
        profile_file.write_text(
            f"# sparkrack matrix {self.matrix.name}, case {case.name}: "
            f"{self.matrix.base_profile} + {json.dumps(case.overrides)}\n"
            + yaml.safe_dump(case.profile, sort_keys=False),
            encoding="utf-8",
        )
        problems = self.validator(case.profile, str(profile_file), self.matrix.nodes)
        if problems:
            first = problems[0]
            reason = f"refused by rule {first.rule or 'schema'}: {first.key}: {first.message}"
            self.log(f"[refused] {case.name}: {reason}")
            self._record(case, status="refused", reason=reason, problems=[str(p) for p in problems])
            return
        self.state["cases"][case.name] = {"overrides": case.overrides, "status": "deploying"}
        self._save()
        self.log(f"[deploy] {case.name}")
        outcome = self.deployer.deploy(case, profile_file, case_dir)
        if not outcome.ready:
            findings = diagnose(outcome.log)
            reason = (
                "startup crash: " + ", ".join(f.id for f in findings)
                if findings
                else "not ready (no known signature; see deploy.log)"
            )
            self.log(f"[crashed] {case.name}: {reason}")
            self._record(
                case,
                status="crashed",
                reason=reason,
                findings=[
                    {"id": f.id, "fix": f.fix, "profile_key": f.profile_key, "line": f.evidence}
                    for f in findings
                ],
            )
            return
        self.log(f"[bench] {case.name}")
        try:
            run = self.bench(case, case_dir)
        except SparkrackError as exc:
            self._record(case, status="bench-failed", reason=str(exc))
            return
        self._record(
            case,
            status="done",
            results=str(case_dir / "results.json"),
            levels={
                str(lv.concurrency): {
                    "peak_tok_s": round(lv.peak_tok_s, 2),
                    "aggregate_tok_s": round(lv.aggregate_tok_s, 2),
                    "ok": lv.ok,
                    "failed": lv.failed,
                    "status": lv.status,
                    "ttft_p50_s": lv.ttft_p50_s,
                    "accept_len": lv.accept_len,
                }
                for lv in run.levels
            },
        )


def winners(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per concurrency level: the done case with the highest peak among clean levels.

    Clean = status ok (not GARBAGE/FAILED) and no failed request, as the seeds only rank 8/0 rows.
    """
    best: dict[str, dict[str, Any]] = {}
    for name, entry in state.get("cases", {}).items():
        if entry.get("status") != "done":
            continue
        for n, lv in entry.get("levels", {}).items():
            if lv["status"] != "ok" or lv["failed"]:
                continue
            if n not in best or lv["peak_tok_s"] > best[n]["peak_tok_s"]:
                best[n] = {
                    "case": name,
                    "peak_tok_s": lv["peak_tok_s"],
                    "aggregate_tok_s": lv.get("aggregate_tok_s"),
                    "overrides": entry["overrides"],
                }
    return dict(sorted(best.items(), key=lambda kv: int(kv[0])))


def render_summary(matrix: Matrix, state: dict[str, Any]) -> str:
    levels = sorted({int(n) for e in state["cases"].values() for n in e.get("levels", {})})
    heads = ["Case", "overrides"] + [f"n={n} tok/s" if n == 1 else f"n={n} peak" for n in levels]
    heads += ["ok/failed (top n)", "accept_len", "status"]
    lines = [
        f"# sparkrack matrix {matrix.name} — summary",
        "",
        f"- base profile: {matrix.base_profile} · cases: {len(matrix.cases)}",
        "- peak = Σ per-request decode tok/s of the successful requests (results.json `peak_tok_s`);"
        " aggregate (in brackets) = output tokens / wall time of the level (`aggregate_tok_s`)",
        "",
        "| " + " | ".join(heads) + " |",
        "|" + "---|" * len(heads),
    ]
    for case in matrix.cases:
        entry = state["cases"].get(case.name, {"status": "pending"})
        lv = entry.get("levels", {})
        cells = [case.name, ", ".join(f"{k}={v}" for k, v in case.overrides.items()) or "—"]
        for n in levels:
            level = lv.get(str(n))
            if level is None:
                cells.append("—")
            else:
                mark = "" if level["status"] == "ok" else f" {level['status']}"
                agg = level.get("aggregate_tok_s")
                both = f" ({agg:.2f})" if n > 1 and agg is not None else ""
                cells.append(f"{level['peak_tok_s']:.2f}{both}{mark}")
        top = lv.get(str(levels[-1])) if levels else None
        cells.append(f"{top['ok']}/{top['failed']}" if top else "—")
        accepts = [v["accept_len"] for v in lv.values() if v.get("accept_len")]
        cells.append(f"≈ {max(accepts):.2f}" if accepts else "—")
        status = entry["status"]
        if entry.get("reason"):
            status += f": {entry['reason']}"
        cells.append(status.replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Winner per concurrency level", ""]
    best = winners(state)
    if not best:
        lines.append("No case finished cleanly.")
    for level_n, win in best.items():
        agg = win.get("aggregate_tok_s")
        lines.append(
            f"- n={level_n}: **{win['case']}** — {win['peak_tok_s']:.2f} tok/s peak"
            + (f", {agg:.2f} tok/s aggregate" if agg is not None else "")
        )
    return "\n".join(lines) + "\n"


def write_summary(matrix: Matrix, state: dict[str, Any], out_dir: Path) -> Path:
    path = out_dir / "summary.md"
    path.write_text(render_summary(matrix, state), encoding="utf-8")
    _write_json(out_dir / "summary.json", {"winners": winners(state), "cases": state["cases"]})
    return path


# -- provenance write-back ----------------------------------------------------------------------
def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_code(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def _block_end(lines: list[str], start: int, parent: int) -> int:
    end = start
    while end < len(lines) and not (_is_code(lines[end]) and _indent(lines[end]) <= parent):
        end += 1
    return end


def _set_in_block(lines: list[str], path: list[str], value: str) -> list[str]:
    """Set ``path`` (mapping keys) to the scalar text ``value`` in block-style YAML ``lines``.

    Only the line holding the key changes (or lines are inserted); every other byte stays.
    """
    start, end, parent = 0, len(lines), -1
    for depth, key in enumerate(path):
        last = depth == len(path) - 1
        child: int | None = None
        found: int | None = None
        for i in range(start, end):
            if not _is_code(lines[i]):
                continue
            child = _indent(lines[i]) if child is None else child
            if _indent(lines[i]) == child and re.match(rf"\s*{re.escape(key)}:(\s|$)", lines[i]):
                found = i
                break
        if found is None:
            pad = " " * (child if child is not None else parent + 2 if parent >= 0 else 0)
            while end > start and not _is_code(lines[end - 1]):
                end -= 1  # insert after the block's last key, before trailing blanks/comments
            lines.insert(end, f"{pad}{key}: {value}" if last else f"{pad}{key}:")
            found = end
        elif last:
            lines[found] = f"{' ' * _indent(lines[found])}{key}: {value}"
        if last:
            return lines
        parent = _indent(lines[found])
        start = found + 1
        end = _block_end(lines, start, parent)
    return lines


def write_provenance(matrix: Matrix, state: dict[str, Any], today: date | None = None) -> str:
    """Write the winner's n=1/4/8 figures into the base profile's ``provenance.measured``.

    The winner is the n=8 winner (the seeds' headline level; else the highest level with one).
    Returns the note written.  Refuses (nothing written) unless the result re-parses to exactly
    the original profile with only those keys changed.
    """
    best = winners(state)
    if not best:
        raise SparkrackError(
            Problem(str(matrix.path), "cases", "no clean winner to write", "", "matrix-no-winner")
        )
    top = "8" if "8" in best else list(best)[-1]
    case = best[top]["case"]
    levels = state["cases"][case]["levels"]
    figures = {f"n{n}": levels[str(n)]["peak_tok_s"] for n in (1, 4, 8) if str(n) in levels}
    if len(figures) < 3:
        raise SparkrackError(
            Problem(
                str(matrix.path),
                "bench.concurrency",
                f"winner {case} lacks n=1/4/8 figures (provenance.measured needs all three)",
                "bench at concurrency [1, 4, 8]",
                "matrix-no-winner",
            )
        )
    stamp = (today or datetime.now(UTC).date()).isoformat()
    overrides = ", ".join(f"{k}={v}" for k, v in state["cases"][case]["overrides"].items())
    note = f"sparkrack matrix {matrix.name} {stamp}: winner {case} ({overrides or 'base'})"
    text = matrix.base_profile.read_text(encoding="utf-8")
    lines = text.splitlines()
    updates: list[tuple[list[str], Any]] = [(["provenance", "date"], stamp)]
    updates += [(["provenance", "measured", k], v) for k, v in figures.items()]
    updates += [(["provenance", "measured", "unit"], "tok/s")]
    updates += [(["provenance", "measured", "note"], note)]
    for keys, value in updates:
        lines = _set_in_block(lines, keys, json.dumps(value, ensure_ascii=False))
    new_text = "\n".join(lines) + ("\n" if text.endswith("\n") else "")
    expected = copy.deepcopy(matrix.base)
    for keys, value in updates:
        set_dotted(expected, ".".join(keys), value)
    try:
        same = yaml.safe_load(new_text) == expected
    except yaml.YAMLError:
        same = False
    if not same:
        raise SparkrackError(
            Problem(
                str(matrix.base_profile),
                "provenance",
                "cannot update provenance without rewriting other parts of the file",
                "use block-style YAML for provenance, or copy the figures from summary.md",
                "matrix-provenance",
            )
        )
    matrix.base_profile.write_text(new_text, encoding="utf-8")
    return note
