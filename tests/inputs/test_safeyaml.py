"""The strict YAML loader: what it refuses, what it still accepts, and how fast it gives up.

Profiles go through it in tests/serving/profile/test_hostile_profiles.py; these cases pin the loader itself,
with a negative control each (the same document without the hostile part loads).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from sparkrack.errors import SparkrackError
from sparkrack.inputs.safeyaml import DEFAULT_LIMITS, Limits, load_bytes, load_file, loads


def refusal(text: str, limits: Limits = DEFAULT_LIMITS) -> tuple[str, str, str]:
    with pytest.raises(SparkrackError) as exc:
        loads(text, "f.yml", limits)
    (problem,) = exc.value.problems
    assert problem.file == "f.yml" and problem.fix
    return problem.key, problem.message, problem.rule


def test_plain_documents_load_like_safe_load() -> None:
    text = Path("model_profiles/glm-4.7-nvfp4.yml").read_text()
    assert loads(text, "glm") == yaml.safe_load(text)
    assert loads("", "empty") is None


def test_duplicate_keys_are_refused_at_their_path() -> None:
    assert refusal("a: 1\nb:\n  c: 1\n  c: 2\n")[::2] == ("b.c", "yaml-duplicate-key")
    assert refusal("l:\n- {x: 1, x: 1}\n")[::2] == ("l.0.x", "yaml-duplicate-key")
    # YAML 1.1 reads both as True: equal keys after construction are duplicates too.
    assert refusal("yes: 1\ntrue: 2\n")[2] == "yaml-duplicate-key"
    assert loads("b:\n  c: 1\n  d: 2\n", "f") == {"b": {"c": 1, "d": 2}}


def test_merge_keys_override_without_being_duplicates() -> None:
    assert loads("a: &x {p: 1, q: 2}\nb:\n  <<: *x\n  p: 3\n", "f")["b"] == {"p": 3, "q": 2}


def test_alias_bombs_and_recursive_aliases_are_refused_fast() -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    start = time.monotonic()
    assert refusal("\n".join(levels) + "\n")[2] == "yaml-alias"
    assert time.monotonic() - start < 5  # a bound against hanging, not a benchmark
    assert refusal("a: &a [1, *a]\n")[2] == "yaml-alias"
    assert refusal("a: &a {x: {y: *a}}\n")[2] == "yaml-alias"
    # Few, small aliases are still YAML.
    assert loads("\n".join(levels[:2]) + "\n", "f")["b"][0] == ["x"] * 9


def test_alias_count_and_expanded_depth_are_bounded() -> None:
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * 65) + "]\n"
    assert refusal(many)[2] == "yaml-alias"
    assert loads(many, "f", Limits(max_aliases=65))["b"] == [1] * 65
    nest = "a: &a " + "[" * 20 + "]" * 20 + "\nb: " + "[" * 20 + "*a" + "]" * 20 + "\n"
    assert refusal(nest)[2] == "yaml-depth"
    assert loads(nest, "f", Limits(max_depth=64))["a"] is not None


def test_deep_nesting_is_refused_before_python_recursion() -> None:
    for text in (
        "x: " + "[" * 5000 + "]" * 5000,
        "".join("  " * i + f"k{i}:\n" for i in range(40)),
    ):
        assert refusal(text)[2] == "yaml-depth"
    assert loads("x: " + "[" * 30 + "]" * 30, "f") is not None


def test_size_is_bounded_in_bytes_and_in_values(tmp_path: Path) -> None:
    big = tmp_path / "big.yml"
    big.write_bytes(b"a: 1\n" + b"#" * 600_000 + b"\n")
    with pytest.raises(SparkrackError) as exc:
        load_file(big)
    assert exc.value.problems[0].rule == "yaml-size"
    assert refusal("a: [" + "1, " * 20_000 + "]\n")[2] == "yaml-size"
    assert load_file(big, Limits(max_bytes=700_000)) == {"a": 1}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("a: 1\n".encode("utf-16"), "UTF-16"),
        ("a: 1\n".encode("utf-16-le"), "NUL"),
        ("a: 1\n".encode("utf-32"), "UTF-32"),
        ("a: 1\nb: caf\xe9\n".encode("latin-1"), "line 2"),
    ],
    ids=["utf16-bom", "utf16-no-bom", "utf32", "latin1"],
)
def test_only_utf8_is_read(data: bytes, words: str) -> None:
    with pytest.raises(SparkrackError) as exc:
        load_bytes(data, "f.yml")
    assert exc.value.problems[0].rule == "yaml-encoding"
    assert words in exc.value.problems[0].message


def test_utf8_with_bom_is_read() -> None:
    assert load_bytes("\ufeffb: café\n".encode(), "f") == {"b": "café"}


@pytest.mark.parametrize("value", [".nan", ".NaN", ".inf", "-.Inf", "!!float nan", "1.0e+999"])
def test_non_finite_numbers_are_refused(value: str) -> None:
    assert refusal(f"a:\n  b: [1, {value}]\n")[::2] == ("a.b.1", "yaml-non-finite")


def test_finite_floats_and_strings_named_nan_load() -> None:
    assert loads("a: [1.5, 'nan', nan, -0.0]\n", "f") == {"a": [1.5, "nan", "nan", -0.0]}


def test_other_breakage_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    assert refusal("a: [\n")[2] == "yaml"
    assert refusal("a: 1\n---\nb: 2\n")[2] == "yaml"
    assert refusal("a: \x07\n")[2] == "yaml"
    assert refusal("a: " + "9" * 5000 + "\n")[::2] == ("a", "yaml")
    assert refusal("? [a]\n: 1\n")[2] == "yaml-key"
    assert refusal("a: !!python/object:os.system {}\n")[2] == "yaml"
    with pytest.raises(SparkrackError) as exc:
        load_file(tmp_path)  # a directory
    assert exc.value.problems[0].rule == "yaml"
