"""The package's shape: no import cycle, no engine-name branch outside the engine modules, no
private name imported across modules. Each checker is also run on a planted violation."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sparkrack"
ENGINE_DIR = PACKAGE / "profiles" / "engines"
ENGINE_BRANCH = re.compile(r"engine *[!=]=")


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


def engine_branches(root: Path, engine_dir: Path) -> list[str]:
    return [
        f"{path}:{n}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if engine_dir not in path.parents
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ENGINE_BRANCH.search(line)
    ]


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


def test_no_private_name_imported_across_modules() -> None:
    assert private_imports(PACKAGE) == []


def test_private_import_checker_finds_a_planted_import(planted: Path) -> None:
    found = private_imports(planted)
    assert len(found) == 1 and found[0].endswith("_hidden")
