"""The package's shape: top level of domain packages, the CLI and the Ansible adapter at the
edges, no import cycle, no engine name outside the engine modules, no private name imported
across modules, tests that mirror the package, and packages stacked in declared floors (an import
only runs down, so no package-level loop either). Each checker is also run on a planted
violation."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sparkrack"
ENGINE_DIR = PACKAGE / "serving" / "engines"
# The only modules at the package's top; everything else lives in a domain package.
TOP_MODULES = {"__init__.py", "__main__.py", "errors.py", "contract.py", "sources.py"}
DATA_DIRS = {"data", "__pycache__"}
ENGINE_BRANCH = re.compile(r"engine *[!=]=")
# Where an engine's name may stand as a string literal outside serving/engines/: the SM121 patch
# catalog (it names the engine files it patches) and the data files shipped with the package (the
# engine-check harness runs inside the engine's own environment). Tests are outside the package.
ENGINE_NAME_EXEMPT = (PACKAGE / "patches", PACKAGE / "data")
# A container image is named by its publisher (``scitrera/dgx-spark-sglang:0.5.12``): a word of
# an image reference is the registry's, not an engine name sparkrack decides on.
IMAGE_REFERENCE = re.compile(r"[\w.-]+(?:/[\w.-]+)+(?::[\w.-]+|@sha256:[0-9a-f]{64})")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(root, p): p for p in sorted(root.rglob("*.py"))}


def imports(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (at any depth of its code)."""
    known = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
                    break
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# The house's floors, ground first: a package (or top-level module) imports only from floors
# below its own. ``sources`` (the source documents, which refusals cite) lies under everything;
# ``sparkrack`` is the package's own __init__ (its version); ``data`` holds the programs that run
# inside other environments and import nothing of sparkrack.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("sources",),
    ("errors", "sparkrack", "data"),
    ("node", "patches", "planner"),
    ("contract",),
    ("fabric",),
    ("inputs",),
    ("k8s", "diagnose"),
    ("k3s", "serving"),
    ("bench", "preflight"),
    ("adapters", "matrix", "watch"),
    ("observe",),
    ("cli",),
    ("__main__",),
)
KNOWN_BACK_ARROWS: set[tuple[str, str]] = set()
"""Module edges allowed to run up a floor, each with the reason: none."""


def package_of(module: str) -> str:
    """``sparkrack.serving.objects.pod`` -> ``serving``; the package itself -> ``sparkrack``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_imports(
    graph: dict[str, set[str]],
    allowed: Collection[tuple[str, str]] = (),
) -> dict[str, set[str]]:
    """Package -> the other packages it imports, the module edges in ``allowed`` left out."""
    out: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for name, targets in graph.items():
        for target in targets:
            a, b = package_of(name), package_of(target)
            if a != b and (name, target) not in allowed:
                out[a].add(b)
    return out


def back_arrows(packages: dict[str, set[str]], floors: tuple[tuple[str, ...], ...]) -> list[str]:
    """Package imports that run sideways or up the declared floors, and packages on no floor."""
    floor = {name: n for n, names in enumerate(floors) for name in names}
    out = [f"{name}: on no floor" for name in sorted(packages) if name not in floor]
    return out + sorted(
        f"{a} (floor {floor[a] + 1}) -> {b} (floor {floor[b] + 1})"
        for a, targets in packages.items()
        for b in targets
        if a in floor and b in floor and floor[b] >= floor[a]
    )


def private_imports(root: Path) -> list[str]:
    """``from sparkrack.x import _name`` lines (a private name used outside its module)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(root.name):
                out += [
                    f"{path}:{node.lineno}: {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    return out


def top_level_strays(root: Path) -> list[str]:
    """Top-level modules other than TOP_MODULES, and folders that are not packages."""
    out = []
    for item in sorted(root.iterdir()):
        if item.is_file() and item.suffix == ".py" and item.name not in TOP_MODULES:
            out.append(f"module {item.name}")
        elif item.is_dir() and item.name not in DATA_DIRS and not (item / "__init__.py").exists():
            out.append(f"folder {item.name} (no __init__.py)")
    return out


def edge_imports(root: Path, edge: str, allowed: tuple[str, ...]) -> list[str]:
    """Modules outside ``allowed`` that import ``edge`` (a package-internal module prefix)."""
    return sorted(
        f"{name} -> {target}"
        for name, targets in imports(root).items()
        if not name.startswith(allowed)
        for target in targets
        if target == edge or target.startswith(edge + ".")
    )


def external_imports(root: Path, prefixes: tuple[str, ...], allowed: tuple[str, ...]) -> list[str]:
    """Modules outside ``allowed`` that import a third-party module under ``prefixes``."""
    out = []
    for name, path in modules(root).items():
        if name.startswith(allowed):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            found = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                found = [node.module or ""]
            out += [f"{name} -> {m}" for m in found if m.startswith(prefixes)]
    return sorted(out)


def unmirrored_test_dirs(tests: Path, root: Path) -> list[str]:
    """Folders of tests/ holding tests (at any depth, data folders aside) that name no package
    of sparkrack/ at the same path."""
    return [
        d.relative_to(tests).as_posix()
        for d in sorted(p for p in tests.rglob("*") if p.is_dir())
        if not DATA_DIRS & set(d.relative_to(tests).parts)
        and list(d.glob("test_*.py"))
        and not (root / d.relative_to(tests) / "__init__.py").exists()
    ]


def engine_branches(root: Path, engine_dir: Path) -> list[str]:
    return [
        f"{path}:{n}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if engine_dir not in path.parents
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ENGINE_BRANCH.search(line)
    ]


def documentation(tree: ast.AST) -> set[int]:
    """ids of the string constants that document: docstrings of modules, classes and functions,
    and the bare strings after an assignment that document an attribute."""
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                docs.add(id(stmt.value))
    return docs


def engine_name_literals(
    root: Path, engine_dir: Path, names: list[str], exempt: tuple[Path, ...] = ()
) -> list[str]:
    """String literals (docstrings aside, f-string parts included) outside ``engine_dir`` and
    ``exempt`` in which an engine's name stands as a word, image references left out."""
    word = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b")
    out = []
    for path in sorted(root.rglob("*.py")):
        if any(folder == path or folder in path.parents for folder in (engine_dir, *exempt)):
            continue
        tree = ast.parse(path.read_text(), str(path))
        docs = documentation(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and word.search(IMAGE_REFERENCE.sub("", node.value))
            ):
                out.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.value[:60]!r}")
    return out


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    (root / "engines").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "engines" / "__init__.py").write_text("")
    (root / "a.py").write_text("from pkg.b import thing\n")
    (root / "b.py").write_text("def f():\n    from pkg import a\n    return a\nthing = 1\n")
    (root / "c.py").write_text(
        "from pkg.a import _hidden\nif profile.engine != 'sglang':\n    x = 1\n"
    )
    (root / "engines" / "e.py").write_text("if profile.engine == 'vllm':\n    y = 2\n")
    (root / "cli").mkdir()
    (root / "cli" / "__init__.py").write_text("from ansible.errors import AnsibleError\n")
    (root / "cli" / "names.py").write_text(
        '"""Reads vllm:generation_tokens (documentation may name engines)."""\n'
        "RUNNING = 'vllm:num_requests_running'\n"
        "IMAGE = 'vllm/vllm-openai:v0.19.0'\n"
        "def served(p):\n"
        '    """The name vllm serves."""\n'
        "    return p.get(f'{p}.x') or p['sglang']['served_model_name']\n"
    )
    (root / "engines" / "f.py").write_text("import pkg.cli\nfrom ansible.plugins import x\n")
    (root / "loose").mkdir()
    return root


def test_no_import_cycle_in_sparkrack() -> None:
    assert cycles(imports(PACKAGE)) == []


def test_cycle_checker_finds_a_planted_cycle(planted: Path) -> None:
    assert cycles(imports(planted)) == [["pkg.a", "pkg.b"]]


def test_no_engine_branch_outside_the_engine_modules() -> None:
    assert engine_branches(PACKAGE, ENGINE_DIR) == []


def test_branch_checker_finds_a_planted_branch(planted: Path) -> None:
    found = engine_branches(planted, planted / "engines")
    assert len(found) == 1 and "c.py:2" in found[0]


def test_no_engine_name_outside_the_engine_modules() -> None:
    from sparkrack.serving.engines import ENGINES

    assert engine_name_literals(PACKAGE, ENGINE_DIR, list(ENGINES), ENGINE_NAME_EXEMPT) == []


def test_engine_name_checker_finds_planted_names(planted: Path) -> None:
    found = engine_name_literals(planted, planted / "engines", ["sglang", "vllm", "trtllm"])
    # Not the docstrings, not the image reference, not the engine module's own branch.
    assert [f.split(": ", 1)[0] for f in found] == [
        "pkg/c.py:2",
        "pkg/cli/names.py:2",
        "pkg/cli/names.py:6",
    ]
    assert engine_name_literals(planted, planted / "engines", ["sglang"], (planted / "c.py",)) == [
        "pkg/cli/names.py:6: 'sglang'"
    ]


def test_no_private_name_imported_across_modules() -> None:
    assert private_imports(PACKAGE) == []


def test_private_import_checker_finds_a_planted_import(planted: Path) -> None:
    found = private_imports(planted)
    assert len(found) == 1 and found[0].endswith("_hidden")


def test_top_level_holds_only_packages_and_three_modules() -> None:
    assert top_level_strays(PACKAGE) == []


def test_stray_checker_finds_planted_strays(planted: Path) -> None:
    assert top_level_strays(planted) == [
        "module a.py",
        "module b.py",
        "module c.py",
        "folder loose (no __init__.py)",
    ]


def test_the_core_never_imports_the_cli() -> None:
    assert edge_imports(PACKAGE, "sparkrack.cli", ("sparkrack.cli", "sparkrack.__main__")) == []


def test_only_the_adapter_imports_ansible_plugin_interfaces() -> None:
    # Reading an inventory through ansible-core's InventoryManager and vault is core work
    # (turning the reader's AnsibleError into a refusal too); raising AnsibleFilterError or
    # implementing a plugin is the adapter's.
    edges = ("ansible.plugins", "ansible.template")
    assert external_imports(PACKAGE, edges, ("sparkrack.adapters",)) == []
    raising = [
        str(path.relative_to(ROOT))
        for path in sorted(PACKAGE.rglob("*.py"))
        if "AnsibleFilterError" in path.read_text() and "adapters" not in path.parts
    ]
    assert raising == []


def test_edge_checkers_find_planted_imports(planted: Path) -> None:
    assert edge_imports(planted, "pkg.cli", ("pkg.cli",)) == ["pkg.engines.f -> pkg.cli"]
    found = external_imports(planted, ("ansible.errors", "ansible.plugins"), ("pkg.adapters",))
    assert found == ["pkg.cli -> ansible.errors", "pkg.engines.f -> ansible.plugins"]


def test_ansible_loads_one_thin_filter_plugin_without_path_edits() -> None:
    plugins = sorted((ROOT / "filter_plugins").glob("*.py"))
    assert [p.name for p in plugins] == ["sparkrack_filters.py"]
    text = plugins[0].read_text()
    assert "sys.path" not in text and "from sparkrack.adapters.ansible import FilterModule" in text


def test_tests_mirror_the_package() -> None:
    assert unmirrored_test_dirs(ROOT / "tests", PACKAGE) == []


def test_mirror_checker_finds_a_planted_folder(planted: Path, tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "engines").mkdir(parents=True)
    (tests / "engines" / "test_e.py").write_text("")
    (tests / "nowhere").mkdir()
    (tests / "nowhere" / "test_n.py").write_text("")
    (tests / "engines" / "deeper").mkdir()
    (tests / "engines" / "deeper" / "test_d.py").write_text("")
    assert unmirrored_test_dirs(tests, planted) == ["engines/deeper", "nowhere"]


def test_no_package_level_cycle() -> None:
    assert cycles(package_imports(imports(PACKAGE), KNOWN_BACK_ARROWS)) == []


def test_every_package_import_runs_down_the_floors() -> None:
    graph = imports(PACKAGE)
    assert back_arrows(package_imports(graph, KNOWN_BACK_ARROWS), FLOORS) == []
    # Each allowed edge still exists: once its branch lands, the entry goes.
    assert {(a, b) for a, targets in graph.items() for b in targets} >= KNOWN_BACK_ARROWS


@pytest.fixture
def layered(tmp_path: Path) -> Path:
    """Three packages on three floors, no file-level cycle, and one import that runs up."""
    root = tmp_path / "pkg"
    for package in ("low", "mid", "high"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "high" / "app.py").write_text("from pkg.mid import service\n")
    (root / "mid" / "service.py").write_text("from pkg.low import base\n")
    (root / "low" / "base.py").write_text("x = 1\n")
    (root / "low" / "helper.py").write_text("from pkg.mid.service import y\n")
    return root


def test_package_checkers_find_a_planted_back_arrow(layered: Path) -> None:
    graph = imports(layered)
    assert cycles(graph) == []  # the file-level check sees nothing wrong
    packages = package_imports(graph)
    assert cycles(packages) == [["low", "mid"]]
    floors = (("low",), ("mid",), ("high",), ("pkg",))
    assert back_arrows(packages, floors) == ["low (floor 1) -> mid (floor 2)"]
    assert back_arrows(packages, floors[1:]) == ["low: on no floor"]
    allowed = {("pkg.low.helper", "pkg.mid.service")}
    assert back_arrows(package_imports(graph, allowed), floors) == []


MAX_LINES = 700
ENGINE_TABLES = {"serving/engines/sglang.py"}
"""Engine modules that are mostly the engine's tables of options and checks (exempt)."""
LAB = ROOT / "lab"
"""The lab's scripts (the lab driver, its control plane, the benchmarks): held to the same limit,
with no exemption."""


def long_modules(root: Path, limit: int) -> dict[str, int]:
    """Modules of ``root`` (path relative to it) with more than ``limit`` lines; hidden folders
    (a lab's ``.state``) are not source."""
    counts = {
        p.relative_to(root).as_posix(): len(p.read_text().splitlines())
        for p in root.rglob("*.py")
        if not any(part.startswith(".") for part in p.relative_to(root).parts)
    }
    return {name: n for name, n in sorted(counts.items()) if n > limit}


@pytest.mark.parametrize(
    ("root", "exempt"), [(PACKAGE, ENGINE_TABLES), (LAB, set())], ids=["sparkrack", "lab"]
)
def test_no_module_over_700_lines_but_the_engine_tables(root: Path, exempt: set[str]) -> None:
    long = long_modules(root, MAX_LINES)
    assert set(long) - exempt == set(), long


def test_long_module_checker_finds_a_planted_long_module(planted: Path) -> None:
    (planted / "engines" / "long.py").write_text("x = 1\n" * 701)
    (planted / ".state").mkdir()
    (planted / ".state" / "long.py").write_text("x = 1\n" * 701)
    assert long_modules(planted, MAX_LINES) == {"engines/long.py": 701}
