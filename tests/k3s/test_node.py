"""The Node a K3s node's kubelet registers (sparkrack.k3s.node), offline and on a real API: the
lab registers it for KWOK, which must take it over and report it Ready."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from kubernetes import client

from sparkrack.errors import SparkrackError
from sparkrack.fabric.addressplan import NodeInput
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k3s import config as k3s
from sparkrack.k3s.node import SPARK_CAPACITY, registered_node, reserved_memory
from sparkrack.planner import memory as planner

CP = NodeInput("cp1", "172.28.250.10")


def agent_config(host: str = "spark2", **options: Any) -> dict[str, Any]:
    plan = load_inventory("inventories/lab").plan()
    return k3s.agent_config(plan, host, CP, k3s.options_from(options))


def test_a_spark_registers_with_its_config_labels_taints_and_reserved_memory() -> None:
    config = agent_config(taints=["dedicated=llm:NoSchedule"], labels={"zone": "rack1"})
    node = registered_node(config, "aarch64")
    labels = node["metadata"]["labels"]
    assert node["metadata"]["name"] == "spark2"
    assert labels["kubernetes.io/hostname"] == "spark2"
    assert labels["kubernetes.io/arch"] == "arm64"
    assert labels["sparkrack.io/role"] == "spark" and labels["sparkrack.io/spark-index"] == "2"
    assert labels["zone"] == "rack1" and labels["nvidia.com/gpu.present"] == "true"
    assert "node-role.kubernetes.io/control-plane" not in labels
    assert node["spec"]["taints"] == [{"key": "dedicated", "value": "llm", "effect": "NoSchedule"}]
    status = node["status"]
    assert status["capacity"] == SPARK_CAPACITY and status["capacity"]["nvidia.com/gpu"] == "1"
    # allocatable = 128 GB - (system-reserved + eviction-hard) = the planner's usable memory
    usable = (planner.GB10_MEMORY_GB - planner.DEFAULT_OS_HEADROOM_GB) * planner.GB
    assert int(status["allocatable"]["memory"]) == usable
    assert {"type": "InternalIP", "address": "172.28.250.12"} in status["addresses"]


def test_the_server_carries_the_control_plane_role_and_its_own_capacity() -> None:
    config = k3s.server_config(CP, k3s.options_from({}))
    node = registered_node(config, "x86_64", {"cpu": "2", "memory": "8Gi"}, server=True)
    assert node["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] == "true"
    assert node["metadata"]["labels"]["sparkrack.io/role"] == "control-plane"
    assert node["status"]["capacity"] == {"cpu": "2", "memory": "8Gi", "pods": "110"}
    assert node["status"]["allocatable"]["memory"] == str(8 * 2**30)
    assert "taints" not in node["spec"]


def test_reserved_memory_reads_every_reservation_and_refuses_a_bad_quantity() -> None:
    args = ["system-reserved=memory=6Gi,cpu=1", "kube-reserved=memory=500M", "eviction-hard="
            "memory.available<100Mi,nodefs.available<10%", "max-pods=50"]  # fmt: skip
    assert reserved_memory(args) == 6 * 2**30 + 500 * 10**6 + 100 * 2**20
    with pytest.raises(SparkrackError, match="not a memory quantity"):
        reserved_memory(["system-reserved=memory=6 GB"])
    with pytest.raises(SparkrackError, match="node-name"):
        registered_node({"node-ip": "1.2.3.4"}, "aarch64")
    with pytest.raises(SparkrackError, match="ansible_architecture"):
        registered_node({"node-name": "x"}, "riscv64")


def _ready(api: client.CoreV1Api, name: str, timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = api.read_node(name)
        conditions = {c.type: c.status for c in node.status.conditions or []}
        if conditions.get("Ready") == "True":
            return conditions
        time.sleep(0.5)
    raise AssertionError(f"{name} not Ready within {timeout} s")


def test_the_api_accepts_the_node_and_kwok_reports_it_ready(kube_api: Any) -> None:
    api = client.CoreV1Api(kube_api.client())
    node = registered_node(agent_config("spark4"), "aarch64")
    node["metadata"]["name"] = "spark4-node-test"
    api.create_node(node)
    try:
        _ready(api, "spark4-node-test")
        live = api.read_node("spark4-node-test")
        assert live.status.allocatable["nvidia.com/gpu"] == "1"
        assert live.metadata.labels["sparkrack.io/rank"] == "3"
        # KWOK manages only nodes with the sparkrack.io/role label: one without stays NotReady.
        del node["metadata"]["labels"]["sparkrack.io/role"]
        node["metadata"]["name"] = "foreign-node-test"
        api.create_node(node)
        with pytest.raises(AssertionError, match="not Ready"):
            _ready(api, "foreign-node-test", timeout=5)
    finally:
        for name in ("spark4-node-test", "foreign-node-test"):
            with contextlib.suppress(client.ApiException):
                api.delete_node(name)
