"""What the gate tests (test_engine_gate.py: SGLang; test_engine_gate_vllm.py: vLLM and
TensorRT-LLM) share: an engine's release wheel, its app served on a real socket, the shipped gate
run as a rendered head pod runs it, a client that asks either, and the rendered head pods."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from sparkrack import contract
from sparkrack.serving.deployments.bundle import from_inventory, render_serving
from sparkrack.serving.enginecheck import upstream

ROOT = Path(__file__).resolve().parents[3]
GATE = ROOT / "sparkrack" / "serving" / "scripts" / contract.GATE_FILE

SERVE_OVER_SOCKET = """
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    def _any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        answer = client.request(self.command, self.path, content=body,
                                headers={k: v for k, v in self.headers.items()})
        self.send_response(answer.status_code)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)
    do_GET = do_POST = _any
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
"""The end of every app program: each request on a real socket is handed to ``client`` (a
starlette TestClient of the app the program built) and its answer written back; the port goes
to stdout."""


class Release(NamedTuple):
    engine: Path
    """The release's own files (its wheel, unpacked)."""
    deps: Path
    """Its pinned dependencies (FastAPI, starlette, ...)."""


def release(dist: str, version: str) -> Release:
    """The engine check's environment of ``dist==version``, from the checkout's cache unless
    SPARKRACK_CACHE_DIR names another."""
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(ROOT / ".cache"))
    env = upstream.ensure_env(dist, version)
    return Release(env / "engine", upstream.deps_dir(dist, version))


@contextlib.contextmanager
def served_app(program: str, deps: Path, given: list[Any]) -> Iterator[int]:
    """Runs ``program`` (which builds ``client``, a TestClient of the engine's app) and then
    :data:`SERVE_OVER_SOCKET`, isolated, with ``deps`` first on its path and ``given`` as one JSON
    line on its stdin; yields the port it serves on."""
    boot = f"import sys; sys.path[:0] = {[str(deps)]!r}; exec(sys.argv[1])"
    with subprocess.Popen(
        [sys.executable, "-I", "-c", boot, program + SERVE_OVER_SOCKET],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(given) + "\n")
        proc.stdin.flush()
        yield int(proc.stdout.readline())
        proc.terminate()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(port: int, proc: subprocess.Popen[str]) -> None:
    """Until the gate accepts connections (it prints nothing the test reads)."""
    for _ in range(600):
        assert proc.poll() is None, "the gate exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"nothing listens on 127.0.0.1:{port}")


@contextlib.contextmanager
def gate_process(upstream_port: int, also: tuple[str, ...] = ()) -> Iterator[int]:
    """The shipped gate, as a rendered head pod runs it, in front of ``upstream_port``; yields
    the port it listens on."""
    port = free_port()
    with subprocess.Popen(
        [
            sys.executable,
            "-I",
            str(GATE),
            "--host-env",
            "GATE_HOST",
            "--port",
            str(port),
            "--upstream",
            f"127.0.0.1:{upstream_port}",
            *(w for path in also for w in ("--also", path)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env={"PATH": os.environ["PATH"], "GATE_HOST": "127.0.0.1"},
    ) as proc:
        wait_for(port, proc)
        yield port
        proc.terminate()


class Engine:
    def __init__(self, port: int, api_key: str, admin: str) -> None:
        self.port, self.api_key, self.admin = port, api_key, admin

    def ask(self, port: int, path: str, key: str | None, method: str = "POST") -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        conn.request(method, path, body=b"{}", headers=headers)
        answer = conn.getresponse()
        status, text = answer.status, answer.read().decode()
        conn.close()
        return status, text


def serve_render(inventory: str) -> tuple[dict[str, Any], int]:
    """The serve render of ``inventory`` and its API port."""
    inv = from_inventory(inventory)
    return render_serving(inv), inv.deployments[0].res.ctx.api_port


def heads(rendered: dict[str, Any], engine_name: str) -> list[dict[str, Any]]:
    """The StatefulSets of the render whose first container is ``engine_name``'s."""
    return [
        doc
        for d in rendered["deployments"]
        for doc in d["manifests"]
        if doc["kind"] == "StatefulSet"
        and doc["spec"]["template"]["spec"]["containers"][0]["name"] == engine_name
    ]
