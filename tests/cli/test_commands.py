"""The command table: every command builds, help needs no command module, a command loads only
its own module, handlers answer with the one ExitCode enum."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.cli import COMMANDS, build_parser, main
from sparkrack.cli.exitcodes import ExitCode

ROOT = Path(__file__).resolve().parents[2]


def loaded_after(args: list[str]) -> set[str]:
    """The sparkrack modules a fresh interpreter has imported after ``sparkrack ARGS``."""
    code = (
        "import contextlib, io, json, sys\n"
        "from sparkrack.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    try:\n"
        f"        main({args!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('sparkrack'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout))


def test_every_command_module_defines_its_arguments() -> None:
    parser = build_parser()
    for name, cmd in COMMANDS.items():
        module = importlib.import_module(f"sparkrack.cli.{cmd.module}")
        assert callable(module.add_arguments), name
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert list(choices) == list(COMMANDS)


def test_top_level_help_imports_no_command_module() -> None:
    loaded = loaded_after(["--help"])
    assert not {m for m in loaded if m.startswith("sparkrack.cli.")} - {"sparkrack.cli.exitcodes"}


def test_a_command_imports_only_its_own_module() -> None:
    loaded = loaded_after(["validate", "--help"])
    assert "sparkrack.cli.validate" in loaded
    assert not {"sparkrack.cli.bench", "sparkrack.bench.client", "sparkrack.cli.matrix"} & loaded


def test_the_lazy_import_check_sees_a_loaded_module() -> None:
    # negative control: the same probe does see the bench client once bench is asked for
    assert "sparkrack.cli.bench" in loaded_after(["bench", "--help"])


def test_help_lists_every_command_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name, cmd in COMMANDS.items():
        assert name in out and " ".join(cmd.summary.split()) in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nonsense"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_handlers_return_the_exit_code_enum(tmp_path: Path) -> None:
    ok = main(["validate", "--nodes", "4", "glm-4.7-nvfp4"])
    assert ok is ExitCode.OK
    bad = tmp_path / "bad.yml"
    bad.write_text("model: x\n")
    assert main(["validate", str(bad)]) is ExitCode.FAILED


# One command line per command that the command cannot run as given: exit 2 (docs/reference/exit-codes.md's
# table), one line naming the option, no traceback. ``{tmp}`` is a folder that exists.
USAGE_ERRORS: dict[str, list[str]] = {
    "addresses": ["addresses", "-i", "{tmp}/no-such-inventory"],
    "plan": ["plan", "-i", "{tmp}/no-such-inventory"],
    "check": ["check", "-i", "{tmp}/no-such-inventory"],
    "validate": ["validate", "--nodes", "four"],
    "render": ["render", "-i", "inventories/lab", "--what", "command"],
    "manifests": ["manifests", "cluster", "-i", "{tmp}/no-such-inventory"],
    "images": ["images", "-i", "inventories/lab", "--vault-password-file", "{tmp}/no-such-file"],
    "fabric-check": ["fabric-check", "--log", "{tmp}/no-such.log"],
    "patch": ["patch", "--check"],
    "bench": ["bench", "--url", "localhost:8000", "--model", "m"],
    "bench-server": ["bench-server", "--no-such-option"],
    "bench-report": ["bench-report", "{tmp}/no-such-results.json", "--out", "{tmp}/out"],
    "diagnose": ["diagnose", "{tmp}/no-such.log"],
    "matrix": ["matrix", "{tmp}/no-such-matrix.yml"],
    "watch": ["watch", "--url", "localhost:8000", "--once"],
    "status": ["status", "--namespace", "sparkrack", "--kubeconfig", "{tmp}/no-such-kubeconfig"],
    "memguard": ["memguard", "--node", "spark-1", "--floor", "lots"],
}


def run_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = int(main(argv))
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_usage_table_covers_every_command() -> None:
    assert set(USAGE_ERRORS) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(USAGE_ERRORS))
def test_a_usage_error_exits_2_for_every_command(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [word.replace("{tmp}", str(tmp_path)) for word in USAGE_ERRORS[command]]
    code, output = run_usage(argv, capsys)
    assert code == ExitCode.USAGE == 2, output
    assert "Traceback" not in output and output.strip()


def test_refused_input_is_1_not_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Negative control: a readable input that is wrong is refused (1), not a usage error."""
    bad = tmp_path / "bad.yml"
    bad.write_text("model: [\n")
    assert run_usage(["validate", str(bad)], capsys)[0] == ExitCode.FAILED


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "-i", "inventories/lab", "--no-engine-check"],
        ["render", "-i", "inventories/lab", "--what", "plan"],
        ["plan", "-i", "inventories/lab"],
        ["images", "-i", "inventories/lab"],
        ["addresses", "-i", "inventories/lab"],
    ],
    ids=lambda argv: argv[0],
)
def test_every_command_that_shows_the_deployments_repeats_their_warnings(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 0
    captured = capsys.readouterr()
    warnings = [
        line for line in (captured.out + captured.err).splitlines() if line.startswith("warning: ")
    ]
    assert any(
        "serving_fetch_image: localhost/sparkrack-fetch:lab is pinned by tag" in w for w in warnings
    )
    assert any("[image-moving-tag]" in w for w in warnings)  # the vLLM nightly, accepted


# --- docs/reference/exit-codes.md against exitcodes.py ----------------------------------------

EXIT_PAGE = ROOT / "docs" / "reference" / "exit-codes.md"
# What each code's row must say, per member of the enum (BAD_LEVEL shares 2 with USAGE).
# Keyed by name: BAD_LEVEL is USAGE's alias (both 2), so the members themselves would collide.
ROW_WORDS = {
    "OK": "every check passed",
    "FAILED": "Bad input",
    "USAGE": "cannot run as given",
    "BAD_LEVEL": "bench: a concurrency level was GARBAGE (fingerprint), FAILED",
    "NO_TOKEN_COUNTS": "bench: a level had no token counts",
    "NO_KUBECONFIG": "status: no kubeconfig",
    "API_UNAVAILABLE": "status: the cluster's API refused the connection, did not answer",
}


def exit_table(readme: str) -> dict[int, str]:
    """The rows of the ``| exit | means |`` table: code -> meaning."""
    table = readme.split("| exit | means |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1:3] for line in table.strip().splitlines()[1:]]
    return {int(code): means.strip() for code, means in rows}


def table_problems(table: dict[int, str]) -> list[str]:
    problems = []
    if sorted(table) != sorted({int(m) for m in ExitCode}):
        problems.append(
            f"codes {sorted(table)} are not ExitCode's {sorted(set(map(int, ExitCode)))}"
        )
    for name, words in ROW_WORDS.items():
        code = int(ExitCode[name])
        if words not in table.get(code, ""):
            problems.append(f"the row of {code} does not say {words!r} ({name})")
    return problems


def test_the_exit_code_page_is_the_enum() -> None:
    assert set(ROW_WORDS) == set(ExitCode.__members__)
    assert table_problems(exit_table(EXIT_PAGE.read_text())) == []


def test_a_wrong_exit_table_is_caught() -> None:
    """Negative control: a table that moves bench's code 3 to 4, or drops a row, fails."""
    table = exit_table(EXIT_PAGE.read_text())
    moved = {**{k: v for k, v in table.items() if k != 3}, 4: table[3]}
    assert table_problems(moved)
    assert table_problems({k: v for k, v in table.items() if k != 1})
    assert table_problems({**table, 2: "a usage error"})  # bench's meaning of 2 left out
