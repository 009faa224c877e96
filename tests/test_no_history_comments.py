"""Comments describe the code, not its history.

Scanned: every tracked text file except test fixtures (tests/data/) and this file — Python
comments and docstrings, ``#`` comments of YAML, shell, Makefile, config files and templates,
Jinja ``{# #}`` comments, and the whole text of Markdown files. Refused in them:

- an issue number: ``issue 5``, ``issue #5``, or a bare ``#5``. Upstream references stay:
  ``PR #24436``, ``upstream #35793``, ``owner/repo#12`` and anything in a URL;
- a team (``the profiles team``) or ``the lead``;
- a file that is not in the repository: any ``*.md`` name, and any path under one of the
  repository's top-level folders (``roles/…``, ``sparkrack/…``, …) unless it holds a
  placeholder (``<name>``, ``{x}``, ``*``), or is under ``inventories/mine/``: the owner's copy
  of the example that the owner's docs have them make (:data:`OWNER_COPY`).

Each rule also runs on a planted comment (negative controls at the end).
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Fixtures, and this file, whose docstring spells out the patterns it refuses.
SKIP = ("tests/data/", "tests/test_no_history_comments.py")
BINARY = (".png", ".json", ".gz", ".tgz", ".zst")
OWNER_COPY = "inventories/mine/"
"""The owner's own inventory, made by ``cp -r inventories/example inventories/mine`` in the owner's
guide: its files are named there and are never in the repository."""
TOP_DIRS = (
    "docs",
    "filter_plugins",
    "inventories",
    "lab",
    "model_profiles",
    "molecule",
    "playbooks",
    "roles",
    "sparkrack",
    "tests",
)

URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
ISSUE = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)
UPSTREAM_REF = re.compile(
    r"(?:\bPRs?|\bpull(?: requests?)?|\bupstream|[\w.-]+/[\w.-]+)\s*#\d+(?:\s*(?:,|and|\+)\s*#\d+)*",
    re.IGNORECASE,
)
NUMBER_REF = re.compile(r"(?<![\w&#])#\d+\b")
TEAM = re.compile(r"\bteams?\b|\bthe lead\b", re.IGNORECASE)
MARKDOWN_FILE = re.compile(r"(?<![\w/.:}-])[\w.-]*\w\.md\b(?![\w/])")
REPO_PATH = re.compile(r"(?<![\w./:-])(?:" + "|".join(TOP_DIRS) + r")/[\w./-]*\.\w+(?![\w/<{*-])")
HASH_COMMENT = re.compile(r"(?:^|\s)#(?!!)(.*)$")
JINJA_COMMENT = re.compile(r"\{#(.*?)#\}", re.DOTALL)


def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if line]


def python_comments(text: str) -> Iterator[tuple[int, str]]:
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                doc = body[0].value.value
                if isinstance(doc, str):
                    for offset, line in enumerate(doc.splitlines()):
                        yield body[0].lineno + offset, line


def hash_comments(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        match = HASH_COMMENT.search(line)
        if match and not (number == 1 and line.startswith("#!")):
            yield number, match.group(1)
    for match in JINJA_COMMENT.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(1)


def comments(path: str, text: str) -> Iterator[tuple[int, str]]:
    """(line, comment text) of one file; Markdown counts as comment throughout."""
    if path.endswith(".py"):
        yield from python_comments(text)
    elif path.endswith(".md"):
        yield from enumerate(text.splitlines(), 1)
    else:
        yield from hash_comments(text)


def findings(comment: str, known: set[str]) -> list[str]:
    """What is wrong with one comment (empty when nothing is); ``known`` from known_names()."""
    text = URL.sub(" ", comment)
    found = [f"cites {m.group()!r}" for m in ISSUE.finditer(text)]
    masked = UPSTREAM_REF.sub(" ", ISSUE.sub(" ", text))
    found += [f"cites issue {m.group()!r}" for m in NUMBER_REF.finditer(masked)]
    found += [f"names {m.group()!r}" for m in TEAM.finditer(text)]
    found += [
        f"names {m.group()!r}, which is not in the repository"
        for pattern in (MARKDOWN_FILE, REPO_PATH)
        for m in pattern.finditer(text)
        if m.group() not in known and not m.group().startswith(OWNER_COPY)
    ]
    return found


def known_names(files: list[str] | set[str]) -> set[str]:
    """Every tracked path, every folder holding one, and every file's base name."""
    names = set(files)
    for name in files:
        names.add(name.rsplit("/", 1)[-1])
        names.update(str(parent) for parent in Path(name).parents)
    return names


def scan(root: Path, files: list[str]) -> list[str]:
    known = known_names(files)
    problems: list[str] = []
    for name in files:
        if name.startswith(SKIP) or name.endswith(BINARY):
            continue
        path = root / name
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for line, comment in comments(name, text):
            problems += [
                f"{name}:{line}: {what} — fix: say what the code does, not where it came from"
                for what in findings(comment, known)
            ]
    return problems


def test_no_history_in_comments() -> None:
    files = tracked()
    assert len(files) > 100
    problems = scan(ROOT, files)
    assert not problems, "\n".join(problems)


# --- negative controls --------------------------------------------------------------------


KNOWN = known_names(
    ["roles/serving/defaults/main.yml", "docs/architecture.md", "sparkrack/errors.py"]
)


@pytest.mark.parametrize(
    "comment",
    [
        "Namespace of every object (contract in issue 5).",
        "see Issue #12",
        "fixed in #12 last week",
        "the profiles team ships it",
        "as the lead asked",
        "Sets the fact (contracts.md).",
        "rendered by sparkrack/netplan_old.py",
        "see roles/serving/tasks/gone.yml.",
        "copied from inventories/minor/group_vars/all.yml",
    ],
)
def test_history_comment_is_found(comment: str) -> None:
    assert findings(comment, KNOWN)


@pytest.mark.parametrize(
    "comment",
    [
        "needs SGLang PR #24436 in the image",
        "upstream #35793 fixes allreduce",
        "sglang PRs #21138, #27998 cherry-picked",
        "see sgl-project/sglang#27998",
        "https://github.com/o/r/issues/12#issuecomment-5",
        "the one error type (sparkrack/errors.py), see docs/architecture.md",
        "each file tests/data/logs/<id>.log and model_profiles/{name}.yml",
        "Where the binary, the helper symlinks and the install script go.",
        "&#39; is an HTML entity; anchors look like &opts and *opts",
        "edit inventories/mine/group_vars/all/main.yml, the owner's copy",
    ],
)
def test_description_comment_passes(comment: str) -> None:
    assert findings(comment, KNOWN) == []


def test_scan_finds_a_planted_comment_in_each_kind_of_file(tmp_path: Path) -> None:
    planted = {
        "roles/x/defaults/main.yml": "---\nx_a: 1  # added for issue 7\n",
        "sparkrack/x.py": '"""Module (contracts.md)."""\n\nA = 1  # the serving team wants it\n',
        "roles/x/templates/a.j2": "{# see #14 #}\nkey=1\n",
        "docs/x.md": "# Title\n\nSee issue 3.\n",
        "Makefile": "all:  # done in #9\n\ttrue\n",
    }
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    problems = scan(tmp_path, sorted(planted))
    assert sorted(p.split(":", 1)[0] for p in problems) == sorted(planted) + ["sparkrack/x.py"]
    clean = {"roles/x/defaults/main.yml": "---\nx_a: &anchor\n  b: '#fff'  # keys: see PR #4\n"}
    (tmp_path / "roles/x/defaults/main.yml").write_text(clean["roles/x/defaults/main.yml"])
    assert scan(tmp_path, list(clean)) == []
