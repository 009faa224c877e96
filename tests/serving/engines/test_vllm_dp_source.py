"""engine: vllm data parallel — every DP listener names code that exists in the wheel of each
release sparkrack renders it for, and that code opens the socket the declaration says: bound by
the head on ``--data-parallel-address`` (ParallelConfig.data_parallel_master_ip)."""

from __future__ import annotations

import ast
import re
import zipfile
from functools import cache

import pytest
from patch_fixtures import wheel_path

from sparkrack.serving.engines.listeners import Listener
from sparkrack.serving.engines.vllm_across import (
    DP_COORDINATOR,
    DP_FRONT_END,
    DP_GROUP_STORE,
    DP_HANDSHAKE,
    DP_LISTENERS,
)

pytestmark = pytest.mark.tools  # real engine wheels

VERSIONS = ("0.18.0", "0.19.0")
NAMED = re.compile(r"(vllm/[\w/]+\.py) \(([A-Za-z_][\w.]*)")


@cache
def source(version: str, path: str) -> str:
    with zipfile.ZipFile(wheel_path("vllm", version)) as wheel:
        return wheel.read(path).decode()


def definition(version: str, path: str, name: str) -> str | None:
    """The source of ``name`` (``function``, ``Class`` or ``Class.method``) in ``path``."""
    text = source(version, path)
    nodes: list[ast.AST] = list(ast.parse(text).body)
    found: ast.AST | None = None
    for part in name.split("."):
        found = next(
            (n for n in nodes if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == part),
            None,
        )
        if found is None:
            return None
        nodes = list(getattr(found, "body", []))
    return ast.get_source_segment(text, found) if found is not None else None


def named_code(row: Listener) -> list[tuple[str, str]]:
    return NAMED.findall(row.source)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("row", DP_LISTENERS, ids=lambda r: r.name)
def test_each_dp_listener_names_code_the_wheel_has(version: str, row: Listener) -> None:
    named = named_code(row)
    assert named, row.source
    for path, name in named:
        assert definition(version, path, name) is not None, (version, path, name)


# What in the named code opens each socket where the declaration says (identifiers of vLLM's).
OPENS = {
    DP_HANDSHAKE.name: [
        ("vllm/v1/engine/utils.py", "launch_core_engines", "data_parallel_rpc_port"),
        ("vllm/v1/engine/utils.py", "launch_core_engines", "data_parallel_master_ip"),
        ("vllm/v1/engine/utils.py", "launch_core_engines", "zmq.ROUTER, bind=True"),
    ],
    DP_FRONT_END.name: [
        ("vllm/v1/engine/utils.py", "get_engine_zmq_addresses", "data_parallel_master_ip"),
        ("vllm/v1/engine/core_client.py", "MPClient", "bind=True"),
    ],
    DP_COORDINATOR.name: [
        ("vllm/v1/engine/coordinator.py", "DPCoordinator", "data_parallel_master_ip"),
        ("vllm/v1/engine/coordinator.py", "DPCoordinatorProc", "zmq.XPUB"),
        ("vllm/v1/engine/coordinator.py", "DPCoordinatorProc", "zmq.PULL"),
    ],
    DP_GROUP_STORE.name: [
        ("vllm/config/parallel.py", "ParallelConfig", "data_parallel_master_ip"),
        ("vllm/v1/engine/core.py", "DPEngineCoreProc._init_data_parallel", "stateless_init_dp"),
    ],
    # The head's fabric address reaches every one of them through this ParallelConfig field.
    "--data-parallel-address": [
        ("vllm/engine/arg_utils.py", "EngineArgs.create_engine_config", "data_parallel_address"),
        (
            "vllm/engine/arg_utils.py",
            "EngineArgs.create_engine_config",
            "data_parallel_master_ip=data_parallel_address",
        ),
    ],
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("what", sorted(OPENS))
def test_the_named_code_opens_the_socket_on_the_dp_address(version: str, what: str) -> None:
    for path, name, needle in OPENS[what]:
        code = definition(version, path, name)
        assert code is not None and needle in code, (version, path, name, needle)


def test_a_listener_naming_code_the_wheel_lacks_is_caught() -> None:
    """Negative control: a source naming a function vLLM does not define."""
    from dataclasses import replace

    wrong = replace(DP_HANDSHAKE, source="vllm/v1/engine/utils.py (launch_core_engines_dp: x)")
    (path, name), *_ = named_code(wrong)
    assert definition("0.19.0", path, name) is None
    code = definition("0.19.0", "vllm/v1/engine/utils.py", "get_engine_zmq_addresses")
    assert code is not None and "data_parallel_rpc_port" not in code
