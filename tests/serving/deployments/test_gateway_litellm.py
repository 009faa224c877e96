"""The rendered gateway config, loaded by the real LiteLLM proxy from PyPI, routes each alias to its
own backend: two ``sparkrack bench-server`` instances on loopback, each accepting only the key the
gateway sends to its deployment, so a request that reached the wrong backend fails."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.bench.server import spawn
from sparkrack.serving.context import ServingContext, context_from_inventory
from sparkrack.serving.deployments import gateway
from sparkrack.serving.deployments.bundle import from_vars

pytestmark = pytest.mark.tools  # the real LiteLLM proxy (PyPI once)

ROOT = Path(__file__).resolve().parents[3]
CONSTRAINTS = ROOT / "tests" / "data" / "litellm-constraints.txt"
CACHE = Path(os.environ.get("SPARKRACK_CACHE_DIR") or ROOT / ".cache")
MASTER_KEY = "sk-sparkrack-test"


@pytest.fixture(scope="session")
def litellm() -> Path:
    """``litellm`` of the pinned release, in its own venv under the cache (built once)."""
    venv = CACHE / "litellm" / gateway.LITELLM_VERSION
    exe = venv / "bin" / "litellm"
    venv.parent.mkdir(parents=True, exist_ok=True)
    # One builder at a time (parallel test workers); the others find its venv complete.
    with (venv.parent / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not exe.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
            # --no-compile: Python writes the bytecode of what it imports, when it imports it.
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]
            spec = f"litellm[proxy]=={gateway.LITELLM_VERSION}"
            proc = subprocess.run(
                [*pip, "-c", str(CONSTRAINTS), spec], capture_output=True, text=True, timeout=1500
            )
            if proc.returncode != 0 or not exe.exists():
                pytest.fail(f"cannot install {spec} from PyPI: {proc.stderr[-600:]}")
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def proxy(
    exe: Path, config: dict[str, object], tmp: Path, keys: dict[str, str] | None = None
) -> Iterator[str]:
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    env = {
        **os.environ,
        gateway.MASTER_KEY_ENV: MASTER_KEY,
        **(keys or {}),
        **gateway.OFFLINE_ENV,  # as the rendered pod: no download of the price table
        "NO_PROXY": "127.0.0.1,localhost",
    }
    log = (tmp / "litellm.log").open("w")
    cmd = [str(exe), "--config", str(path), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health/readiness", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((tmp / "litellm.log").read_text()[-2000:]) from None
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def stream(url: str, model: str) -> tuple[int, str]:
    """(HTTP status, concatenated content) of one streaming chat request through the gateway."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say something."}],
        "stream": True,
        "max_tokens": 64,
    }
    req = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {MASTER_KEY}", "Content-Type": "application/json"},
    )
    text = []
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    for choice in json.loads(line[6:]).get("choices", []):
                        delta = choice.get("delta") or {}
                        text.append(delta.get("content") or delta.get("reasoning_content") or "")
            return resp.status, "".join(text)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


@pytest.fixture(scope="module")
def deployments(tmp_path_factory: pytest.TempPathFactory) -> tuple[ServingContext, list[Any]]:
    tmp = tmp_path_factory.mktemp("profiles")
    data = yaml.safe_load((ROOT / "model_profiles" / "gemma-4-31b-it.yml").read_text())
    data["sglang"].update(served_model_name="sparkrack-test", mem_fraction_static=0.45)
    path = tmp / "small.yml"
    path.write_text(yaml.safe_dump(data))
    ctx = context_from_inventory("inventories/example")
    deps = [
        {
            "name": "alpha",
            "profile": str(path),
            "sparks": ["spark1", "spark2"],
            "topology": {"tp": 2},
            "alias": "model-alpha",
        },
        {
            "name": "beta",
            "profile": str(path),
            "sparks": ["spark3", "spark4"],
            "topology": {"tp": 2},
            "alias": "model-beta",
        },
    ]
    return ctx, list(from_vars({"serving_deployments": deps}, ctx, "inv.yml").deployments)


def test_each_alias_streams_from_its_own_backend(
    litellm: Path, deployments: tuple[ServingContext, list[Any]], tmp_path: Path
) -> None:
    """Each backend accepts only its deployment's engine key, which the gateway reads from the
    variable its pod gets from that deployment's key Secret."""
    ctx, deps = deployments
    keys = {d.name: f"sk-{d.name}-{secrets.token_hex(8)}" for d in deps}
    env = {str(gateway.key_env(d)): keys[d.name] for d in deps}
    with (
        spawn(["--api-key-env", "K", "--rate", "400"], env={"K": keys["alpha"]}) as alpha,
        spawn(["--api-key-env", "K", "--rate", "400"], env={"K": keys["beta"]}) as beta,
    ):
        urls = {"alpha": f"{alpha}/v1", "beta": f"{beta}/v1"}
        config = gateway.config(deps, ctx, urls)
        assert keys["alpha"] not in yaml.safe_dump(config)
        with proxy(litellm, config, tmp_path, env) as url:
            for alias in ("model-alpha", "model-beta"):
                status, text = stream(url, alias)
                assert status == 200, text
                assert len(text.split()) >= 3, text
            # Negative control: routes swapped, each backend refuses the other's key.
            swapped = gateway.config(deps, ctx, {"alpha": urls["beta"], "beta": urls["alpha"]})
        with proxy(litellm, swapped, tmp_path, env) as url:
            status, text = stream(url, "model-alpha")
            assert status != 200 or not text, "a misrouted request must not succeed"


def test_the_pinned_litellm_reads_the_offline_variable(litellm: Path) -> None:
    """Each name of ``gateway.OFFLINE_ENV`` is one the pinned LiteLLM's own source reads, so the
    rendered variable is not a dead letter (negative control: a misspelt name is not found)."""
    site = next((litellm.parent.parent / "lib").glob("python3*/site-packages/litellm"))
    source = "\n".join(p.read_text(errors="replace") for p in site.rglob("*.py"))

    def read(name: str) -> bool:
        return f'getenv("{name}"' in source or f'environ.get("{name}"' in source

    assert all(read(name) for name in gateway.OFFLINE_ENV)
    assert not read("LITELLM_LOCAL_MODEL_COST_MAPS")
