"""Two deployments behind one alias, through the real LiteLLM proxy with the rendered config: the
gateway balances across the replicas, routes around one that stops answering (what the watchdog
makes of a sick deployment: an API Service without endpoints refuses connections) and routes to
it again once it is back."""

from __future__ import annotations

import copy
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from test_gateway_litellm import ROOT, free_port, litellm, proxy, stream  # noqa: F401

from sparkrack.bench.mtp import generated_tokens
from sparkrack.bench.server import spawn
from sparkrack.errors import SparkrackError
from sparkrack.serving.context import context_from_inventory
from sparkrack.serving.deployments import gateway
from sparkrack.serving.deployments.bundle import from_vars

COOLDOWN_S = 5


def replicas(tmp: Path, alias: str = "model-a", second_profile: str | None = None) -> list[object]:
    data = yaml.safe_load((ROOT / "model_profiles" / "gemma-4-31b-it.yml").read_text())
    data["sglang"].update(served_model_name="sparkrack-test", mem_fraction_static=0.45)
    path = tmp / "small.yml"
    path.write_text(yaml.safe_dump(data))
    other = path
    if second_profile is not None:
        other = tmp / f"{second_profile}.yml"
        other.write_text(yaml.safe_dump(data))
    ctx = context_from_inventory("inventories/example")
    deps = [
        {
            "name": "a1",
            "profile": str(path),
            "sparks": ["spark1", "spark2"],
            "topology": {"tp": 2},
            "alias": alias,
        },
        {
            "name": "a2",
            "profile": str(other),
            "sparks": ["spark3", "spark4"],
            "topology": {"tp": 2},
            "alias": alias,
        },
    ]
    return list(from_vars({"serving_deployments": deps}, ctx, "inv.yml").deployments)


def test_replicas_share_an_alias_but_different_profiles_may_not(tmp_path: Path) -> None:
    deps = replicas(tmp_path)
    routes = gateway.config(deps, context_from_inventory("inventories/example"))["model_list"]  # type: ignore[arg-type]
    assert [r["model_name"] for r in routes] == ["model-a", "model-a"]
    assert [r["model_info"]["id"] for r in routes] == ["a1", "a2"]
    with pytest.raises(
        SparkrackError, match="model-a is used by deployments of different profiles"
    ):
        replicas(tmp_path, second_profile="other")


def keys(deps: list[object]) -> dict[str, str]:
    """The gateway's engine-key variables: each test server checks ``sparkrack-<name>``."""
    found = {gateway.key_env(d): f"sparkrack-{d.name}" for d in deps}  # type: ignore[arg-type,attr-defined]
    return {env: key for env, key in found.items() if env is not None}


def served(url: str, key: str) -> float:
    """The replica's generated-token counter (its own /metrics, read with its key)."""
    req = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        value = generated_tokens(resp.read().decode())
    assert value is not None
    return value


def test_the_gateway_balances_fails_over_and_routes_back(
    litellm: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    deps = replicas(tmp_path)
    ctx = context_from_inventory("inventories/example")
    port2 = free_port()
    server2 = ["--api-key-env", "K", "--rate", "400", "--port", str(port2)]
    with spawn(["--api-key-env", "K", "--rate", "400"], env={"K": "sparkrack-a1"}) as one:
        two_cm = spawn(server2, env={"K": "sparkrack-a2"})
        two = two_cm.__enter__()
        urls = {"a1": f"{one}/v1", "a2": f"{two}/v1"}
        config = copy.deepcopy(gateway.config(deps, ctx, urls))  # type: ignore[arg-type]
        config["router_settings"]["cooldown_time"] = COOLDOWN_S
        with proxy(litellm, config, tmp_path, keys(deps)) as url:
            for _ in range(16):
                status, text = stream(url, "model-a")
                assert status == 200 and text, text
            first, second = served(one, "sparkrack-a1"), served(two, "sparkrack-a2")
            assert first > 0 and second > 0, "both replicas take requests"

            two_cm.__exit__(None, None, None)  # replica 2 stops answering
            for _ in range(8):
                status, text = stream(url, "model-a")
                assert status == 200 and text, f"failover to replica 1: {text}"

            with spawn(server2, env={"K": "sparkrack-a2"}) as back:  # recovered, same address
                assert back == two
                time.sleep(COOLDOWN_S + 1)
                for _ in range(16):
                    status, text = stream(url, "model-a")
                    assert status == 200 and text, text
                assert served(back, "sparkrack-a2") > 0, "the recovered replica is routed to again"


def test_without_the_router_settings_a_dead_replica_fails_requests(
    litellm: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Negative control of the failover: the same pair, replica 2 dead from the start, with no
    retries and no cooldown: some requests land on the dead replica and fail."""
    deps = replicas(tmp_path)
    ctx = context_from_inventory("inventories/example")
    with spawn(["--api-key-env", "K", "--rate", "400"], env={"K": "sparkrack-a1"}) as one:
        urls = {"a1": f"{one}/v1", "a2": f"http://127.0.0.1:{free_port()}/v1"}
        config = copy.deepcopy(gateway.config(deps, ctx, urls))  # type: ignore[arg-type]
        config["router_settings"].update(num_retries=0, allowed_fails=1000, cooldown_time=0)
        with proxy(litellm, config, tmp_path, keys(deps)) as url:
            failed = sum(stream(url, "model-a")[0] != 200 for _ in range(12))
    assert failed > 0, "with neither retries nor cooldown a dead replica must cost requests"
