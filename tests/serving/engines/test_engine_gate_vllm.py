"""The gate in front of vLLM's and TensorRT-LLM's API servers: what a client reaches of them.

vLLM: behind the gate stands vLLM's own request handling as far as it decides who reaches what:
a FastAPI app with every route the release wheel's ``vllm/entrypoints`` routers declare (the
development routes too, as ``VLLM_SERVER_DEV_MODE`` mounts them), vLLM's own
``AuthenticationMiddleware`` class taken from the wheel with the engine key, served over a real
socket. The handlers are stand-ins that answer 200 with their route. The gate is the shipped
file, run as the rendered head pod runs it.

TensorRT-LLM: no wheel of it is in the engine check, so its routes are held as the engine class
records them (``TRTLLM.routes``, read from ``tensorrt_llm/serve/openai_server.py``): a table
test against the gate's judgement, not a running server.
"""

from __future__ import annotations

import ast
import secrets
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gate_support import Engine, gate_process, heads, release, serve_render, served_app

from sparkrack import contract
from sparkrack.serving import load_profile, resolve
from sparkrack.serving.context import context_from_inventory
from sparkrack.serving.engines import engine_of
from sparkrack.serving.engines.listeners import LOOPBACK_ADDRESS, Bind
from sparkrack.serving.engines.trtllm import ENGINE as TRTLLM
from sparkrack.serving.engines.vllm import ENGINE as VLLM
from sparkrack.serving.objects.ranks import deployment_objects
from sparkrack.serving.scripts import engine_gate

pytestmark = pytest.mark.tools  # real engine wheels

VLLM_RELEASES = ("0.19.0", "0.33.0")
# Where each release keeps the middleware VLLM_API_KEY turns on.
MIDDLEWARE = {
    "0.19.0": "vllm/entrypoints/openai/server_utils.py",
    "0.33.0": "vllm/entrypoints/serve/middleware/authenticate.py",
}
# Files under vllm/entrypoints that declare routes of another server than `vllm serve`'s app:
# the legacy demo server, the data-parallel supervisor, the preload helper.
NOT_THE_API_SERVER = (
    "vllm/entrypoints/api_server.py",
    "vllm/entrypoints/launchers/dp_supervisor.py",
    "vllm/entrypoints/cli/preload.py",
)
DANGEROUS = ("/invocations", "/scale_elastic_ep", "/collective_rpc", "/sleep", "/server_info")


def declared_routes(engine: Path) -> dict[str, list[str]]:
    """Every route path the release's routers declare -> the files that declare it."""
    found: dict[str, list[str]] = {}
    for path in sorted((engine / "vllm" / "entrypoints").rglob("*.py")):
        name = str(path.relative_to(engine))
        if name in NOT_THE_API_SERVER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "post", "put", "delete", "api_route", "add_api_route")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and node.args[0].value.startswith("/")
            ):
                found.setdefault(node.args[0].value, []).append(name)
    return found


# vLLM's app as far as access goes: each route the wheel declares, behind the wheel's own
# AuthenticationMiddleware class (its source, compiled here with its imports), as a TestClient
# that served_app puts on a real socket.
SERVER = textwrap.dedent(
    """
    import ast, json, sys
    middleware_file, routes, api_key = json.loads(sys.stdin.readline())
    tree = ast.parse(open(middleware_file).read())
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("vllm"))]
    keep += [n for n in tree.body if isinstance(n, ast.Assign)
             and any(getattr(t, "id", "") == "GUARDED_PREFIX" for t in n.targets)]
    keep += [n for n in tree.body if isinstance(n, ast.ClassDef)
             and n.name == "AuthenticationMiddleware"]
    space = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), middleware_file, "exec"), space)
    from fastapi import FastAPI
    from starlette.testclient import TestClient
    app = FastAPI()
    for route in routes:
        def endpoint(route=route):
            return {"route": route}
        app.add_api_route(route, endpoint, methods=["GET", "POST"])
    app.add_middleware(space["AuthenticationMiddleware"], tokens=[api_key])
    client = TestClient(app)
    """
)


@pytest.fixture(scope="module", params=VLLM_RELEASES)
def vllm(request: pytest.FixtureRequest) -> Iterator[Engine]:
    version = request.param
    wheel = release("vllm", version)
    routes = sorted(declared_routes(wheel.engine))
    # /metrics is a Mount of prometheus_client's app (serve/instrumentator/metrics.py)
    routes.append("/metrics")
    key = "sk-engine-" + secrets.token_hex(12)
    given = [str(wheel.engine / MIDDLEWARE[version]), routes, key]
    with served_app(SERVER, wheel.deps, given) as port:
        yield Engine(port, key, "")


@pytest.fixture(scope="module")
def gate(vllm: Engine) -> Iterator[int]:
    """The shipped gate, as the rendered vLLM head runs it, in front of vLLM."""
    with gate_process(vllm.port, VLLM.gate_also()) as port:
        yield port


def test_without_the_gate_vllms_open_routes_answer_with_or_without_the_key(vllm: Engine) -> None:
    """Negative control: vLLM's key guards /v1 only; /invocations (the API without its key),
    /scale_elastic_ep and the development routes answer anyone."""
    for path in DANGEROUS:
        for key in (vllm.api_key, None):
            status, _ = vllm.ask(vllm.port, path, key)
            assert status == 200, (path, key, status)
    assert vllm.ask(vllm.port, "/v1/chat/completions", None)[0] == 401  # the middleware is live


def test_through_the_gate_vllm_answers_only_the_api_health_and_metrics(
    vllm: Engine, gate: int
) -> None:
    for key in (vllm.api_key, None):
        for route in VLLM.routes:
            for method in ("GET", "POST"):
                status, text = vllm.ask(gate, route.path, key, method)
                assert status == 404, (route.path, method, status, text)
    assert vllm.ask(gate, "/v1/chat/completions", vllm.api_key)[0] == 200
    assert vllm.ask(gate, "/v1/chat/completions", None)[0] == 401  # vLLM's own auth
    assert vllm.ask(gate, "/v1/models", vllm.api_key, "GET")[0] == 200
    for path in ("/health", "/metrics"):
        assert vllm.ask(gate, path, None, "GET")[0] == 200, path


@pytest.mark.parametrize("version", VLLM_RELEASES)
def test_vllms_routes_are_the_api_or_recorded(version: str) -> None:
    """Every route a release declares is passed as the OpenAI API, health or metrics, or is in
    ``VLLM.routes`` (which the gate refuses); every recorded route is declared by a release."""
    declared = declared_routes(release("vllm", version).engine)
    recorded = {r.path for r in VLLM.routes}
    passed = {p for p in declared if engine_gate.allowed(p)}
    assert "/v1/chat/completions" in passed and "/health" in passed
    assert not passed & recorded, passed & recorded
    unrecorded = set(declared) - passed - recorded
    assert not unrecorded, f"vLLM {version} routes neither passed nor recorded: {unrecorded}"
    assert all(p.startswith("/v1/") or p in engine_gate.EXACT for p in passed)


def test_every_recorded_vllm_route_is_declared_by_a_release() -> None:
    declared: set[str] = {"/docs", "/openapi.json", "/redoc"}  # FastAPI's own
    for version in VLLM_RELEASES:
        declared |= set(declared_routes(release("vllm", version).engine))
    assert {r.path for r in VLLM.routes} <= declared


def test_the_gate_refuses_trtllms_recorded_routes_and_passes_its_api() -> None:
    """TensorRT-LLM (routes recorded from openai_server.py; no wheel here): the gate refuses
    every recorded route and passes the API, health and its Prometheus path."""
    also = frozenset(TRTLLM.gate_also())
    assert also == {"/prometheus/metrics"}
    for route in TRTLLM.routes:
        assert not engine_gate.allowed(route.path, also), route.path
        assert route.key == "none"
    for path in (
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/models",
        "/v1/responses",
        "/health",
        "/health_generate",
        "/metrics",
        "/prometheus/metrics",
    ):
        assert engine_gate.allowed(path, also), path
    assert not engine_gate.allowed("/prometheus/metrics")  # only with the engine's --also


@pytest.fixture(scope="module")
def lab() -> tuple[dict[str, Any], int]:
    return serve_render("inventories/lab")


@pytest.mark.parametrize("engine_name", ["vllm", "trtllm"])
def test_the_head_is_on_loopback_behind_the_rendered_gate(
    lab: tuple[dict[str, Any], int], engine_name: str
) -> None:
    rendered, api_port = lab
    [head] = [h for h in heads(rendered, engine_name) if h["metadata"]["name"].endswith("-r0")]
    containers = head["spec"]["template"]["spec"]["containers"]
    engine_c, gate_c = containers
    assert engine_c["args"][engine_c["args"].index("--host") + 1] == LOOPBACK_ADDRESS
    assert not [p for p in engine_c["ports"] if p["name"] == "http"]
    assert engine_c["readinessProbe"]["httpGet"]["port"] == api_port
    assert gate_c["name"] == contract.GATE_CONTAINER
    assert gate_c["ports"] == [{"name": "http", "containerPort": api_port}]
    command = gate_c["command"]
    assert command[command.index("--upstream") + 1] == f"{LOOPBACK_ADDRESS}:{api_port}"
    assert not {e["name"] for e in gate_c["env"]} & {"VLLM_API_KEY", contract.ENGINE_KEY_ENV}
    also = [command[i + 1] for i, w in enumerate(command) if w == "--also"]
    engine = engine_of({"engine": engine_name})
    assert also == list(engine.gate_also())
    metrics = head["spec"]["template"]["metadata"]["annotations"][
        contract.PROMETHEUS_PATH_ANNOTATION
    ]
    assert engine_gate.allowed(metrics, frozenset(also)), metrics


def test_vllm_across_sparks_gates_the_head_and_no_headless_rank() -> None:
    """The multi-Spark head is gated like the single-Spark one; its headless ranks serve no API
    and run no gate."""
    ctx = context_from_inventory("inventories/lab")
    res = resolve(load_profile("nemotron-3-super-120b-a12b-nvfp4-vllm4"), ctx)
    assert res.engine.gated and res.engine is not VLLM
    sets = [d for d in deployment_objects(res, []) if d["kind"] == "StatefulSet"]
    assert len(sets) == 4
    for rank, sts in enumerate(sets):
        containers = sts["spec"]["template"]["spec"]["containers"]
        names = [c["name"] for c in containers]
        assert names == (["vllm", contract.GATE_CONTAINER] if rank == 0 else ["vllm"]), names
        assert not [p for p in containers[0]["ports"] if p["name"] == "http"]
    head = sets[0]["spec"]["template"]["spec"]["containers"]
    assert head[0]["args"][head[0]["args"].index("--host") + 1] == LOOPBACK_ADDRESS
    assert head[1]["ports"] == [{"name": "http", "containerPort": ctx.api_port}]
    rows = {row.name: row for row in res.engine.listeners(ctx)}
    assert rows["engine HTTP, behind the gate"].bind is Bind.LOOPBACK
    assert not rows["api"].on_rank(1) and not rows["engine HTTP, behind the gate"].on_rank(1)


@pytest.mark.parametrize("engine", [VLLM, TRTLLM], ids=["vllm", "trtllm"])
def test_the_labs_stand_in_answers_as_the_gated_port(engine: Any) -> None:
    """The lab's stand-in engine (sparkrack.bench.server) refuses each route the engine class
    records, with or without the key, as the gate does, and wants the key on the API."""
    from sparkrack.bench.server import ServerConfig, auth_refusal

    config = ServerConfig(api_key="sk-standin")
    for route in engine.routes:
        for key in ("Bearer sk-standin", None):
            assert auth_refusal("POST", route.path, key, config) == "404 Not Found", route.path
    assert auth_refusal("POST", "/v1/chat/completions", None, config) == "401 Unauthorized"
    assert auth_refusal("POST", "/v1/chat/completions", "Bearer sk-standin", config) is None
    for path in ("/health", "/metrics"):
        assert auth_refusal("GET", path, None, config) is None
