"""Image references: one grammar with the OCI length limits, and moving tags in any spelling."""

from __future__ import annotations

import pytest

from sparkrack.inputs.imageref import MAX_LENGTH, digest_of, is_moving_tag, pin_state, problem

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "image",
    [
        "scitrera/dgx-spark-sglang:0.5.12",
        "registry.example.com:5000/team/fetch:1.0",
        f"vllm/vllm-openai:cu130-nightly@{DIGEST}",
        f"vllm/vllm-openai@{DIGEST}",
        "localhost/sparkrack-fetch:lab",
        "r/" + "a" * 253 + ":" + "t" * 128,  # the limits themselves
    ],
)
def test_references_within_the_grammar_and_limits_are_accepted(image: str) -> None:
    assert problem(image) is None


@pytest.mark.parametrize(
    ("image", "said"),
    [
        ("", "is empty"),
        ("--entrypoint=/bin/sh", "starts with '-'"),
        ("repo:1.0 --privileged", "a space or a control character"),
        ("repo:1.0\n", "a space or a control character"),
        ("repo@sha256:abc", "not sha256: followed by 64"),
        (f"repo@sha512:{'0' * 128}", "not sha256: followed by 64"),
        (f"repo@{DIGEST.upper().replace('SHA256', 'sha256')}", "not sha256: followed by 64"),
        ("r/" + "a" * 254 + ":1", "a name of 256 characters (at most 255)"),
        ("repo:" + "t" * 129, "a tag of 129 characters (at most 128)"),
        ("Registry/Repo:1", "not a valid reference"),
        ("repo::1", "not a valid reference"),
        (42, "is a int, not text"),
    ],
)
def test_each_refusal_says_what_is_wrong(image: object, said: str) -> None:
    found = problem(image)
    assert found is not None and said in found


def test_the_longest_valid_reference_fits_the_schema_bound() -> None:
    longest = "r/" + "a" * 253 + ":" + "t" * 128 + "@" + DIGEST
    assert problem(longest) is None and len(longest) == MAX_LENGTH


@pytest.mark.parametrize(
    ("image", "moving"),
    [
        ("vllm/vllm-openai:cu130-nightly", True),
        ("vllm/vllm-openai:nightly-2026-11-01", True),
        ("ghcr.io/x/y:latest", True),
        ("ghcr.io/x/y:Latest", True),
        ("ghcr.io/x/y:1.0-NIGHTLY", True),
        ("ghcr.io/x/y", True),  # no tag: the runtime pulls latest
        ("localhost:5000/x", True),  # a registry port is not a tag
        ("scitrera/dgx-spark-sglang:0.5.12", False),
        (f"vllm/vllm-openai:cu130-nightly@{DIGEST}", False),
        (f"vllm/vllm-openai@{DIGEST}", False),
    ],
)
def test_moving_tags(image: str, moving: bool) -> None:
    assert is_moving_tag(image) is moving


def test_pin_states() -> None:
    assert pin_state("x/y") == "moving tag"
    assert pin_state("x/y:1") == "tag"
    assert pin_state(f"x/y:1@{DIGEST}") == "digest" and digest_of(f"x/y@{DIGEST}") == DIGEST
