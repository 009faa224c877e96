"""A refusal line cannot be forged or hidden by the values it quotes."""

from __future__ import annotations

from sparkrack.errors import Problem


def test_control_characters_are_escaped() -> None:
    line = str(Problem("x\n.yml", "image", "value ends in \x1b[2J\r", "fix\x07", "schema"))
    assert "\x1b" not in line and "\r" not in line and "\x07" not in line
    assert line.startswith("x\\x0a.yml: image: value ends in \\x1b[2J\\x0d")
    assert "\n" not in line


def test_a_message_may_still_span_lines_on_purpose() -> None:
    text = str(
        Problem("inv.yml", "serving_deployments", "over-commit:\nspark1 144 / 120", "x", "r")
    )
    assert text.splitlines()[1] == "spark1 144 / 120 — fix: x [r]"
