"""``serving_gateway_node_port``: the gateway on the control-plane node's LAN address, key still
required; unset, the Service stays in the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack import contract
from sparkrack.errors import SparkrackError
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.serving.deployments import gateway
from sparkrack.serving.deployments.bundle import from_inventory, render_serving

ROOT = Path(__file__).resolve().parents[3]


def _inventory(tmp_path: Path, **extra: object) -> str:
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text((ROOT / "inventories/example/hosts.yml").read_text())
    base = yaml.safe_load((ROOT / "inventories/example/group_vars/all.yml").read_text())
    base.update(extra)
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(base))
    return str(inv)


def _gateway(tmp_path: Path, **extra: object) -> dict[str, dict[str, Any]]:
    rendered = render_serving(from_inventory(_inventory(tmp_path, **extra), check_memory=False))
    return {doc["kind"]: doc for doc in rendered["gateway"]["manifests"]}


def _key_env(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    return next(e for e in container["env"] if e["name"] == gateway.MASTER_KEY_ENV)


def test_closed_by_default(tmp_path: Path) -> None:
    docs = _gateway(tmp_path)
    spec = docs["Service"]["spec"]
    assert spec["type"] == "ClusterIP"
    assert "externalTrafficPolicy" not in spec
    assert all("nodePort" not in p for p in spec["ports"])
    (rule,) = docs["NetworkPolicy"]["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {}}]


def test_the_switch_opens_a_node_port_on_the_control_plane_only(tmp_path: Path) -> None:
    docs = _gateway(
        tmp_path, serving_gateway_node_port=30400, serving_gateway_clients=["192.168.1.0/24"]
    )
    service = docs["Service"]
    assert service["metadata"]["name"] == contract.API_SERVICE
    spec = service["spec"]
    assert spec["type"] == "NodePort"
    api_port = SERVING_DEFAULTS["serving_api_port"]
    assert spec["ports"] == [
        {"name": "http", "port": api_port, "targetPort": "http", "nodePort": 30400}
    ]
    # Only a node running the gateway answers on the port, and the caller's address is kept.
    assert spec["externalTrafficPolicy"] == "Local"
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {contract.LABEL_ROLE: contract.ROLE_CONTROL_PLANE}
    # The LAN is admitted by the policy, to the gateway's port only.
    (rule,) = docs["NetworkPolicy"]["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "192.168.1.0/24"}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": gateway.PORT}]
    # The key is still required: the proxy's master key comes from the gateway Secret.
    assert _key_env(docs) == _key_env(_gateway(tmp_path / "closed"))
    secret = SERVING_DEFAULTS["serving_gateway_key_secret"]
    assert _key_env(docs)["valueFrom"]["secretKeyRef"]["name"] == secret


def test_a_lan_port_without_clients_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SparkrackError) as refused:
        _gateway(tmp_path, serving_gateway_node_port=30400)
    text = str(refused.value)
    assert "serving_gateway_node_port" in text and "serving_gateway_clients" in text


@pytest.mark.parametrize("port", [8080, 40000, "30400x"])
def test_a_port_outside_the_node_port_range_is_refused(tmp_path: Path, port: object) -> None:
    with pytest.raises(SparkrackError, match="serving_gateway_node_port"):
        _gateway(tmp_path, serving_gateway_node_port=port, serving_gateway_clients=["10.0.0.0/8"])


def test_the_gateway_reads_its_bundled_price_table(tmp_path: Path) -> None:
    """Egress reaches the engines only, so LiteLLM must not download its price table at start:
    the rendered container carries the variable that turns that off."""
    (container,) = _gateway(tmp_path)["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert gateway.OFFLINE_ENV and all(env.get(k) == v for k, v in gateway.OFFLINE_ENV.items())
