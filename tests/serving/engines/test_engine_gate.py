"""The gate in front of SGLang's head: what a holder of the engine key can reach of the engine.

Behind the gate stands SGLang's own request handling as far as it decides who reaches what: a
FastAPI app with every route ``sglang/srt/entrypoints/http_server.py`` declares, at the auth level
it declares, SGLang's ``sglang/srt/utils/auth.py`` middleware with both keys, and ``/server_info``
answering what SGLang answers (``dataclasses.asdict(server_args)``: both keys), served over a real
socket from the release wheel the engine check installs. The gate is the shipped file, run as the
rendered head pod runs it, in front of it.
"""

from __future__ import annotations

import ast
import copy
import secrets
import socket
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from gate_support import (
    Engine,
    gate_process,
    heads,
    release,
    serve_render,
    served_app,
)

from sparkrack import contract
from sparkrack.serving.deployments.bundle import from_inventory
from sparkrack.serving.enginecheck import upstream
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.listeners import LOOPBACK_ADDRESS, Bind
from sparkrack.serving.scripts import engine_gate

pytestmark = pytest.mark.tools  # real engine wheels

HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
SGLANG_RELEASES = ("0.5.10", "0.5.11", "0.5.12", "0.5.13")


# SGLang's app as far as access goes (routes and auth levels from http_server.py, the middleware
# from utils/auth.py), as a TestClient that served_app puts on a real socket.
ENGINE = textwrap.dedent(
    """
    import ast, importlib.util, json, sys
    engine, harness, api_key, admin_api_key = json.loads(sys.stdin.readline())
    spec = importlib.util.spec_from_file_location("enginecheck_harness", harness)
    standins = importlib.util.module_from_spec(spec)
    sys.modules["enginecheck_harness"] = standins
    spec.loader.exec_module(standins)
    sys.meta_path.append(standins.StandinFinder(["opentelemetry"]))
    spec = importlib.util.spec_from_file_location(
        "sglang_auth", engine + "/sglang/srt/utils/auth.py")
    auth = importlib.util.module_from_spec(spec)
    sys.modules["sglang_auth"] = auth
    spec.loader.exec_module(auth)
    tree = ast.parse(open(engine + "/sglang/srt/entrypoints/http_server.py").read())
    from fastapi import FastAPI
    from starlette.testclient import TestClient
    app = FastAPI(telemetry={"tracing": False, "metrics": False, "logs": False})
    server_args = {"model_path": "org/model", "api_key": api_key, "admin_api_key": admin_api_key}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        routes, level = [], "NORMAL"
        for d in node.decorator_list:
            if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute):
                if d.func.attr in ("get", "post", "api_route") and d.args:
                    if isinstance(d.args[0], ast.Constant):
                        routes.append(d.args[0].value)
            if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "auth_level":
                level = d.args[0].attr
        for route in routes:
            def endpoint(route=route):
                return server_args if route.endswith("server_info") else {"route": route}
            app.add_api_route(route, auth.auth_level(auth.AuthLevel[level])(endpoint),
                              methods=["GET", "POST"])
    # /metrics is mounted by add_prometheus_middleware (utils/common.py), not declared above
    app.add_api_route("/metrics", lambda: {"route": "/metrics"}, methods=["GET"])
    auth.add_api_key_middleware(app, api_key=api_key, admin_api_key=admin_api_key)
    client = TestClient(app)
    """
)


@pytest.fixture(scope="module", params=[SGLANG_RELEASES[0], SGLANG_RELEASES[-1]])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    wheel = release("sglang", request.param)
    key, admin = "sk-engine-" + secrets.token_hex(12), "sk-admin-" + secrets.token_hex(12)
    given = [str(wheel.engine), str(upstream.DATA / "harness.py"), key, admin]
    with served_app(ENGINE, wheel.deps, given) as port:
        yield Engine(port, key, admin)


@pytest.fixture(scope="module")
def gate(engine: Engine) -> Iterator[int]:
    """The shipped gate, as the head pod runs it, in front of the engine."""
    with gate_process(engine.port) as port:
        yield port


def test_the_engine_key_reads_the_admin_key_from_sglang_directly(engine: Engine) -> None:
    """Negative control: without the gate, the engine key reads both keys from /server_info,
    percent-encoded or not, and opens /load_lora_adapter_from_tensors."""
    for path in ("/server_info", "/get_server_info", "/%73erver_info"):
        status, text = engine.ask(engine.port, path, engine.api_key, "GET")
        assert status == 200 and engine.admin in text, (path, status, text)
    assert engine.ask(engine.port, "/load_lora_adapter_from_tensors", engine.api_key)[0] == 200


def test_through_the_gate_no_key_opens_what_sglang_must_not_show(engine: Engine, gate: int) -> None:
    for key in (engine.api_key, engine.admin):
        for path in (
            "/server_info",
            "/get_server_info",
            "/%73erver_info",
            "/v1/../server_info",
            "//server_info",
            "/update_weights_from_tensor",
            "/load_lora_adapter_from_tensors",
            "/flush_cache",
        ):
            for method in ("GET", "POST"):
                status, text = engine.ask(gate, path, key, method)
                assert status == 404, (path, method, status, text)
                assert engine.admin not in text and engine.api_key not in text


def test_through_the_gate_the_api_health_and_metrics_answer_as_sglang_does(
    engine: Engine, gate: int
) -> None:
    assert engine.ask(gate, "/v1/chat/completions", engine.api_key)[0] == 200
    assert engine.ask(gate, "/v1/chat/completions", None)[0] == 401  # SGLang's own auth
    assert engine.ask(gate, "/v1/models", engine.api_key, "GET")[0] == 200
    for path in ("/health", "/health_generate", "/metrics"):
        assert engine.ask(gate, path, None, "GET")[0] == 200, path


def test_one_request_per_connection(engine: Engine, gate: int) -> None:
    """A second request written behind an allowed one on the same connection never reaches
    the engine."""
    with socket.create_connection(("127.0.0.1", gate), timeout=60) as s:
        auth = f"Authorization: Bearer {engine.api_key}\r\n"
        s.sendall(
            f"GET /v1/models HTTP/1.1\r\nHost: x\r\n{auth}\r\n"
            f"GET /server_info HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode()
        )
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.count(b"HTTP/1.") == 1 and engine.admin.encode() not in answer


def raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def test_the_gate_refuses_what_it_cannot_pass_on_whole(gate: int) -> None:
    """A chunked body (its end is the engine's to find, not the gate's), a second length and a
    line that is not HTTP are refused; the gate keeps serving."""
    chunked = b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert raw(gate, chunked).startswith(b"HTTP/1.1 411 ")
    twice = b"POST /v1/models HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"
    assert raw(gate, twice).startswith(b"HTTP/1.1 400 ")
    assert raw(gate, b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw(gate, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").split(b" ", 2)[1] == b"200"


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_the_gate_passes_no_route_sglang_guards_with_a_key_but_the_api(version: str) -> None:
    """Every route of each release's http_server.py the gate passes on is an OpenAI route,
    health or metrics; none is an admin route, and both server_info routes are refused."""
    tree = ast.parse((release("sglang", version).engine / HTTP_SERVER).read_text())
    passed = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            levels = [ast.unparse(d) for d in node.decorator_list if "auth_level" in ast.unparse(d)]
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and d.args and isinstance(d.args[0], ast.Constant):
                    route = str(d.args[0].value)
                    if engine_gate.allowed(route):
                        passed[route] = levels
    assert "/v1/chat/completions" in passed and "/health_generate" in passed
    assert all(r.startswith("/v1/") or r in engine_gate.EXACT for r in passed)
    assert not any(levels for levels in passed.values()), passed
    assert "/server_info" not in passed and "/get_server_info" not in passed


def head_problems(rendered: dict[str, Any], api_port: int) -> list[str]:
    """Where an SGLang head pod is not SGLang on loopback behind the gate on the pod's address
    at the API port (the only container port the Service, the probes and Prometheus reach),
    holding no key."""
    out = []
    for d in rendered["deployments"]:
        for doc in d["manifests"]:
            if doc["kind"] != "StatefulSet" or not doc["metadata"]["name"].endswith("-r0"):
                continue
            containers = doc["spec"]["template"]["spec"]["containers"]
            if containers[0]["name"] != "sglang":
                continue
            name = doc["metadata"]["name"]
            args = containers[0]["args"]
            if args[args.index("--host") + 1] != LOOPBACK_ADDRESS:
                out.append(f"{name}: SGLang listens on {args[args.index('--host') + 1]}")
            if any(p["name"] == "http" for p in containers[0].get("ports", [])):
                out.append(f"{name}: SGLang's container declares the API port")
            if containers[0]["readinessProbe"]["httpGet"]["port"] != api_port:
                out.append(f"{name}: the probes do not go through the gate")
            gates = [c for c in containers if c["name"] == contract.GATE_CONTAINER]
            if len(gates) != 1:
                out.append(f"{name}: {len(gates)} gate containers")
                continue
            command = gates[0]["command"]
            if not command[2].endswith(f"/{contract.GATE_FILE}"):
                out.append(f"{name}: the gate runs {command[2]}")
            listen = command[command.index("--host-env") + 1], command[command.index("--port") + 1]
            if listen != (contract.POD_IP_ENV, str(api_port)):
                out.append(f"{name}: the gate listens on {listen}")
            if command[command.index("--upstream") + 1] != f"{LOOPBACK_ADDRESS}:{api_port}":
                out.append(f"{name}: the gate passes on to the wrong address")
            if gates[0]["ports"] != [{"name": "http", "containerPort": api_port}]:
                out.append(f"{name}: the gate does not name the API port")
            env = {e["name"] for e in gates[0]["env"]}
            if env & {contract.ENGINE_KEY_ENV, contract.ADMIN_KEY_ENV}:
                out.append(f"{name}: the gate holds a key")
    return out


@pytest.fixture(scope="module")
def example() -> tuple[dict[str, Any], int]:
    return serve_render("inventories/example")


def test_sglangs_head_listens_on_loopback_behind_the_rendered_gate(
    example: tuple[dict[str, Any], int],
) -> None:
    rendered, api_port = example
    assert heads(rendered, "sglang")
    assert head_problems(rendered, api_port) == []
    ctx = from_inventory("inventories/example").deployments[0].res.ctx
    rows = {row.name: row for row in engine_of({"engine": "sglang"}).listeners(ctx)}
    assert rows["engine HTTP, behind the gate"].bind is Bind.LOOPBACK


def test_the_head_check_fails_on_sglang_on_the_pods_address(
    example: tuple[dict[str, Any], int],
) -> None:
    """Negative control: the head as it was without the gate (SGLang on the pod's address,
    one container, the API port its own) fails the check."""
    rendered, api_port = example
    bad = copy.deepcopy(rendered)
    for d in bad["deployments"]:
        for doc in d["manifests"]:
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            if doc["kind"] == "StatefulSet" and doc["metadata"]["name"].endswith("-r0"):
                spec["containers"] = spec["containers"][:1]
                engine_c = spec["containers"][0]
                engine_c["args"][engine_c["args"].index("--host") + 1] = "$(POD_IP)"
                engine_c["ports"] = [{"name": "http", "containerPort": api_port}]
    problems = head_problems(bad, api_port)
    assert any("SGLang listens on $(POD_IP)" in p for p in problems), problems
    assert any("0 gate containers" in p for p in problems), problems
