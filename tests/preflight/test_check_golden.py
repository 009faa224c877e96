"""``sparkrack check`` on docs/guide/check.md's examples prints what that page shows.

The cases are the page's: the example inventory as shipped (one model, refused until its
owner names images the nodes can pull and a gateway key), and, with those set, the 2+1+1, an
over-commit, and a vault layout with and without its password. Each output is held in
``tests/data/golden/check/<case>.txt`` (``--update-golden`` rewrites them) and the page's
page shows each one, less the lines an earlier case already showed. The engine-check cache is an empty
folder, so the output says the real-parser check did not run, as on a new machine.
"""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hostile_inventory_corpus import MIXED, PASSWORD, owned, vault_text

from sparkrack.cli import main
from sparkrack.inputs.inventory import VAULT_ENV

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden" / "check"
PAGE = ROOT / "docs" / "guide" / "check.md"
MINE = "mine"


def _vars(inv: Path, change: Callable[[dict[str, object]], None]) -> None:
    path = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text("---\n" + yaml.safe_dump(data, sort_keys=False))


def _deployments(entries: list[dict[str, object]]) -> Callable[[Path], None]:
    def apply(inv: Path) -> None:
        owned(inv)

        def change(data: dict[str, object]) -> None:
            del data["serving_profile"], data["serving_spark"]
            data["serving_deployments"] = entries

        _vars(inv, change)

    return apply


def _vault(inv: Path) -> None:
    owned(inv)
    _vars(inv, lambda data: data.pop("vault_gateway_key"))
    (inv / "group_vars" / "all").mkdir()
    (inv / "group_vars" / "all.yml").rename(inv / "group_vars" / "all" / "main.yml")
    secrets = "vault_hf_token: hf_example\nvault_gateway_key: gateway-example\n"
    (inv / "group_vars" / "all" / "vault.yml").write_text(vault_text(secrets))


CROWDED = copy.deepcopy(MIXED)
CROWDED[1]["sparks"] = ["spark1"]  # vLLM Super on top of Gemma's head
CASES: dict[str, tuple[str, Callable[[Path], None] | None, str | None]] = {
    "one-model": ("inventories/example", None, None),
    "mixed": (MINE, _deployments(MIXED), None),
    "over-commit": (MINE, _deployments(CROWDED), None),
    "vault": (MINE, _vault, PASSWORD),
    "vault-no-password": (MINE, _vault, None),
}


def check_output(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    path, change, password = CASES[case]
    monkeypatch.setenv("SPARKRACK_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.delenv(VAULT_ENV, raising=False)
    if change is not None:
        monkeypatch.chdir(tmp_path)
        shutil.copytree(ROOT / "inventories" / "example", tmp_path / path)
        change(tmp_path / path)
    else:
        monkeypatch.chdir(ROOT)
    if password is not None:
        (tmp_path / "vault-pass").write_text(password)
        monkeypatch.setenv(VAULT_ENV, str(tmp_path / "vault-pass"))
    code = main(["check", "-i", path])
    captured = capsys.readouterr()
    text = (captured.out + captured.err).replace(f"{ROOT}/", "")
    return code, text.replace(str(tmp_path / "vault-pass"), "vault-pass")


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_prints_the_documented_output(
    case: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    update_golden: bool,
) -> None:
    code, text = check_output(case, tmp_path, monkeypatch, capsys)
    golden = GOLDEN / f"{case}.txt"
    if update_golden:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert code == (1 if case in ("one-model", "over-commit", "vault-no-password") else 0), text
    assert text == golden.read_text()


def page_blocks() -> list[str]:
    return [block for block in re.findall(r"```text\n(.*?)```", PAGE.read_text(), re.S)]


def shown(case: str, outputs: dict[str, str]) -> str:
    """What the page shows of ``case``: its output less the lines an earlier case already
    showed (the cases in CASES' order), so a line is told once."""
    earlier = list(CASES)[: list(CASES).index(case)]
    told = {line for c in earlier for line in outputs[c].splitlines()}
    return "".join(f"{line}\n" for line in outputs[case].splitlines() if line not in told)


def goldens() -> dict[str, str]:
    return {case: (GOLDEN / f"{case}.txt").read_text() for case in CASES}


@pytest.mark.parametrize("case", list(CASES))
def test_the_page_shows_each_output(case: str) -> None:
    assert page_blocks()[list(CASES).index(case)] == shown(case, goldens())


def test_the_page_shows_the_outputs_in_order_and_nothing_else() -> None:
    outputs = goldens()
    assert page_blocks() == [shown(case, outputs) for case in CASES]


def test_a_changed_output_is_not_the_documented_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative control: one changed value changes the output the page would have to show."""

    def change(inv: Path) -> None:
        _vars(inv, lambda data: data.update(serving_namespace="other"))

    monkeypatch.setitem(CASES, "one-model", (MINE, change, None))
    _, text = check_output("one-model", tmp_path, monkeypatch, capsys)
    outputs = {**goldens(), "one-model": text}
    assert page_blocks()[0] != shown("one-model", outputs)
