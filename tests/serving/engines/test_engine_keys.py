"""Every engine container reads its deployment's keys from the key Secret, and SGLang's own
request-auth code, given the keys the rendered args carry once Kubernetes expanded them, refuses
an admin route without the admin key and a plain route without the engine key.

The auth check runs SGLang's ``sglang/srt/utils/auth.py`` (the middleware its HTTP server adds)
from the release wheel the engine check installs, in a FastAPI app whose routes carry the auth
levels ``sglang/srt/entrypoints/http_server.py`` declares for them; SGLang's own parser resolves
the rendered options to ``api_key`` and ``admin_api_key``. The routes' handlers are stand-ins:
what is under test is the decision to let a request reach them.
"""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sparkrack import contract
from sparkrack.patches import handed_keys as launcher_keys
from sparkrack.serving.deployments.bundle import from_inventory, render_serving
from sparkrack.serving.enginecheck import upstream
from sparkrack.serving.engines import Engine, engine_of

pytestmark = pytest.mark.tools  # real engine wheels

ROOT = Path(__file__).resolve().parents[3]
INVENTORIES = ("inventories/example", "inventories/lab")
ADMIN_ROUTE = "/update_weights_from_tensor"
"""The admin route whose request body SGLang unpickles."""
PLAIN_ROUTE = "/v1/chat/completions"


@pytest.fixture(scope="module", autouse=True)
def cache() -> None:
    os.environ.setdefault("SPARKRACK_CACHE_DIR", str(ROOT / ".cache"))


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    return {inv: render_serving(from_inventory(inv)) for inv in INVENTORIES}


def engine_containers(
    rendered: Mapping[str, Any],
) -> Iterator[tuple[Mapping[str, Any], Engine, dict[str, Any]]]:
    """(deployment facts, its engine, container) of every rank of every deployment."""
    for dep in rendered["deployments"]:
        for doc in dep["manifests"]:
            if doc["kind"] == "StatefulSet":
                spec = doc["spec"]["template"]["spec"]
                for c in spec["containers"]:
                    if c["name"] != contract.GATE_CONTAINER:  # holds no key: test_engine_gate
                        yield dep, engine_of({"engine": c["name"]}), c


def rank_of(c: Mapping[str, Any], doc: Mapping[str, Any]) -> int:
    return int(doc["metadata"]["labels"][contract.LABEL_RANK])


def handed_keys(c: Mapping[str, Any]) -> dict[str, str]:
    return launcher_keys(c.get("command", []))


def key_problems(rendered: Mapping[str, Any]) -> list[str]:
    """Where an engine container does not read each of its rank's keys from its deployment's
    key Secret, holds a key its rank must not hold, or carries a key (or a reference Kubernetes
    would expand into one) in any argv: /proc/<pid>/cmdline is world-readable on a Spark."""
    out: list[str] = []
    for dep, eng, c, rank in engine_ranks(rendered):
        where = f"{dep['name']}/{c['name']} rank {rank}"
        env = {e["name"]: e for e in c.get("env", [])}
        wanted = eng.rank_key_env(rank)
        for var, key in wanted.items():
            ref = env.get(var, {}).get("valueFrom", {}).get("secretKeyRef", {})
            if ref != {"name": dep["key_secret"], "key": key}:
                out.append(f"{where}: {var} is not read from {dep['key_secret']}[{key}]")
        for var in set(eng.key_env) - set(wanted):
            if var in env:
                out.append(f"{where}: holds {var}, which its rank does not need")
        if eng.key_flags and set(handed_keys(c)) != set(wanted):
            out.append(f"{where}: the launcher hands over {sorted(handed_keys(c))}")
        for word in [*c.get("command", []), *c.get("args", [])]:
            if word.startswith("--key-env") or "=--" in word:
                continue
            if "-api-key" in word or any(f"$({var})" in word for var in eng.key_env):
                out.append(f"{where}: a key in argv: {word!r}")
    for doc in rendered["manifests"]:
        if doc["kind"] == "Secret":
            out.append(f"a Secret is rendered: {doc['metadata']['name']}")
    return out


def engine_ranks(
    rendered: Mapping[str, Any],
) -> Iterator[tuple[Mapping[str, Any], Engine, dict[str, Any], int]]:
    """(deployment facts, its engine, container, rank) of every rank of every deployment."""
    for dep in rendered["deployments"]:
        for doc in dep["manifests"]:
            if doc["kind"] == "StatefulSet":
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    if c["name"] != contract.GATE_CONTAINER:  # holds no key: test_engine_gate
                        yield dep, engine_of({"engine": c["name"]}), c, rank_of(c, doc)


def test_every_engine_reads_its_keys_from_the_key_secret(
    rendered: dict[str, dict[str, Any]],
) -> None:
    engines = set()
    workers = 0
    for inv, r in rendered.items():
        assert key_problems(r) == [], inv
        engines |= {eng.name for _, eng, _ in engine_containers(r) if eng.key_env}
        for _, _, c, rank in engine_ranks(r):
            names = {e["name"] for e in c.get("env", [])}
            if rank > 0:
                workers += 1
                assert contract.ADMIN_KEY_ENV not in names
                assert f"{contract.ADMIN_KEY_ENV}=--admin-api-key" not in c["command"]
    assert "sglang" in engines and workers > 0


def test_the_key_check_fails_on_a_literal_key(rendered: dict[str, dict[str, Any]]) -> None:
    bad = copy.deepcopy(rendered["inventories/example"])
    dep, _, c = next(engine_containers(bad))
    for e in c["env"]:
        if e["name"] == contract.ENGINE_KEY_ENV:
            e.pop("valueFrom")
            e["value"] = "sk-literal"
    c["args"] += ["--admin-api-key", f"$({contract.ADMIN_KEY_ENV})"]
    problems = key_problems(bad)
    assert any(contract.ENGINE_KEY_ENV in p for p in problems), problems
    assert any("a key in argv: '--admin-api-key'" in p for p in problems), problems
    # A worker given the admin key is refused too.
    worker = next(c for _, _, c, rank in engine_ranks(bad) if rank > 0)
    worker["env"].append({"name": contract.ADMIN_KEY_ENV, "value": "x"})
    assert any("does not need" in p for p in key_problems(bad)), key_problems(bad)


def test_the_gateway_sends_each_deployment_its_engine_key(
    rendered: dict[str, dict[str, Any]],
) -> None:
    for r in rendered.values():
        [pod] = [d for d in r["gateway"]["manifests"] if d["kind"] == "Deployment"]
        env = {e["name"]: e for e in pod["spec"]["template"]["spec"]["containers"][0]["env"]}
        config = r["gateway"]["manifests"][0]["data"]["config.yaml"]
        for dep in r["deployments"]:
            if not dep["api_key_env"]:
                continue
            [(name, ref)] = [
                (n, e["valueFrom"]["secretKeyRef"])
                for n, e in env.items()
                if e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == dep["key_secret"]
            ]
            assert ref["key"] == contract.ENGINE_KEY_KEY
            assert f"api_key: os.environ/{name}" in config


# --- SGLang's own request auth with the rendered args --------------------------------------

HARNESS = textwrap.dedent(
    """
    import ast, importlib.util, json, sys
    engine, harness, api_key, admin_api_key, paths = json.loads(sys.stdin.read())
    # FastAPI's telemetry module imports OpenTelemetry, which the engine check's environment
    # lacks: imported as an inert stand-in (the engine check's own), as the engine check does.
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
    # The auth level http_server.py declares for each route (its @auth_level decorator).
    tree = ast.parse(open(engine + "/sglang/srt/entrypoints/http_server.py").read())
    levels = {}
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
        for r in routes:
            levels[r] = level
    from fastapi import FastAPI
    from starlette.testclient import TestClient
    app = FastAPI(telemetry={"tracing": False, "metrics": False, "logs": False})
    for path in paths:
        def endpoint():
            return {"ok": True}
        app.add_api_route(path, auth.auth_level(auth.AuthLevel[levels.get(path, "NORMAL")])(endpoint),
                          methods=["GET", "POST"])
    if api_key or admin_api_key:
        auth.add_api_key_middleware(app, api_key=api_key, admin_api_key=admin_api_key)
    client = TestClient(app)
    keys = {"none": None, "engine": api_key, "admin": admin_api_key}
    out = {"levels": {p: levels.get(p, "NORMAL") for p in paths}, "status": {}}
    for path in paths:
        for name, key in keys.items():
            headers = {"Authorization": "Bearer " + key} if key else {}
            out["status"][path + " " + name] = client.post(path, headers=headers).status_code
    print(json.dumps(out))
    """
)


def k8s_expand(word: str, env: Mapping[str, str]) -> str:
    """``word`` as Kubernetes passes it to the process: ``$(VAR)`` of a defined variable
    replaced, ``$$`` -> ``$``, anything else kept."""
    return re.sub(
        r"\$\$|\$\((\w+)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        word,
    )


def sglang_auth(version: str, api_key: str | None, admin: str | None) -> dict[str, Any]:
    env = upstream.ensure_env("sglang", version)
    deps = upstream.deps_dir("sglang", version)
    paths = [ADMIN_ROUTE, PLAIN_ROUTE, "/health", "/metrics"]
    boot = f"import sys; sys.path[:0] = {[str(deps)]!r}; exec(sys.argv[1])"
    proc = subprocess.run(
        [sys.executable, "-I", "-c", boot, HARNESS],
        input=json.dumps(
            [str(env / "engine"), str(upstream.DATA / "harness.py"), api_key, admin, paths]
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def option_value(args: list[str], option: str) -> str | None:
    return args[args.index(option) + 1] if option in args else None


@pytest.fixture(scope="module")
def head(rendered: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any], Engine]:
    """The SGLang version and rank-0 container of the example inventory's first deployment."""
    inv = from_inventory("inventories/example")
    dep = inv.deployments[0]
    version = dep.res.engine.upstream_version(dep.profile)
    assert dep.res.engine.name == "sglang" and version
    r = rendered["inventories/example"]
    _, eng, c = next(
        (d, e, c) for d, e, c in engine_containers(r) if d["name"] == dep.name and e.key_env
    )
    return version, c, eng


def test_sglang_refuses_admin_and_plain_routes_without_their_keys(
    head: tuple[str, dict[str, Any], Engine],
) -> None:
    version, container, eng = head
    values = {contract.ENGINE_KEY_KEY: secrets.token_hex(16)}
    values[contract.ADMIN_KEY_KEY] = secrets.token_hex(16)
    env = {var: values[key] for var, key in eng.key_env.items()}
    # The args as the server's interpreter sees them: the rendered words, then each key the
    # launcher hands over (launcher.KEY_BOOTSTRAP; tests/patches run it for real).
    handed = [w for var, flag in handed_keys(container).items() for w in (flag, env[var])]
    args = [k8s_expand(w, env) for w in container["args"]] + handed
    # SGLang's own parser takes the handed-over options as its two keys.
    dests = dict(upstream.option_dests("sglang", version, args))
    assert dests["--api-key"] == "api_key"
    assert dests["--admin-api-key"] == "admin_api_key"
    api_key = option_value(args, "--api-key")
    admin = option_value(args, "--admin-api-key")
    assert api_key == values[contract.ENGINE_KEY_KEY]
    assert admin == values[contract.ADMIN_KEY_KEY]

    got = sglang_auth(version, api_key, admin)
    assert got["levels"][ADMIN_ROUTE] != "NORMAL"
    s = got["status"]
    assert s[f"{ADMIN_ROUTE} none"] == 401
    assert s[f"{ADMIN_ROUTE} engine"] == 401  # the engine key does not open admin routes
    assert s[f"{ADMIN_ROUTE} admin"] == 200
    assert s[f"{PLAIN_ROUTE} none"] == 401
    assert s[f"{PLAIN_ROUTE} engine"] == 200
    # Health and metrics stay open for the kubelet's probes and Prometheus.
    assert s["/health none"] == 200
    assert s["/metrics none"] == 200


def test_without_keys_sglang_serves_its_admin_route_to_anyone(
    head: tuple[str, dict[str, Any], Engine],
) -> None:
    """Negative control: args without the key options (the render before engine keys) leave the
    admin route open, so the test above can tell the difference."""
    version, container, _ = head
    args = [w for w in container["args"] if "KEY)" not in w and "-api-key" not in w]
    assert option_value(args, "--api-key") is None
    got = sglang_auth(version, None, None)
    assert got["status"][f"{ADMIN_ROUTE} none"] == 200
    assert got["status"][f"{PLAIN_ROUTE} none"] == 200


def argv_key_words(docs: list[dict[str, Any]]) -> list[str]:
    """Every word of any container's command, args or exec probe, in any rendered object, that
    is a key option or a reference Kubernetes would expand into a Secret-backed variable."""
    found: list[str] = []
    for doc in docs:
        spec = doc.get("spec", {})
        pod = spec.get("template", {}).get("spec", spec.get("jobTemplate", {}))
        for c in [*pod.get("containers", []), *pod.get("initContainers", [])]:
            secret_vars = {
                e["name"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})
            }
            words = [*c.get("command", []), *c.get("args", [])]
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                words += c.get(probe, {}).get("exec", {}).get("command", [])
            for word in words:
                option = word.split("=", 1)[0]
                if option.endswith("-api-key") or any(f"$({v})" in word for v in secret_vars):
                    found.append(f"{doc['metadata']['name']}/{c['name']}: {word}")
    return found


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_no_key_in_any_argv_of_any_shipped_profile(inventory: str) -> None:
    from sparkrack.serving import list_profiles, load_profile, render_manifests
    from sparkrack.serving.context import context_from_inventory

    ctx = context_from_inventory(inventory)
    checked = 0
    for path in list_profiles():
        docs = render_manifests(load_profile(path.stem), ctx)
        assert argv_key_words(docs) == [], path.stem
        checked += sum(d["kind"] == "StatefulSet" for d in docs)
    assert checked >= len(list_profiles())
    # Negative control: the words the render gave SGLang before the launcher handed keys over.
    docs = render_manifests(load_profile("glm-4.7-nvfp4"), ctx)
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    sts["spec"]["template"]["spec"]["containers"][0]["args"] += [
        "--api-key",
        f"$({contract.ENGINE_KEY_ENV})",
    ]
    assert len(argv_key_words(docs)) == 2
