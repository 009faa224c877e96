"""The converge's settle step drops the page cache only where no engine pod is placed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sparkrack import contract
from sparkrack.adapters.ansible import FILTERS
from sparkrack.node.settle import converge_flush, engine_pods_on

if TYPE_CHECKING:
    from conftest import Playbook

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cli"))
from test_cluster_cli import run_playbook  # noqa: E402


def pod(name: str, node: str, phase: str, deleting: bool = False) -> dict[str, Any]:
    """A Pod as kubernetes.core.k8s_info returns it (the API object as a dict), trimmed."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "sparkrack",
        "labels": {
            contract.LABEL_COMPONENT: contract.COMPONENT_SERVING,
            contract.LABEL_RANK: "0",
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T15:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "engine"}]},
        "status": {"phase": phase},
    }


READ = {
    "changed": False,
    "api_found": True,
    "resources": [
        pod("glm-rank-0", "spark1", "Running"),
        pod("glm-rank-1", "spark2", "Pending"),
        pod("old-rank-0", "spark3", "Running", deleting=True),
        pod("done-rank-0", "spark4", "Succeeded"),
    ],
}


def test_a_spark_with_a_running_or_starting_engine_pod_keeps_its_cache() -> None:
    for node, name in (("spark1", "glm-rank-0"), ("spark2", "glm-rank-1")):
        decision = converge_flush(node, READ, kubeconfig_exists=True)
        assert not decision.flush and f"sparkrack/{name}" in decision.why


def test_negative_control_a_spark_without_an_engine_pod_is_flushed() -> None:
    # spark3's pod is being deleted, spark4's finished, spark5 has none
    for node in ("spark3", "spark4", "spark5"):
        assert engine_pods_on(node, READ["resources"]) == []
        assert converge_flush(node, READ, kubeconfig_exists=True).flush


def test_no_cluster_yet_flushes_and_an_api_that_does_not_answer_does_not() -> None:
    assert converge_flush("spark1", None, kubeconfig_exists=False).flush
    assert converge_flush("spark1", {"skipped": True}, kubeconfig_exists=False).flush
    failed = {"failed": True, "msg": "Failed to get client due to HTTPSConnectionPool"}
    decision = converge_flush("spark1", failed, kubeconfig_exists=True)
    assert not decision.flush and "HTTPSConnectionPool" in decision.why


def test_the_inventory_switch_flushes_a_serving_spark() -> None:
    decision = converge_flush("spark1", {"skipped": True}, True, flush_on_serving=True)
    assert decision.flush and "spark_base_settle_on_serving" in decision.why


def test_a_check_run_drops_nothing_even_where_the_inventory_says_drop() -> None:
    for exists, on_serving in ((False, False), (True, True)):
        decision = converge_flush("spark5", READ, exists, on_serving, check_mode=True)
        assert not decision.flush and "--check" in decision.why
    assert FILTERS["sparkrack_converge_flush"](READ, "spark5", True, True, True)["flush"] is False


def test_the_filter_and_the_engine_selector() -> None:
    assert FILTERS["sparkrack_converge_flush"](READ, "spark1", True, False)["flush"] is False
    assert FILTERS["sparkrack_converge_flush"](READ, "spark5", True, False)["flush"] is True
    selector = contract.contract_fact()["engine_selector"]
    assert selector == "sparkrack.io/component=serving,sparkrack.io/rank"


def settle_play(tmp_path: Path, kubeconfig: Path) -> list[dict[str, object]]:
    return [
        {
            "name": "settle step on the control machine",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "settle",
                    "ansible.builtin.include_role": {
                        "name": "spark_base",
                        "tasks_from": "settle.yml",
                    },
                    "vars": {
                        "spark_base_settle_dir": str(tmp_path / "settle"),
                        "spark_base_settle_vm": str(tmp_path / "vm"),
                        "spark_base_settle_standin": True,
                        "spark_base_settle_load_s": 1,
                        "spark_base_kubeconfig": str(kubeconfig),
                        # the owner's default; the lab inventory turns it on
                        "spark_base_settle_on_serving": False,
                    },
                }
            ],
        }
    ]


@pytest.mark.parametrize("case", ["no-cluster", "api-down", "check"])
def test_the_role_drops_the_cache_only_when_it_may(
    case: str, ansible_playbook: Playbook, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if case == "api-down":
        # a kubeconfig whose API is a closed loopback port: the read fails, nothing is known
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
            "    server: https://127.0.0.1:9\ncontexts:\n- name: c\n  context:\n"
            "    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n"
            "    token: not-a-secret\n"
        )
    # "check": --check before any converge, so the settle step was never written (a fresh Spark).
    extra = ("--check",) if case == "check" else ()
    proc = run_playbook(ansible_playbook, settle_play(tmp_path, kubeconfig), tmp_path, *extra)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    dropped = (tmp_path / "vm" / "drop_caches").exists()
    if case == "check":
        assert not dropped and not (tmp_path / "settle" / "memsettle.py").exists()
        assert "page cache left alone: a check run (--check) drops nothing" in output
    elif case == "no-cluster":
        assert dropped and "page cache dropped: no K3s cluster yet" in output
    else:
        assert not dropped and "page cache left alone" in output
        assert "the K3s API did not list the engine pods" in output
