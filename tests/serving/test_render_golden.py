"""Everything sparkrack renders for the shipped profiles and inventories, byte for byte.

The guard of every refactor: the CLI's renders (``render PROFILE`` manifests, plan, and command and
env of every rank; ``render -i INVENTORY`` manifests with the fetch, pre-pull and gateway objects,
plan, gateway config, each deployment alone; ``images``, ``addresses``, ``manifests cluster``,
``plan -i``) and the serve role's filter (``sparkrack_serving_render``, with and without the
pre-pull Jobs) must print exactly what ``tests/data/golden/`` holds.

Each folder there holds one file per render and ``SHA256SUMS``, the digest of every render's raw
bytes: the digest is what the test compares. The files themselves are the renders with every
string longer than :data:`LONG` characters (the scripts shipped in ConfigMaps) replaced by its
length and digest, so a failing comparison shows a readable diff.

A change that is meant to change a render regenerates the files, an explicit act reviewed in the
diff of the commit that makes it::

    .venv/bin/pytest tests/serving/test_render_golden.py --update-golden
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.adapters.ansible import FILTERS
from sparkrack.cli import main
from sparkrack.inputs.inventory import load_inventory
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.serving.context import SETTINGS
from sparkrack.serving.trust import TRUST_VARS

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
SUMS = "SHA256SUMS"
LONG = 2000
PROFILES = sorted(p.stem for p in (ROOT / "model_profiles").glob("*.yml"))
INVENTORIES = ["example", "lab"]
# What roles/serving/tasks/main.yml passes as ``serving_vars``; its settings are SETTINGS.
DEPLOYMENT_VARS = (
    "serving_deployments",
    "serving_profile",
    "serving_profile_file",
    "serving_spark",
)


@pytest.fixture(autouse=True)
def _from_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Renders name profile files relative to the working directory: the checkout's root."""
    monkeypatch.chdir(ROOT)


def cli(*argv: str) -> str:
    """What ``sparkrack ARGV`` prints on stdout (it must succeed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    assert code == 0, f"sparkrack {' '.join(argv)} exited {code}"
    return out.getvalue()


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > LONG:
        first = value.splitlines()[0][:60] if value else ""
        return f"<{len(value)} characters, sha256 {digest(value)[:16]}: {first}>"
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_short(v) for v in value]
    return value


def readable(name: str, raw: str) -> str:
    """The golden file of a render: long strings stand as their length and digest."""
    if name.endswith(".yaml"):
        docs = [_short(d) for d in yaml.safe_load_all(raw)]
        return yaml.safe_dump_all(docs, sort_keys=False, width=1000)
    if name.endswith(".json"):
        return json.dumps(_short(json.loads(raw)), indent=2) + "\n"
    return raw


def ranks_of(plan: Any) -> list[int]:
    return [int(r["rank"]) for r in plan["ranks"]]


def profile_renders(profile: str) -> dict[str, str]:
    inv = ("-i", "inventories/example")
    out = {
        "manifests.yaml": cli("render", profile, *inv, "--what", "manifests"),
        "plan.json": cli("render", profile, *inv, "--what", "plan"),
    }
    for rank in ranks_of(json.loads(out["plan.json"])):
        for what in ("command", "env"):
            out[f"{what}-r{rank}.txt"] = cli(
                "render", profile, *inv, "--what", what, "--rank", str(rank)
            )
    return out


def serving_settings(inventory: str, **override: Any) -> dict[str, Any]:
    """The ``serving_settings`` the serve role passes: the inventory's values, else the
    contract's defaults (the role's defaults read them)."""
    inv = load_inventory(inventory)
    defaults = {**SERVING_DEFAULTS, **TRUST_VARS}
    values = {k: inv.var(k) for k in SETTINGS}
    settings = {k: defaults.get(k, "") if values[k] is None else values[k] for k in SETTINGS}
    return {**settings, **override}


def adapter_render(inventory: str, **override: Any) -> str:
    inv = load_inventory(inventory)
    variables = {k: inv.var(k) for k in DEPLOYMENT_VARS}
    variables = {
        "serving_deployments": variables["serving_deployments"] or [],
        "serving_profile": variables["serving_profile"] or "",
        "serving_profile_file": variables["serving_profile_file"] or "",
        "serving_spark": variables["serving_spark"],
    }
    rendered = FILTERS["sparkrack_serving_render"](
        variables, inv.plan().to_dict(), inv.hostvars, serving_settings(inventory, **override)
    )
    # JSON: what Ansible receives is data; which objects of it are one Python object is not part
    # of it (a YAML dump would show that as anchors).
    return json.dumps(rendered) + "\n"


def inventory_renders(name: str) -> dict[str, str]:
    inventory = f"inventories/{name}"
    inv = ("-i", inventory)
    plans = json.loads(cli("render", *inv, "--what", "plan"))
    out = {
        "manifests.yaml": cli("render", *inv, "--what", "manifests"),
        "plan.json": json.dumps(plans, indent=2) + "\n",
        "gateway.yaml": cli("render", *inv, "--what", "gateway"),
        "images.json": cli("images", *inv, "--json"),
        "addresses.json": cli("addresses", *inv, "--json"),
        "addresses.txt": cli("addresses", *inv),
        "plan-fact.json": json.dumps(load_inventory(inventory).plan().to_dict(), indent=2) + "\n",
        "cluster.yaml": cli("manifests", "cluster", *inv, "--fabric-check"),
        "capacity.txt": cli("plan", *inv),
        "filter.yaml": adapter_render(inventory),
        "filter-prepull.yaml": adapter_render(inventory, serving_prepull=True),
    }
    for plan in plans:
        d = plan["deployment"]
        one = (*inv, "--deployment", d)
        out[f"{d}/manifests.yaml"] = cli("render", *one, "--what", "manifests")
        for rank in ranks_of(plan):
            for what in ("command", "env"):
                out[f"{d}/{what}-r{rank}.txt"] = cli(
                    "render", *one, "--what", what, "--rank", str(rank)
                )
    return out


def write(folder: Path, renders: dict[str, str]) -> None:
    if folder.exists():
        for old in sorted(folder.rglob("*"), reverse=True):
            old.unlink() if old.is_file() else old.rmdir()
    sums = []
    for name, raw in sorted(renders.items()):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(readable(name, raw))
        sums.append(f"{digest(raw)}  {name}\n")
    (folder / SUMS).write_text("".join(sums))


def compare(folder: Path, renders: dict[str, str]) -> list[str]:
    """What differs from the golden folder: one entry per render (with a diff of its file)."""
    sums_file = folder / SUMS
    if not sums_file.is_file():
        return [f"{folder} has no {SUMS}: run with --update-golden"]
    expected = dict(reversed(line.split("  ", 1)) for line in sums_file.read_text().splitlines())
    out = []
    for name in sorted(set(expected) - set(renders)):
        out.append(f"{name}: golden, but no longer rendered")
    for name, raw in sorted(renders.items()):
        if name not in expected:
            out.append(f"{name}: rendered, but not in the golden folder")
        elif expected[name] != digest(raw):
            path = folder / name
            old = path.read_text().splitlines() if path.is_file() else []
            diff = list(
                difflib.unified_diff(
                    old, readable(name, raw).splitlines(), name, "now", lineterm=""
                )
            )
            shown = (
                "\n".join(diff[:80])
                if diff
                else "(the readable form is the same: a string longer than LONG, or the YAML's "
                "anchors, changed)"
            )
            out.append(f"{name}: differs from the golden render\n{shown}")
    return out


def check(folder: Path, render: Callable[[], dict[str, str]], update: bool) -> None:
    renders = render()
    if update:
        write(folder, renders)
    problems = compare(folder, renders)
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("profile", PROFILES)
def test_profile_renders_are_unchanged(profile: str, update_golden: bool) -> None:
    check(GOLDEN / "profiles" / profile, lambda: profile_renders(profile), update_golden)


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_inventory_renders_are_unchanged(inventory: str, update_golden: bool) -> None:
    check(GOLDEN / "inventories" / inventory, lambda: inventory_renders(inventory), update_golden)


def test_the_golden_folder_holds_every_shipped_profile_and_inventory() -> None:
    assert sorted(p.name for p in (GOLDEN / "profiles").iterdir()) == PROFILES
    assert sorted(p.name for p in (GOLDEN / "inventories").iterdir()) == INVENTORIES


def test_a_changed_render_fails_the_comparison(tmp_path: Path) -> None:
    renders = {"a.yaml": yaml.safe_dump({"x": "y" * (LONG + 1), "n": 1}), "b.txt": "cmd --a 1\n"}
    write(tmp_path, renders)
    assert compare(tmp_path, renders) == []
    assert "<2001 characters" in (tmp_path / "a.yaml").read_text()
    changed = compare(tmp_path, {**renders, "b.txt": "cmd --a 2\n"})
    assert (
        len(changed) == 1 and changed[0].startswith("b.txt: differs") and "+cmd --a 2" in changed[0]
    )
    long_changed = compare(
        tmp_path, {**renders, "a.yaml": yaml.safe_dump({"x": "z" * (LONG + 1), "n": 1})}
    )
    assert long_changed and "a.yaml: differs" in long_changed[0]
    assert compare(tmp_path, {"b.txt": "cmd --a 1\n"}) == ["a.yaml: golden, but no longer rendered"]
