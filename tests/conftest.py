"""Fixtures and options every test folder shares."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/data/golden/ from what the code renders now (an explicit act: review "
        "the diff before committing it)",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was asked to rewrite the golden renders."""
    return bool(request.config.getoption("--update-golden"))
