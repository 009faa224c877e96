"""`sparkrack bench` against a real OpenAI-compatible server nobody here wrote: `transformers serve`
(PyPI, CPU) serving a tiny random-weight Llama that the test builds (config, weights and a BPE
tokenizer made in-test: nothing is downloaded from a model hub).

A random-weight model collapses into whitespace loops at once, so this is also the real-world
check that looping output is flagged, live by the guard and post hoc by the fingerprint.
`transformers serve` without continuous batching serves one request at a time, which is the real
case of a peak that is not backed by concurrency.

transformers and torch live in their own virtual environment under ``.cache/bench/`` (built once:
a 2.3 GB download, 4.3 GB on disk; reused afterwards), not in the project's. torch is PyPI's build, a
CUDA one: the NVIDIA runtime wheels it links to are installed so that it imports; it runs on the CPU.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
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

from sparkrack.bench import server, server_text
from sparkrack.cli import main

pytestmark = pytest.mark.tools  # transformers and torch in their own venv (PyPI once)

REPO = Path(__file__).resolve().parents[2]
TRANSFORMERS = "5.23.0"
# Every wheel of the environment: name==version and its sha256 (pip --require-hashes checks them).
# Installed with --no-deps: torch's NVIDIA wheels are the ones its shared libraries link to, and
# UNNEEDED lists what torch requires but never loads on the CPU.
LOCK = """
accelerate==1.15.0 97eacca0b73e45cb867dbf8c5d5d4dc32219544300e0c8992c7334dc2ef33cec
annotated-doc==0.0.7 6bc31bbbec6dfaaedc1676dbc11dbda96fe22a2b5c400e9ebad113fec44a9dc6
annotated-types==0.8.0 f072f4d804ea359e4eaf198b1af7a8b0943881a87f31bb764f8bf219bb9419e0
anyio==4.16.0 c66ae634e0b8228396b801741beb3294326d4b6102f7bba4041c0dfb58c29026
click==8.5.1 8bb5376d2006950386f8c6427613334a2acadc5f559cb80e638d00b4df957e37
fastapi==0.165.0 896f48462042bb4f162147eb8fac7e858753dc1f486765709baf105d70e4fc5b
filelock==4.2.11 020e229e4bb9d410fc799c07ddf45fa217cba970278f40b30751d94f309b69e2
fsspec==2026.9.0 8dd6e646e99ea382bd85f97a45e6b526a442d79423a7dc673f1e2756d05fcb5f
h11==0.16.0 63cf8bbe7522de3bf65932fda1d9c2772064ffb3dae62d55932da54b31cb6c86
hf-xet==1.8.0 29dab7c904cd1914a0439c6e1306c12c7497c8bd32290fbe563ebf51ca4b6d6d
httpcore2==2.16.2 16051ae2a42f776007543f32de9349a317b23d2cbb4e1456b4bac0e88b87419a
httpx2==2.16.2 f05c13aade4c45dbf1c9060647a1058f0acad62398fad96e741269edb33d46f5
huggingface-hub==2.4.0 42ecfd93ede47bdd333daebbf66a32d7bfe2e18752754fe4d2d4f98a0179d801
idna==3.20 ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c
jinja2==3.1.6 85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67
jiter==0.19.0 cc4a2b70ecd4f102583344c1f8cc5dc11618665b1889286bb3b4279c19b337dd
markdown-it-py==4.3.0 7aa1511a46c39138de78d9eba92ce47e63124d8003fc98b3a351909e04239efa
markupsafe==3.0.4 6da83a088f8ef93b2d483a8232a4dbf4d69d3d8496b568a03c56becac43e1808
mdurl==0.1.2 84008a41e51615a49fc9966191ff91509e3c40b939176e643fd50a5c2196b8f8
mpmath==1.3.0 a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c
networkx==3.6.1 d47fbf302e7d9cbbb9e2555a0d267983d2aa476bac30e90dfbe5669bd57f3762
numpy==2.4.6 89cd468399cfd2504718f0ba50e410dca55a170b61a02ad92bb18c8a65186e93
nvidia-cublas==13.1.1.3 37936a16db8fe4ac1f065c2139360608a543a09275cb1a1af612e08cfa065436
nvidia-cuda-cupti==13.0.85 4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8
nvidia-cuda-nvrtc==13.0.88 ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575
nvidia-cuda-runtime==13.0.96 7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548
nvidia-cudnn-cu13==9.20.0.48 0c45dd8eeb50b603f07995b1b300c62ffe6a1980482b82b3bcf94a4ca9d49304
nvidia-cufft==12.0.0.61 6c44f692dce8fd5ffd3e3df134b6cdb9c2f72d99cf40b62c32dde45eea9ddad3
nvidia-cufile==1.15.1.6 08a3ecefae5a01c7f5117351c64f17c7c62efa5fffdbe24fc7d298da19cd0b44
nvidia-curand==10.4.0.35 1aee33a5da6e1db083fe2b90082def8915f30f3248d5896bcec36a579d941bfc
nvidia-cusparse==12.6.3.3 2b3c89c88d01ee0e477cb7f82ef60a11a4bcd57b6b87c33f789350b59759360b
nvidia-cusparselt-cu13==0.8.1 786ce87568c303fadb5afcc7102d454cd3040d75f6f8626f5db460d1871f4dd0
nvidia-nccl-cu13==2.29.7 edd81538446786ec3b73972543e53bb43bcaf0bfc8ef76cb679fcc390ffe136d
nvidia-nvjitlink==13.0.88 13a74f429e23b921c1109976abefacc69835f2f433ebd323d3946e11d804e47b
nvidia-nvshmem-cu13==3.4.5 290f0a2ee94c9f3687a02502f3b9299a9f9fe826e6d0287ee18482e78d495b80
openai==3.54.0 3cdb7d0d85bb765c7c92e7e2922c4a6cb9beb085b161b03da07f4dff61805916
opentelemetry-api==1.45.2 2cbd737377e710ee740d261c94e93fa0f08e6d037c18f17513cc0a2d94479a34
packaging==26.3 d7193f7c8e4e93f444fde0262bf90af30e16fa0ad0ad44cb553c87339b23cd1c
psutil==7.2.2 076a2d2f923fd4821644f5ba89f059523da90dc9014e85f8e45a5774ca5bc6f9
pydantic==2.14.3 3f7b347782ab7e4cf4c798496ae3a82787d9f21ec12676a9c564355eeef8daa8
pydantic-core==2.50.4 0574866e05f6adeecc520d87e87dd06210c0a51706341f6ef8421572f5a64444
pygments==2.21.0 2363c69b61c4a97c838da3b130dcd6468f4848992b21a82f2a63ec34377137d9
pyyaml==6.0.3 b8bb0864c5a28024fac8a632c443c87c5aa6f215c0b126c449ae1a150412f31d
regex==2026.11.15 aafeb64c8569d69edfbf772feba49d2a001d3dca0f43e6a71e3735587ecb8222
rich==15.0.0 33bd4ef74232fb73fe9279a257718407f169c09b78a87ad3d296f548e27de0bb
safetensors==0.8.0 fd6f3f93c9a0a7cc2788ee63fb763353d4bd2e89b0751bc78fcf7dda00bea774
setuptools==84.2.1 ca140b45d5325a9478f880e351484f62fef15f336462e449ca0c03c873d589c2
shellingham==1.5.4 7ecfff8f2fd72616f7481040475a65b2bf8af90a56c89140852d1120324e8686
sniffio==1.3.1 2f6da418d1f1e0fddd844478f41680e794e6051915791a034ff65e5f100525a2
starlette==1.10.0 478c0ab3b4ced6e82719849c118fa406f0278a3499c1a898cd15cd31bdc38ce4
sympy==1.14.0 e091cc3e99d2141a0ba2847328f5479b05d94a6635cb96148ccb3f34671bd8f5
tokenizers==0.23.3 376851d22bcf9d650a5c3090bb83e6cf9e895fbf0595369fa4cd43c1f69b5f87
torch==2.13.0 60fcdcb2f3876e21146cb4524ef06397d727ca9ad5f020818547e25075fe3cb7
tqdm==4.70.1 c293e525e6fef9c20e8728fd4612df02a0aa31bb5fe91ecd93e123b1b7bffa73
transformers==5.23.0 018e82fd07490ad5bb58414f65e31576033dc7f36bed10c574843f69b90991bf
truststore==0.10.5 9aaaedaefaf06d8b206278cf8b5012bc897f485a874503501e12d776df78951c
typer==0.29.2 f30731f8ca758368b836b3714872e58e395cef8fcaff918c853b1969ed5274e7
typing-extensions==4.16.0 481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8
typing-inspection==0.4.5 bc210535442b39e1bf2805e0c7a17dfd6a4ace760c84c7f7d16245d23a6b1c39
uvicorn==0.54.0 505bdb0f318731d45f1f712071fc781a8981f6847a31c902c9f5e652d4f67faf
"""
UNNEEDED = frozenset({"cuda-toolkit", "cuda-bindings", "triton"})
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


def _requirements() -> str:
    """LOCK as a pip requirements file, every line with its hash."""
    lines = []
    for entry in LOCK.split("\n"):
        if entry:
            pin, digest = entry.split()
            if pin.startswith("transformers=="):
                pin = pin.replace("transformers", "transformers[serving]", 1)
            lines.append(f"{pin} --hash=sha256:{digest}")
    return "\n".join(lines) + "\n"


def _unmet_requirements(python: str) -> list[str]:
    """pip check's complaints about the venv of ``python``, less the requirements UNNEEDED names.

    With --no-deps nothing outside LOCK is installed, so this is how a LOCK that misses a
    dependency shows.
    """
    check = subprocess.run(
        [python, "-m", "pip", "check", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    unneeded = r"\S+ \S+ requires (\S+), which is not installed\."
    return [
        line
        for line in check.stdout.splitlines()
        if not ((found := re.fullmatch(unneeded, line)) and found.group(1).lower() in UNNEEDED)
    ]


def _build_venv() -> None:
    """The isolated environment: a venv with torch + transformers[serving], exactly LOCK."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    wanted = _requirements()
    with open(VENV.parent / f"{VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = VENV / ".complete"
        if done.is_file() and done.read_text() == wanted:
            return
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=120)
        requirements = VENV / "requirements.txt"
        requirements.write_text(wanted)
        python = str(VENV / "bin" / "python")
        pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        # --no-compile: bytecode is written for what the server imports, when it imports it.
        pip += ["--only-binary=:all:", "--require-hashes", "--no-deps", "--no-compile"]
        proc = subprocess.run(
            [*pip, "-r", str(requirements)], capture_output=True, text=True, timeout=1200
        )
        if proc.returncode != 0:
            pytest.fail(f"cannot build {VENV}: {proc.stderr.strip()[-800:]}")
        unmet = _unmet_requirements(python)
        if unmet:
            pytest.fail(f"LOCK is incomplete or inconsistent: {unmet}")
        # tokenizers alone, for the project's interpreter (--tokenizer); no other package leaks.
        (tok,) = [ln for ln in wanted.splitlines() if ln.startswith("tokenizers==")]
        (VENV / "tokenizers.txt").write_text(tok + "\n")
        target = ["--target", str(VENV / "tokenizers-only")]
        proc = subprocess.run(
            [*pip, *target, "-r", str(VENV / "tokenizers.txt")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            pytest.fail(f"cannot install tokenizers: {proc.stderr.strip()[-800:]}")
        done.write_text(wanted)


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
    code = main(_bench(served, model_dir, tmp_path, "--no-canary"))
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
    code = main(_bench(served, model_dir, tmp_path, "--no-guard", "--no-canary"))
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
    text = "".join(itertools.islice(server_text.token_stream("normal", 0), tokens))
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


def test_unmet_requirements_names_a_dependency_the_lock_lacks(tmp_path: Path) -> None:
    """Negative control of the LOCK check: jinja2 alone, without its markupsafe, is reported."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    python = str(tmp_path / "venv" / "bin" / "python")
    (jinja2,) = [ln for ln in _requirements().splitlines() if ln.startswith("jinja2==")]
    (tmp_path / "jinja2.txt").write_text(jinja2 + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--only-binary=:all:", "--require-hashes", "-r", str(tmp_path / "jinja2.txt")],
        check=True, timeout=300,
    )  # fmt: skip
    assert _unmet_requirements(python) == [
        "jinja2 3.1.6 requires markupsafe, which is not installed."
    ]


def test_canary_flags_the_random_weight_model_at_every_level(
    served: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The answer canary (a sum, a copied line, a JSON echo at temperature 0) finds every answer
    of the random-weight model wrong at every level: WRONG-ANSWERS, exit 2, the fingerprint's
    reasons kept beside it."""
    args = _bench(served, model_dir, tmp_path, "--no-guard", "--canary-max-tokens", "32")
    code = main(args)
    output = "".join(capsys.readouterr())
    assert "Traceback" not in output
    levels = {lv["concurrency"]: lv for lv in _results(tmp_path)["levels"]}
    assert sorted(levels) == [1, 4]
    for n, level in levels.items():
        canary = level["canary"]
        assert canary["asked"] == max(3, n) and canary["right"] == 0, canary
        assert {a["question"] for a in canary["answers"]} == {"sum", "copy", "json"}
        assert level["status"] == "WRONG-ANSWERS" and level["ok"] == n, level["notes"]
        print(f"canary n={n}: {canary['wall_s']:.2f} s")
    assert "canary sum: no number in the answer" in output
    assert code == 2
