"""What the rehearsal starts comes from the real render of the lab inventory."""

from __future__ import annotations

from sparkrack.serving.deployments.bundle import from_inventory
from sparkrack.serving.deployments.plan import deployment_plan
from sparkrack.serving.engines.listeners import LOOPBACK_ADDRESS
from sparkrack.serving.rehearsal.plan import expand, host_ip_variables, plan, plan_inventory

VLLM = "nemotron-3-super-120b-a12b-nvfp4-vllm4"
SWITCH = {"gemma": VLLM}
"""molecule's one-line switch: the lab's two-Spark deployment to vLLM across Sparks."""

HOST_IP_ENV = "SGLANG_HOST_IP"


def test_every_rank_of_the_multi_rank_deployment_with_its_rendered_command() -> None:
    deployments = from_inventory("inventories/lab")
    got = plan(deployments)
    gemma = deployments.deployment("gemma").res
    assert [(r.deployment, r.rank, r.node) for r in got.ranks] == [
        ("gemma", 0, "spark1"),
        ("gemma", 1, "spark2"),
    ]
    for run in got.ranks:
        rank = gemma.rank(run.rank)
        rendered = gemma.argv(rank)[len(gemma.engine.entry) :]
        # kubelet's $(VAR) expansion, then the keys the launcher hands over in the server's
        # interpreter (the head: engine and admin key; a worker: the engine key only).
        keys = gemma.engine.rank_key_env(run.rank)
        assert len(run.argv) == len(rendered) + 2 * len(keys)
        assert ("--admin-api-key" in run.argv) is (run.rank == 0)
        assert [w for w in rendered if "$(" not in w] == [w for w in run.argv if w in rendered]
        # A gated engine's HTTP server listens on loopback, behind the head's gate.
        host = LOOPBACK_ADDRESS if gemma.engine.gated else run.pod.ip
        assert run.argv[run.argv.index("--host") + 1] == host
        assert rank.node.node_ip == run.pod.ip
        assert run.argv[run.argv.index("--dist-init-addr") + 1] == (
            f"{gemma.ctx.head_address}:{gemma.ctx.dist_port}"
        )
        assert run.engine == "sglang" and run.version == "0.5.11"
        # Secret-backed values are placeholders, and not shown by repr.
        key = run.argv[run.argv.index("--api-key") + 1]
        assert key in run.secret_values and key not in repr(run)
    # Single-rank deployments are not rehearsed.
    assert {r.deployment for r in got.ranks} == {"gemma"}


def test_pod_interface_names_are_the_sparks_vf_netdevs() -> None:
    got = plan_inventory("inventories/lab")
    for run in got.ranks:
        assert run.env["GLOO_SOCKET_IFNAME"] == "enp1s0f0v0"
        assert run.env["NCCL_SOCKET_IFNAME"] == "enp1s0f0v0"


def test_host_ip_modes() -> None:
    fabric = plan_inventory("inventories/lab", host_ip="fabric")
    unset = plan_inventory("inventories/lab", host_ip="unset")
    deployments = from_inventory("inventories/lab")
    ranks = deployment_plan(deployments.deployment("gemma"))["ranks"]
    addresses = {r["rank"]: r["fabric_address"] for r in ranks}
    assert {r.rank: r.env[HOST_IP_ENV] for r in fabric.ranks} == addresses
    assert all(HOST_IP_ENV not in r.env for r in unset.ranks)


def test_expand_follows_kubernetes() -> None:
    env = {"A": "x"}
    assert expand("$(A)-$(B)-$$(A)", env) == "x-$(B)-$(A)"


def test_the_engines_host_ip_variables_come_from_their_listeners() -> None:
    deployments = from_inventory("inventories/lab")
    sglang = deployments.deployment("gemma").res.engine
    assert host_ip_variables(sglang.multi_rank_listeners) == (
        "SGLANG_HOST_IP",
        "HOST_IP",
        "SGLANG_LOCAL_IP_NIC",
    )
    vllm = from_inventory("inventories/lab", switch=SWITCH).deployment("gemma").res.engine
    assert host_ip_variables(vllm.multi_rank_listeners) == ("VLLM_HOST_IP",)


def test_a_vllm_deployment_rehearses_the_head_and_its_headless_worker() -> None:
    deployments = from_inventory("inventories/lab", switch=SWITCH)
    res = deployments.deployment("gemma").res
    assert res.profile.name == VLLM
    got = plan(deployments)
    assert [(r.rank, r.node, r.engine, r.version) for r in got.ranks] == [
        (0, "spark1", "vllm", "0.19.0"),
        (1, "spark2", "vllm", "0.19.0"),
    ]
    head = res.ctx.head_address
    for run in got.ranks:
        # The words after `vllm serve`, as the pod runs them (the GID resolver execs it).
        assert run.argv == tuple(res.argv(res.rank(run.rank))[len(res.engine.entry) :])
        assert run.argv[run.argv.index("--master-addr") + 1] == head
        assert run.argv[run.argv.index("--node-rank") + 1] == str(run.rank)
        assert ("--headless" in run.argv) is (run.rank == 1)
        assert run.env["VLLM_HOST_IP"] == run.fabric_address
    fabric = plan(deployments, host_ip="fabric")
    unset = plan(deployments, host_ip="unset")
    assert [r.env["VLLM_HOST_IP"] for r in fabric.ranks] == [r.fabric_address for r in got.ranks]
    assert all("VLLM_HOST_IP" not in r.env for r in unset.ranks)
