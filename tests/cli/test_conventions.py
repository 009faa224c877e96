"""The command line's conventions, each held by a test: ``--version``; ``--json`` on every command
that prints results; ``-i``'s default said when used and a named inventory that does not exist
refused; quiet on a closed pipe; progress on the engine-check download; capacity refusals that
name the key, the file and a value that fits, with the overhead, blaming the inventory's
topology when that is the cause."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from sparkrack.cli import main
from sparkrack.errors import SparkrackError
from sparkrack.serving.enginecheck.upstream import download

ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    got = capsys.readouterr()
    return code, got.out, got.err


def test_version_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sparkrack", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout == f"sparkrack {version('sparkrack')}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "-i", "inventories/lab", "--no-engine-check", "--json"],
        ["validate", "gemma-4-31b-it", "--nodes", "4", "--json"],
        ["images", "-i", "inventories/lab", "--json"],
        ["addresses", "-i", "inventories/lab", "--json"],
        ["plan", "gemma-4-31b-it", "--json"],
    ],
)
def test_every_command_that_prints_results_takes_json(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, out, _ = run(argv, capsys)
    assert code == 0, out
    json.loads(out)  # the whole of stdout is one JSON document


def test_check_json_carries_the_problems_with_file_key_and_fix(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, out, _ = run(
        ["check", "-i", "inventories/example", "--no-engine-check", "--json"], capsys
    )
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    keys = {p["key"] for p in report["problems"]}
    assert {"serving_fetch_image", "serving_watchdog_image", "vault_gateway_key"} <= keys
    assert all(p["file"] and p["fix"] and p["rule"] for p in report["problems"])


def test_format_json_stays_an_alias_of_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    _, alias, _ = run(["images", "-i", "inventories/lab", "--format", "json"], capsys)
    _, one, _ = run(["images", "-i", "inventories/lab", "--json"], capsys)
    _, table, _ = run(["images", "-i", "inventories/lab"], capsys)
    assert alias == one != table


def test_the_default_inventory_is_said(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, _, err = run(["addresses"], capsys)
    assert code == 0 and "note: no -i given: reading inventories/example" in err
    code, _, err = run(["addresses", "-i", "inventories/example"], capsys)
    assert code == 0 and "note:" not in err  # negative control: given, nothing said


@pytest.mark.parametrize("command", ["validate", "check", "addresses", "images", "plan"])
def test_an_inventory_that_does_not_exist_is_refused(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code, _, err = run([command, "-i", "inventories/exmaple"], capsys)
    assert code == 2
    assert (
        "inventories/exmaple: --inventory: does not exist — fix: pass -i inventories/<name>" in err
    )


def test_a_closed_pipe_ends_quietly() -> None:
    """``sparkrack addresses | head -0``: the reader is gone before the first line is written."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkrack", "addresses", "-i", "inventories/example"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert err == ""


def _wheel(folder: Path, name: str = "tinypkg", size: int = 300_000) -> Path:
    """A minimal, valid wheel (what pip downloads): metadata, a module and some bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}/__init__.py", "X = 1\n")
        whl.writestr(f"{name}/blob.bin", bytes(range(256)) * (size // 256))
        whl.writestr(
            f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
        )
        whl.writestr(
            f"{name}-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr(f"{name}-1.0.dist-info/RECORD", "")
    return path


def test_the_engine_check_download_shows_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "index"
    _wheel(index)
    wheels = tmp_path / "wheels"
    download(
        ["tinypkg==1.0"], wheels, "download tinypkg", ["--no-index", "--find-links", str(index)]
    )
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"engine check: downloading tinypkg==1.0 into {wheels} (once: later runs use the cache)"
    )
    assert any(line.startswith("engine check: Saved ") for line in err), err
    assert err[-1].startswith("engine check: downloaded 0.") and err[-1].endswith(" s")
    assert (wheels / "tinypkg-1.0-py3-none-any.whl").is_file()
    with pytest.raises(SparkrackError, match="pip failed"):  # negative control
        download(
            ["absent==1.0"], wheels, "download absent", ["--no-index", "--find-links", str(index)]
        )


def test_a_capacity_refusal_names_key_file_a_value_that_fits_and_the_overhead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = yaml.safe_load((ROOT / "model_profiles" / "qwen3.5-397b-a17b-nvfp4.yml").read_text())
    profile["topology"]["tp"] = 2
    path = tmp_path / "qwen-tp2.yml"
    path.write_text(yaml.safe_dump(profile))
    code, out, _ = run(["validate", str(path), "--nodes", "2"], capsys)
    assert code == 1
    line = next(x for x in out.splitlines() if "[plan-weights-exceed-memory]" in x)
    assert line.startswith(f"{path}: topology.tp: weights need ")
    assert "plus 3 GB of runtime overhead" in line and "after 8 GB of OS headroom" in line
    assert "topology.tp: 4" in line.split(" — fix: ")[1]


def test_a_capacity_refusal_blames_the_inventory_topology(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "mine"
    shutil.copytree(ROOT / "inventories" / "example", inv)
    all_yml = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(all_yml.read_text())
    del data["serving_profile"], data["serving_spark"]
    data["serving_deployments"] = [
        {
            "name": "qwen",
            "profile": "qwen3.5-397b-a17b-nvfp4",
            "sparks": ["spark1", "spark2"],
            "topology": {"tp": 2},
        }
    ]
    all_yml.write_text(yaml.safe_dump(data))
    code, out, err = run(["plan", "-i", str(inv)], capsys)
    assert code == 1
    line = next(x for x in (out + err).splitlines() if "[plan-weights-exceed-memory]" in x)
    assert line.startswith(f"{all_yml}: serving_deployments[0].topology.tp: ")
    assert "it has 2 Spark(s), the model needs at least 3" in line
    assert "fix: run it on 4 Sparks" in line and "topology.tp: 4" in line
