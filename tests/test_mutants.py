"""The mutation check itself (tests/mutants.py): a mutation that breaks what a test holds is
caught, one that changes nothing the test sees survives (its negative control), and a mutation
whose text is not in the code stops the check instead of passing untested."""

from __future__ import annotations

import pytest
from mutants import Mutation, check

pytestmark = pytest.mark.tools  # copies the checkout and runs pytest in the copy

TEST = "tests/test_errors.py::test_control_characters_are_escaped"


def test_a_mutation_that_breaks_the_escaping_is_caught() -> None:
    broken = Mutation(
        "printable-escapes-nothing",
        "sparkrack/errors.py",
        "return pattern.sub(lambda m: _code(m.group()), text)",
        "return text",
        TEST,
    )
    caught, tail = check(broken)
    assert caught, tail


def test_a_mutation_the_test_cannot_see_survives() -> None:
    harmless = Mutation(
        "comment-only",
        "sparkrack/errors.py",
        "def printable(",
        "# a comment changes nothing\ndef printable(",
        TEST,
    )
    caught, tail = check(harmless)
    assert not caught, tail


def test_a_mutation_whose_text_moved_stops_the_check() -> None:
    gone = Mutation("gone", "sparkrack/errors.py", "no such text anywhere", "", TEST)
    with pytest.raises(SystemExit, match="occurs 0 times"):
        check(gone)
