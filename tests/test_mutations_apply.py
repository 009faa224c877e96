"""Every mutation of the mutation check (tests/mutants.py, ``make mutants``) still applies to the
code as it is now, and names a test that exists: a refactor that moves a mutation's text fails
here, in the fast tier, not months later when someone runs ``make mutants``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from mutants import MUTATIONS, ROOT, Mutation, apply


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_the_mutation_applies_and_its_test_exists(mutation: Mutation, tmp_path: Path) -> None:
    target = tmp_path / mutation.file
    target.parent.mkdir(parents=True)
    shutil.copy2(ROOT / mutation.file, target)
    apply(tmp_path, mutation)
    assert target.read_text() != (ROOT / mutation.file).read_text()
    path, _, name = mutation.test.partition("::")
    assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M), mutation.test


def test_negative_control_a_moved_text_fails(tmp_path: Path) -> None:
    first = MUTATIONS[0]
    moved = Mutation(first.name, first.file, first.old + " moved", first.new, first.test)
    with pytest.raises(SystemExit, match="occurs 0 times"):
        test_the_mutation_applies_and_its_test_exists(moved, tmp_path)
