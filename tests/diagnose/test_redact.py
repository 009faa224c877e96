"""``redact`` runs its patterns only on the lines that may hold a match; the result must be the
definition's: every pattern, in order, over the whole text (``reference``). The samples put a
line break inside every whitespace run of each shape and fold case the ways the re module does."""

from __future__ import annotations

import random

import pytest

from sparkrack.diagnose.redact import _SHAPES, MASK, redact

SAMPLES = (
    "server_args=ServerArgs(model_path='m', api_key='sk-1', port=3)",
    'admin_api_key = "adm-2"',
    '{"gateway_master_key": "sk-3"}',
    "\"password\" : 'pw-4'",
    "API_KEY=ak-5",
    "--admin-api-key=ak-6",
    "db_secret=s-7",
    "launch_server --api-key argv-8 --port 30000",
    "launch_server --hf-token argv-9 --port 30000",
    "SPARKRACK_ENGINE_KEY=ek-10",
    "HF_TOKEN=hf_QwErTyUiOp11",
    "headers={'Authorization': 'Bearer gw-12'}",
    "Authorization : Basic b-13",
    "x-api-key: xk-14",
    "ApI_kEy='case-15'",
    "APİ_KEY='dotted-16'",
    "apı_key='dotless-17'",
    "ſecret='long-s-18'",
    "\u212aEY: no",
    "api_key: plain-19",
    "  master_key: sk-plain-20  # LiteLLM",
    "--api-key=argv-21",
    "ServerArgs(api_key='esc-22\\'tail-22', port=1)",
    "vllm serve m --api_key us-23 --port 1",
    'launch --api-key "q-24 tail-24" --port 1',
    "launch --api-key \\\n  cont-25 --port 1",
    "apiKey: camel-26",
    "API-KEY: dash-27",
    "api_key = spaced-28",
    '{"msg": "{\\"api_key\\": \\"esc-json-29\\"}"}',
)
BREAKS = ("\n", "\n  \n\t", " \n \n ")


def reference(text: str) -> str:
    for shape in _SHAPES:
        text = shape.pattern.sub(shape.replacement, text)
    return text


def variants(sample: str) -> list[str]:
    """``sample`` with each of its spaces, and all of them, turned into each line break."""
    out = [sample]
    for brk in BREAKS:
        out.append(sample.replace(" ", brk))
        spaces = [i for i, c in enumerate(sample) if c == " "]
        out += [sample[:i] + brk + sample[i + 1 :] for i in spaces]
    for op in (":", "="):
        out += [sample.replace(op, f"\n{op}\n"), sample.replace(op, f"{op}\n")]
    return out


@pytest.mark.parametrize("sample", SAMPLES)
def test_redact_is_the_patterns_over_the_whole_text(sample: str) -> None:
    for text in variants(sample):
        for framed in (text, f"noise\n{text}\nnoise", f"a\n\n{text}\n\n\nb\n"):
            assert redact(framed) == reference(framed), framed


def test_redact_matches_the_definition_on_mixed_logs() -> None:
    rng = random.Random(40)
    pool = [line for sample in SAMPLES for line in variants(sample)]
    pool += ["noise", "", "   ", "NCCL INFO Channel 00/0", "Bearer", ":", "="]
    for _ in range(200):
        text = "\n".join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
        assert redact(text) == reference(text), text


def test_a_line_far_from_any_key_is_left_as_it_was() -> None:
    text = "\n".join(["api_key='k'", *["filler api_key-free x"] * 3, "Authorization:", "x"])
    assert redact(text).split("\n")[1:4] == ["filler api_key-free x"] * 3


@pytest.mark.parametrize(
    "line",
    [
        "launch_server --api-key=argv-key-1 --port 30000",
        "vllm serve m --admin-api-key=argv-key-1",
        "general_settings: {master_key: argv-key-1}",
        "  master_key: argv-key-1",
        "api_key: argv-key-1",
        '{"gateway_master_key": "argv-key-1"}',
        "engine_password=argv-key-1",
        "server_args=ServerArgs(api_key='argv-\\'-key-1\\'argv-key-1')",
        "vllm serve m --api_key argv-key-1",
        'launch_server --api-key "argv-key-1 argv-key-1"',
        "launch_server --api-key \\\n    argv-key-1",
        "api-key: argv-key-1",
        "API-KEY: argv-key-1",
        "apiKey: argv-key-1",
        "api_key = argv-key-1",
        '{"msg": "{\\"api_key\\": \\"argv-key-1\\", \\"n\\": 1}"}',
        '{"msg": "{\\"gateway_master_key\\":\\"argv-key-1\\"}"}',
    ],
)
def test_each_shape_of_a_key_is_masked(line: str) -> None:
    out = redact(line)
    assert "argv-key-1" not in out and MASK in out, out


def test_negative_control_values_of_other_settings_stay() -> None:
    for line in (
        "port: 30000",
        "max_new_tokens: 512",
        "hf_token: None",
        "api_key: null",
        "--api-key-env SPARKRACK_ENGINE_KEY",
        "model: org/name",
    ):
        assert redact(line) == line
