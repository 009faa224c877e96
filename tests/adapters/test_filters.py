"""One test per Jinja filter that no other adapter test covers, and the table's completeness:
every filter in FILTERS is used by a role or playbook and named by a test, and every
``sparkrack_*`` filter a role calls exists. Real inventories and real core code throughout."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from sparkrack.adapters.ansible import FILTERS
from sparkrack.inputs.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
USE = re.compile(r"\|\s*(sparkrack_\w+)")
LAB = load_inventory(str(ROOT / "inventories" / "lab"))
PLAN = LAB.plan().to_dict()
HOSTVARS = LAB.hostvars
CONTROL = LAB.groups["control_plane"][0]


def used_filters(files: Iterable[Path]) -> set[str]:
    return {name for f in files for name in USE.findall(f.read_text())}


def ansible_files(root: Path) -> list[Path]:
    return [
        p
        for d in ("roles", "playbooks")
        for p in (root / d).rglob("*")
        if p.suffix in (".yml", ".j2")
    ] + [root / "site.yml"]


def named_in_tests(root: Path) -> set[str]:
    text = "\n".join(p.read_text() for p in (root / "tests").rglob("test_*.py"))
    return set(re.findall(r"sparkrack_\w+", text))


def table_gaps(filters: Iterable[str], used: set[str], tested: set[str]) -> list[str]:
    names = set(filters)
    return sorted(
        [f"{n}: no role or playbook uses it (dead filter)" for n in names - used]
        + [f"{n}: no test names it" for n in names - tested]
        + [f"{n}: used in a role but not in FILTERS" for n in used - names]
    )


def test_every_filter_is_used_and_tested_and_every_use_exists() -> None:
    assert table_gaps(FILTERS, used_filters(ansible_files(ROOT)), named_in_tests(ROOT)) == []


def test_table_checker_reports_dead_untested_and_unknown_filters() -> None:
    gaps = table_gaps(
        ["sparkrack_a", "sparkrack_b"], {"sparkrack_a", "sparkrack_c"}, {"sparkrack_a"}
    )
    assert gaps == [
        "sparkrack_b: no role or playbook uses it (dead filter)",
        "sparkrack_b: no test names it",
        "sparkrack_c: used in a role but not in FILTERS",
    ]


def test_sparkrack_fabric_plan_computes_the_lab_plan_and_refuses_a_bad_subnet() -> None:
    fabric = LAB.var("fabric")
    plan = FILTERS["sparkrack_fabric_plan"](fabric, LAB.sparks, HOSTVARS)
    assert plan == PLAN
    with pytest.raises(AnsibleFilterError, match="address plan refused"):
        FILTERS["sparkrack_fabric_plan"]({**fabric, "subnet": "10.0.0.0/33"}, LAB.sparks, HOSTVARS)


class RawHostvars(dict[str, dict[str, object]]):
    """Ansible's ``hostvars`` as the filter uses it: ``raw_get`` (untemplated) per host."""

    def raw_get(self, host: str) -> dict[str, object]:
        return self.get(host) or {}


def test_sparkrack_inventory_check_reports_the_lab_and_refuses_a_missing_group() -> None:
    hostvars = RawHostvars({**HOSTVARS, "localhost": LAB.control_vars or {}})
    sources = [str(ROOT / "inventories" / "lab")]
    lines = FILTERS["sparkrack_inventory_check"](LAB.groups, hostvars, sources)
    assert lines[-1].startswith("check: OK, 3 deployment(s)")
    assert any(line.startswith("deployment super-trtllm: ") for line in lines)
    with pytest.raises(AnsibleFilterError, match="inventory check refused") as exc:
        FILTERS["sparkrack_inventory_check"]({"sparks": LAB.sparks}, hostvars, sources)
    assert "control_plane: has 0 host(s)" in str(exc.value)


def test_sparkrack_rdma_rounds_tests_every_spark_once() -> None:
    four = FILTERS["sparkrack_rdma_rounds"](["s1", "s2", "s3", "s4"])
    assert four == [
        {
            "s1": {"role": "server", "peer": "s2"},
            "s2": {"role": "client", "peer": "s1"},
            "s3": {"role": "server", "peer": "s4"},
            "s4": {"role": "client", "peer": "s3"},
        }
    ]
    three = FILTERS["sparkrack_rdma_rounds"](["s1", "s2", "s3"])
    assert three[1] == {
        "s1": {"role": "server", "peer": "s3"},
        "s3": {"role": "client", "peer": "s1"},
    }


def test_sparkrack_k3s_server_config_and_its_refusal() -> None:
    config = FILTERS["sparkrack_k3s_server_config"](CONTROL, HOSTVARS, {})
    assert config["node-ip"] == config["advertise-address"] == HOSTVARS[CONTROL]["mgmt_ip"]
    with pytest.raises(AnsibleFilterError, match="unknown option"):
        FILTERS["sparkrack_k3s_server_config"](CONTROL, HOSTVARS, {"flannel": "x"})


def test_sparkrack_k3s_release_names_the_arm64_assets_and_refuses_a_bad_tag() -> None:
    assets = FILTERS["sparkrack_k3s_release"]("v1.35.3+k3s1", "aarch64")
    assert assets["binary"] == "k3s-arm64" and "v1.35.3%2Bk3s1" in assets["binary_url"]
    with pytest.raises(AnsibleFilterError, match="not a K3s release tag"):
        FILTERS["sparkrack_k3s_release"]("latest", "aarch64")


def test_sparkrack_sha256_from_sums_finds_the_line_or_refuses() -> None:
    digest = "ab" * 32
    sums = f"{'cd' * 32}  k3s\n{digest}  k3s-arm64\n"
    assert FILTERS["sparkrack_sha256_from_sums"](sums, "k3s-arm64") == digest
    with pytest.raises(AnsibleFilterError, match="no sha256 line"):
        FILTERS["sparkrack_sha256_from_sums"](sums, "k3s-armhf")


def test_sparkrack_kubeconfig_rewrite_points_at_the_control_plane() -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "default", "user": {"token": "x"}}],
        "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}],
        "current-context": "default",
    }
    text = FILTERS["sparkrack_kubeconfig_rewrite"](
        yaml.safe_dump(kubeconfig), "https://10.1.2.3:6443"
    )
    out = yaml.safe_load(text)
    assert out["clusters"][0]["cluster"]["server"] == "https://10.1.2.3:6443"
    with pytest.raises(AnsibleFilterError, match="kubeconfig refused"):
        FILTERS["sparkrack_kubeconfig_rewrite"]("{}", "https://10.1.2.3:6443")


def test_sparkrack_cluster_manifests_render_one_nad_per_vf_in_use() -> None:
    docs = FILTERS["sparkrack_cluster_manifests"](PLAN, {})
    nads = [d for d in docs if d["kind"] == "NetworkAttachmentDefinition"]
    assert len(nads) == len(PLAN["vfs_in_use"]) * len(PLAN["rails"])
    with pytest.raises(AnsibleFilterError, match="refused"):
        FILTERS["sparkrack_cluster_manifests"](PLAN, {"no_such_option": 1})


def test_sparkrack_fabric_check_sweeps_one_pod_per_spark_and_rail_and_a_bad_transport() -> None:
    sweeps = FILTERS["sparkrack_fabric_check_sweeps"](PLAN, {}, "roce")
    # the lab has two rails: every rail at once, then each alone
    assert [s["name"] for s in sweeps] == ["all-rails", "rail0", "rail1"]
    assert len(PLAN["rails"]) == 2
    for sweep in sweeps:
        pods = [d for d in sweep["manifests"] if d["kind"] == "Pod"]
        assert len(pods) == len(LAB.sparks)
        labels = {p["metadata"]["labels"]["sparkrack.io/fabric-sweep"] for p in pods}
        assert labels == {sweep["name"]} and sweep["selector"].endswith(f"={sweep['name']}")
        hcas = {
            e["value"]
            for p in pods
            for e in p["spec"]["containers"][0]["env"]
            if e["name"] == "NCCL_IB_HCA"
        }
        assert all(h.count(",") == len(sweep["devices"]) - 1 for h in hcas)
    names = [p["metadata"]["name"] for s in sweeps for p in s["manifests"] if p["kind"] == "Pod"]
    assert len(set(names)) == len(names)
    with pytest.raises(AnsibleFilterError, match="roce or socket"):
        FILTERS["sparkrack_fabric_check_sweeps"](PLAN, {}, "tcp")


def test_sparkrack_contract_carries_names_and_the_kubeconfig_under_home() -> None:
    fact = FILTERS["sparkrack_contract"]("/home/owner/")
    assert fact["kubeconfig"] == "/home/owner/.kube/sparkrack.yaml"
    assert fact["serving_defaults"]["serving_namespace"] == "sparkrack"
    assert "kubeconfig" not in FILTERS["sparkrack_contract"]("")


def test_sparkrack_fetch_secret_data_gives_pusher_and_receivers_one_password() -> None:
    data = FILTERS["sparkrack_fetch_secret_data"]("s3cret")
    assert data == {"password": "s3cret", "rsyncd.secrets": "sparkrack:s3cret\n"}


def test_sparkrack_k3s_node_registers_the_agent_config_and_refuses_a_foreign_machine() -> None:
    config = FILTERS["sparkrack_k3s_agent_config"](PLAN, HOSTVARS, "spark1", CONTROL)
    node = FILTERS["sparkrack_k3s_node"](config, "aarch64")
    assert (
        node["metadata"]["name"] == "spark1" and node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    )
    server = FILTERS["sparkrack_k3s_node"](
        {"node-name": "cp1"}, "x86_64", {"cpu": 2, "memory": 8}, True
    )
    assert server["status"]["capacity"] == {"cpu": "2", "memory": "8", "pods": "110"}
    with pytest.raises(AnsibleFilterError, match="K3s node refused"):
        FILTERS["sparkrack_k3s_node"](config, "sparc")


def test_the_live_api_filters_dry_run_refusals_jobs_and_stale_serving_objects() -> None:
    labels = {"sparkrack.io/component": "serving", "sparkrack.io/deployment": "a",
              "sparkrack.io/profile": "p"}  # fmt: skip
    sts = {"kind": "StatefulSet", "metadata": {"name": "s", "namespace": "n", "labels": labels},
           "spec": {"template": {"metadata": {"labels": labels}, "spec": {"containers": []}}}}  # fmt: skip
    checked = FILTERS["sparkrack_dry_run_objects"]([sts], [{"kind": "StatefulSet", "name": "s"}])
    assert [o["kind"] for o in checked] == ["Pod"]
    refused = {"error": {"msg": 'Failed: b\'{"message":"no"}\''}}
    assert FILTERS["sparkrack_api_refusals"](refused, checked) == ["Pod/n/s-dry-run: no"]
    job = {"kind": "Job", "metadata": {"name": "j"}, "spec": {}}
    plan = FILTERS["sparkrack_job_plan"]([job], [{"metadata": {"name": "old"}}])
    assert plan["delete"] == ["old"] and plan["apply"][0]["metadata"]["annotations"]
    old = {
        **sts,
        "metadata": {**sts["metadata"], "labels": {**labels, "sparkrack.io/profile": "q"}},
    }
    found = [{"item": "StatefulSet", "resources": [old]}, {"item": "Pod", "resources": []}]
    assert FILTERS["sparkrack_stale_serving"]([sts], found) == [
        {"kind": "StatefulSet", "namespace": "n", "name": "s"}
    ]


def test_stale_serving_takes_the_hidden_secrets_and_returns_names_only() -> None:
    labels = {"sparkrack.io/component": "serving", "sparkrack.io/deployment": "a",
              "sparkrack.io/profile": "p"}  # fmt: skip
    sts = {"kind": "StatefulSet", "metadata": {"name": "s", "namespace": "n", "labels": labels}}

    def secret(name: str, deployment: str) -> dict[str, Any]:
        meta = {"name": name, "namespace": "n",
                "labels": {"sparkrack.io/component": "serving", "sparkrack.io/deployment": deployment}}  # fmt: skip
        return {"kind": "Secret", "metadata": meta, "data": {"key": "c2VjcmV0LXZhbHVl"}}

    secrets = [secret("a-keys", "a"), secret("gone-keys", "gone")]
    stale = FILTERS["sparkrack_stale_serving"]([sts], [], None, secrets)
    assert stale == [{"kind": "Secret", "namespace": "n", "name": "gone-keys"}]
    assert "c2VjcmV0LXZhbHVl" not in repr(stale)


def test_stale_watchdogs_are_those_of_deployments_that_left_the_list() -> None:
    def obj(kind: str, name: str, deployment: str) -> dict[str, Any]:
        labels = {"sparkrack.io/component": "watchdog", "sparkrack.io/deployment": deployment}
        return {"kind": kind, "metadata": {"name": name, "namespace": "n", "labels": labels}}

    found = [
        {"item": "ServiceAccount", "resources": [obj("ServiceAccount", "a-w", "a")]},
        {"item": "Deployment", "resources": [obj("Deployment", "a-w", "a"), obj("Deployment", "b-w", "b")]},
    ]  # fmt: skip
    # The pod first, its rights last; a kept deployment's watchdog stays (negative control).
    assert FILTERS["sparkrack_stale_watchdogs"](found, ["b"], True, None, True) == [
        {"kind": "Deployment", "namespace": "n", "name": "a-w"},
        {"kind": "ServiceAccount", "namespace": "n", "name": "a-w"},
    ]
    assert FILTERS["sparkrack_stale_watchdogs"](found, ["a", "b"], True, None, True) == []
    # The guard's and the evidence volume's answers are the render's to give: a call without
    # them is refused, not defaulted.
    with pytest.raises(TypeError):
        FILTERS["sparkrack_stale_watchdogs"](found, ["b"])
    with pytest.raises(TypeError):
        FILTERS["sparkrack_stale_watchdogs"](found, ["b"], True, None)


def test_watchdogs_off_remove_every_watchdog_and_the_memory_guard() -> None:
    def obj(kind: str, name: str, component: str, deployment: str = "") -> dict[str, Any]:
        labels = {"sparkrack.io/component": component}
        if deployment:
            labels["sparkrack.io/deployment"] = deployment
        return {"kind": kind, "metadata": {"name": name, "namespace": "n", "labels": labels}}

    found = [
        {"item": "DaemonSet", "resources": [obj("DaemonSet", "g", "memguard")]},
        {"item": "Deployment", "resources": [obj("Deployment", "a-w", "watchdog", "a")]},
        {"item": "Role", "resources": [obj("Role", "g", "memguard")]},
        {"item": "PersistentVolume", "resources": [obj("PersistentVolume", "e", "watchdog")]},
        {"item": "PersistentVolumeClaim", "resources": [obj("PersistentVolumeClaim", "e", "watchdog")]},
    ]  # fmt: skip
    on = FILTERS["sparkrack_stale_watchdogs"](found, ["a"], True, None, True)
    assert on == []  # negative control: with the watchdogs on, everything stays
    # A deployment that leaves takes its watchdog; the evidence volume stays for the others.
    assert FILTERS["sparkrack_stale_watchdogs"](found, [], True, None, True) == [
        {"kind": "Deployment", "namespace": "n", "name": "a-w"},
    ]
    # Off: the claim after the pods that mount it, the volume after its claim.
    assert FILTERS["sparkrack_stale_watchdogs"](found, [], False, None, False) == [
        {"kind": "DaemonSet", "namespace": "n", "name": "g"},
        {"kind": "Deployment", "namespace": "n", "name": "a-w"},
        {"kind": "Role", "namespace": "n", "name": "g"},
        {"kind": "PersistentVolumeClaim", "namespace": "n", "name": "e"},
        {"kind": "PersistentVolume", "namespace": "n", "name": "e"},
    ]


def test_a_dry_run_pod_runs_as_default_while_its_account_is_applied_in_the_same_run() -> None:
    sa = {"kind": "ServiceAccount", "metadata": {"name": "w", "namespace": "n"}}
    dep = {"kind": "Deployment", "metadata": {"name": "d", "namespace": "n"},
           "spec": {"template": {"spec": {"serviceAccountName": "w", "containers": []}}}}  # fmt: skip
    [pod] = [o for o in FILTERS["sparkrack_dry_run_objects"]([sa, dep], []) if o["kind"] == "Pod"]
    assert pod["spec"]["serviceAccountName"] == "default"
    [pod] = [o for o in FILTERS["sparkrack_dry_run_objects"]([dep], []) if o["kind"] == "Pod"]
    assert pod["spec"]["serviceAccountName"] == "w"


def test_image_archive_filter_gives_the_reference_and_refuses_a_bad_archive(
    tmp_path: Path,
) -> None:
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "serving"))
    from test_image_archive import NAME, _docker_save

    from sparkrack.serving.image_archive import to_oci

    made = to_oci(_docker_save(tmp_path / "d.tar"), tmp_path / "oci.tar", NAME)
    found = FILTERS["sparkrack_image_archive"](str(tmp_path / "oci.tar"))
    assert found == {"name": NAME, "digest": made.digest, "reference": made.reference}
    with pytest.raises(AnsibleFilterError, match="image archive refused"):
        FILTERS["sparkrack_image_archive"](str(tmp_path / "d.tar"))


def test_node_script_is_the_text_the_pods_get_and_nothing_else() -> None:
    from sparkrack.serving.switch.plan import script_files

    node_script = FILTERS["sparkrack_node_script"]
    assert node_script("memsettle.py") == script_files()["memsettle.py"]
    assert "def resolve_main" in node_script("gidtable.py")
    with pytest.raises(AnsibleFilterError, match="not one of"):
        node_script("fetch_step.py")
    with pytest.raises(AnsibleFilterError, match="not one of"):
        node_script("../../adapters/ansible.py")


def test_gid_standin_lists_every_folder_and_file_of_the_vfs_in_use() -> None:
    vfs = [
        {"rdma_device": "rocep1s0f0v0", "address": "10.77.0.33", "netdev": "enp1s0f0v0"},
        {"rdma_device": "roceP2p1s0f0v0", "address": "10.77.1.33", "netdev": "enP2p1s0f0v0"},
    ]
    tree = FILTERS["sparkrack_gid_standin"](vfs, "/x", 3)
    assert "/x/rocep1s0f0v0/ports/1/gid_attrs/types" in tree["directories"]
    v2 = {f["dest"]: f["content"] for f in tree["files"]}
    assert v2["/x/roceP2p1s0f0v0/ports/1/gids/3"] == "0000:0000:0000:0000:0000:ffff:0a4d:0121\n"
    assert v2["/x/roceP2p1s0f0v0/ports/1/gid_attrs/types/3"] == "RoCE v2\n"
    with pytest.raises(AnsibleFilterError):
        FILTERS["sparkrack_gid_standin"](vfs, "/x", 9)
