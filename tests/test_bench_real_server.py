"""`sparkrack bench` against a real OpenAI-compatible server nobody here wrote: `transformers serve`
(PyPI, CPU) serving a tiny random-weight Llama that the test builds (config, weights and a BPE
tokenizer made in-test: nothing is downloaded from a model hub).

A random-weight model collapses into whitespace loops at once, so this is also the real-world
check that looping output is flagged, live by the guard and post hoc by the fingerprint.
`transformers serve` without continuous batching serves one request at a time, which is the real
case of a peak that is not backed by concurrency.

transformers and torch (CPU wheel) live in their own virtual environment under
``.cache/bench/`` (built once, about a minute; reused afterwards), not in the project's.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrack.bench import server
from sparkrack.cli import main

REPO = Path(__file__).resolve().parent.parent
TRANSFORMERS = "5.23.0"
TORCH = "2.13.0+cpu"  # the CPU wheel; pinned with its local label so pip never takes a CUDA build
# Every package of the environment, pinned (pip resolves within exactly these versions).
PINS = [
    "accelerate==1.15.0",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "click==8.5.1",
    "fastapi==0.165.0",
    "filelock==4.2.11",
    "fsspec==2026.9.0",
    "h11==0.16.0",
    "hf-xet==1.8.0",
    "httpcore2==2.16.2",
    "httpx2==2.16.2",
    "huggingface_hub==2.4.0",
    "idna==3.20",
    "Jinja2==3.1.6",
    "jiter==0.19.0",
    "markdown-it-py==4.3.0",
    "MarkupSafe==3.0.4",
    "mdurl==0.1.2",
    "mpmath==1.3.0",
    "networkx==3.6.1",
    "numpy==2.4.6",
    "openai==3.54.0",
    "opentelemetry-api==1.45.2",
    "packaging==26.3",
    "psutil==7.2.2",
    "pydantic==2.14.3",
    "pydantic_core==2.50.4",
    "Pygments==2.21.0",
    "PyYAML==6.0.3",
    "regex==2026.11.15",
    "rich==15.0.0",
    "safetensors==0.8.0",
    "shellingham==1.5.4",
    "sniffio==1.3.1",
    "starlette==1.10.0",
    "sympy==1.14.0",
    "tokenizers==0.23.3",
    "tqdm==4.70.1",
    "truststore==0.10.5",
    "typer==0.29.2",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "uvicorn==0.54.0",
]
VENV = Path(
    os.environ.get("SPARKRACK_TSERVE_VENV") or REPO / ".cache" / "bench" / f"tserve-{TRANSFORMERS}"
)
MAX_TOKENS = 32

MAKE_MODEL = """
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1])
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
text = [
    "The scheduler routes every request to the cluster and measures the decode rate.",
    "Algorithms order packets across the network; the kernel checks each token twice.",
]
trainer = trainers.BpeTrainer(
    vocab_size=400,
    special_tokens=["<unk>", "<s>", "</s>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
)
tok.train_from_iterator(text * 20, trainer)
fast = PreTrainedTokenizerFast(
    tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
)
fast.chat_template = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
fast.save_pretrained(out)
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
    bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
)
LlamaForCausalLM(config).save_pretrained(out)
"""


def _build_venv() -> None:
    """The isolated environment: a venv with torch (CPU) + transformers[serving], all pinned."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / f"{VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (VENV / ".complete").is_file():
            return
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=120)
        constraints = VENV / "constraints.txt"
        constraints.write_text("\n".join([*PINS, f"torch=={TORCH}"]) + "\n")
        cmd = [
            str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet",
            "--disable-pip-version-check", "-c", str(constraints),
            f"torch=={TORCH}", f"transformers[serving]=={TRANSFORMERS}",
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            pytest.fail(f"cannot build {VENV}: {proc.stderr.strip()[-800:]}")
        # tokenizers alone, for the project's interpreter (--tokenizer); no other package leaks.
        target = ["--no-deps", "--target", str(VENV / "tokenizers-only"), "tokenizers==0.23.3"]
        proc = subprocess.run([*cmd[:5], *target], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.fail(f"cannot install tokenizers: {proc.stderr.strip()[-800:]}")
        (VENV / ".complete").write_text(" ".join(cmd) + "\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _build_venv()
    out = tmp_path_factory.mktemp("tiny-llama") / "tiny-llama"
    subprocess.run(
        [str(VENV / "bin" / "python"), "-c", MAKE_MODEL, str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    return out


@pytest.fixture(scope="module")
def served(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`transformers serve` on 127.0.0.1, offline, the tiny model preloaded; yields its URL."""
    home = tmp_path_factory.mktemp("hf-home")
    (home / "hub").mkdir()
    env = dict(os.environ, HF_HOME=str(home), HF_HUB_CACHE=str(home / "hub"), HF_HUB_OFFLINE="1")
    port = _free_port()
    log = home / "serve.log"
    cmd = [
        str(VENV / "bin" / "transformers"), "serve", "--device", "cpu", "--host", "127.0.0.1",
        "--port", str(port), "--default-seed", "0", str(model_dir),
    ]  # fmt: skip
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url + "/health", timeout=2) as resp,
            ):
                if resp.status == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _bench(url: str, model: Path, out: Path, *extra: str) -> list[str]:
    # transformers serve lists no model for a folder it serves: hence --skip-model-check.
    return [
        "bench", "--url", url, "--model", str(model), "--skip-model-check",
        "--concurrency", "1,4", "--max-tokens", str(MAX_TOKENS), "--no-metrics",
        "--no-progress", "--out", str(out), *extra,
    ]  # fmt: skip


def _results(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return data


def test_guard_fails_the_looping_requests_live(
    served: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_bench(served, model_dir, tmp_path))
    output = "".join(capsys.readouterr())
    assert "Traceback" not in output
    assert code == 2, output
    data = _results(tmp_path)
    assert data["meta"]["warmup"] == {"requests": 1, "max_tokens": 16, "wall_s": pytest.approx(
        data["meta"]["warmup"]["wall_s"]), "failed": 0}  # fmt: skip
    for level in data["levels"]:
        assert level["status"] == "FAILED"
        for req in level["requests"]:
            assert req["status"] == "failed" and req["guard"] == "tripped", req
            assert req["error"].startswith("repetition guard: "), req["error"]


def test_token_counts_match_usage_and_the_fingerprint_flags_the_loop(
    served: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_bench(served, model_dir, tmp_path, "--no-guard"))
    output = "".join(capsys.readouterr())
    assert "Traceback" not in output
    assert code == 2, output  # GARBAGE, not ok
    levels = {lv["concurrency"]: lv for lv in _results(tmp_path)["levels"]}
    assert sorted(levels) == [1, 4]
    for level in levels.values():
        assert level["status"] == "GARBAGE" and level["ok"] == level["concurrency"]
        for req in level["requests"]:
            # The server sends one token per chunk and its usage in the last chunk.
            assert req["output_tokens_source"] == "usage" and req["finish_reason"] == "length"
            assert req["output_tokens"] == MAX_TOKENS == req["text_chunks"]
            assert any(n.startswith("fingerprint: ") for n in req["notes"]), req["notes"]
    # One request at a time: the n=4 peak is not backed by concurrency and says so.
    n4 = levels[4]
    assert n4["mean_concurrent_streams"] < 2.0 and n4["overlap_warning"]
    assert n4["peak_tok_s"] > 2 * n4["aggregate_tok_s"]
    assert "WARNING peak not backed by concurrency" in output


def test_tokenizer_counts_tokens_when_the_server_sends_no_usage(
    model_dir: Path, tmp_path: Path
) -> None:
    """The model's own tokenizer (read with `tokenizers`) counts what a usage-less server sent."""
    tokens = 120
    with server.spawn(["--no-usage", "--rate", "2000", "--ttft", "0.01"]) as url:
        code = "import sys; from sparkrack.cli import main; raise SystemExit(main(sys.argv[1:]))"
        args = [
            "bench", "--url", url, "--model", server.BASE_MODEL, "--concurrency", "1",
            "--max-tokens", str(tokens), "--no-progress", "--no-metrics", "--warmup", "0",
            "--allow-no-usage", "--tokenizer", str(model_dir), "--out", str(tmp_path),
        ]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{VENV / 'tokenizers-only'}")
        # The project's interpreter; only the tokenizers package comes from the isolated env.
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    req = _results(tmp_path)["levels"][0]["requests"][0]
    text = "".join(itertools.islice(server.token_stream("normal", 0), tokens))
    count = subprocess.run(
        [str(VENV / "bin" / "python"), "-c",
         "import sys; from tokenizers import Tokenizer; "
         "t = Tokenizer.from_file(sys.argv[1]); "
         "print(len(t.encode(sys.stdin.read(), add_special_tokens=False).ids))",
         str(model_dir / "tokenizer.json")],
        input=text, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert req["output_tokens_source"] == "tokenizer:tiny-llama/tokenizer.json"
    assert req["output_tokens"] == int(count.stdout) != tokens  # BPE pieces, not server tokens
    assert req["decode_tok_s"] is not None and _results(tmp_path)["levels"][0]["status"] == "ok"
