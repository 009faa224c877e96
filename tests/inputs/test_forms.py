"""Accepted forms: what each accepts, what it says when it does not, never a regex."""

from __future__ import annotations

import datetime
from typing import Any

import jsonschema
import pytest

from sparkrack.inputs import forms


@pytest.mark.parametrize(
    ("form", "good", "bad"),
    [
        (forms.PORT, [1, 65535, "30000"], [0, 65536, True, 30000.0, "030000", "abc", None]),
        (forms.dns_label(), ["sparkrack", "a-1"], ["Bad_NS", "-a", "a-", "a" * 64, "ns\n", 1]),
        (forms.SUBDOMAIN, ["sparkrack-hf-token", "a.b"], ["A", "a_b", "x" * 254]),
        (
            forms.HOST_DIR,
            ["/var/lib/sparkrack/hf", "/data", "/srv/models/hf"],
            ["relative", "/", "/var/lib", "/etc/x", "/var/lib/rancher/k3s", "/a/../etc", "/a b"],
        ),
        (forms.memory_size(128e9, "a Spark"), ["32Gi", "1.5G", "512Mi"], ["lots", "0", "512Gi"]),
        (forms.seconds(1, 10), [1, 10, "5"], [0, 11, 1.5, "soon"]),
        (forms.SWITCH, [True, False, "true", "no"], ["maybe", 1, None]),
        (forms.IMAGE, ["x/y:1"], ["", "x/y:1 --privileged", "$(HF_TOKEN)"]),
    ],
)
def test_each_form_accepts_and_refuses(form: forms.Form, good: list[Any], bad: list[Any]) -> None:
    assert [form.problem(v) for v in good] == [None] * len(good)
    assert all(form.problem(v) for v in bad)


def test_yaml_typed_values_are_told_to_quote_it() -> None:
    assert forms.yaml_hint(True, "string").endswith("quote it")
    assert forms.yaml_hint(datetime.date(2026, 1, 1), "string").endswith("quote it")
    assert forms.yaml_hint(8, "string").endswith("quote it")
    assert forms.type_name(datetime.date(2026, 1, 1)) == "a date"


def test_schema_errors_are_said_in_words_without_the_expression() -> None:
    pattern = r"^[a-z]{1,3}(?!\n)$"
    schema = {"type": "object", "properties": {"n": {"type": "string", "pattern": pattern}}}
    validator = jsonschema.Draft202012Validator(schema)
    words = {pattern: "one to three lower-case letters, at most 3 characters"}
    [err] = validator.iter_errors({"n": "ABCD"})
    message, fix = forms.schema_problem(err, words)
    assert message == "is 4 characters long (at most 3)"
    assert fix == f"write {words[pattern]}" and pattern not in message + fix
    [err] = validator.iter_errors({"n": True})
    message, fix = forms.schema_problem(err, words)
    assert message == "is the boolean true, not text" and fix.endswith("quote it")


def test_a_switch_means_what_the_check_accepts() -> None:
    for value in (True, "true", " Yes ", "TRUE"):
        assert forms.SWITCH.problem(value) is None and forms.switch_on(value) is True
    for value in (False, "false", "no"):
        assert forms.SWITCH.problem(value) is None and forms.switch_on(value) is False
    # Words the check refuses never switch anything on.
    for value in ("on", "1", 1, None, "maybe"):
        assert forms.SWITCH.problem(value) is not None and forms.switch_on(value) is False
