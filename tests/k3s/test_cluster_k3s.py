"""K3s node config, release assets, checksum files and the kubeconfig rewrite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from sparkrack.errors import SparkrackError
from sparkrack.fabric.addressplan import NodeInput
from sparkrack.fabric.layout import compute_plan
from sparkrack.inputs.inventory import load_inventory
from sparkrack.k3s import config as k3s
from sparkrack.planner import memory as planner

if TYPE_CHECKING:
    from conftest import Playbook

ROOT = Path(__file__).resolve().parents[2]
CP = NodeInput("cp1", "192.168.1.10")


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory("inventories/example")


def test_agent_config_comes_from_the_address_plan(example: Any) -> None:
    plan = example.plan()
    config = k3s.agent_config(plan, "spark3", CP, k3s.options_from({"flannel_iface": "enP7s7"}))
    assert config == {
        "server": "https://192.168.1.10:6443",
        "token-file": "/etc/rancher/k3s/sparkrack-join-token",
        "node-name": "spark3",
        "node-ip": "192.168.1.13",
        "node-label": [
            "nvidia.com/gpu.present=true",
            "sparkrack.io/rank=2",
            "sparkrack.io/role=spark",
            "sparkrack.io/spark-index=3",
        ],
        "flannel-iface": "enP7s7",
        "kubelet-arg": [
            "system-reserved=memory=6000M",
            "eviction-hard=memory.available<2000M,nodefs.available<10%,nodefs.inodesFree<5%,"
            "imagefs.available<15%,imagefs.inodesFree<5%",
        ],
        "protect-kernel-defaults": True,
    }
    assert "token" not in config  # the secret stays in the root-only token file


def _reserved_mb(config: dict[str, Any]) -> tuple[int, int]:
    """(system-reserved, hard eviction threshold) in MB, read back from the kubelet args."""
    args = dict(a.split("=", 1) for a in config["kubelet-arg"])
    reserved = args["system-reserved"].removeprefix("memory=").removesuffix("M")
    memory = next(t for t in args["eviction-hard"].split(",") if t.startswith("memory."))
    return int(reserved), int(memory.removeprefix("memory.available<").removesuffix("M"))


@pytest.mark.parametrize("headroom", [planner.DEFAULT_OS_HEADROOM_GB, 12.0, 5.5])
def test_memory_guard_follows_the_planners_headroom(
    example: Any, monkeypatch: pytest.MonkeyPatch, headroom: float
) -> None:
    monkeypatch.setattr(planner, "DEFAULT_OS_HEADROOM_GB", headroom)
    config = k3s.agent_config(example.plan(), "spark2", CP, k3s.K3sNodeOptions())
    reserved, eviction = _reserved_mb(config)
    # Reservation + eviction threshold = the headroom, so allocatable = the planner's usable.
    assert (reserved + eviction) / 1000 == headroom
    assert eviction == round(headroom * 1000 * k3s.EVICTION_SHARE) and reserved > eviction
    spec = planner.Hardware(os_headroom_gb=headroom)
    assert planner.GB10_MEMORY_GB - (reserved + eviction) / 1000 == spec.usable_gb


def test_memory_guard_refuses_a_headroom_too_small_to_split(
    example: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(planner, "DEFAULT_OS_HEADROOM_GB", 0.2)
    with pytest.raises(SparkrackError, match="DEFAULT_OS_HEADROOM_GB"):
        k3s.agent_config(example.plan(), "spark2", CP, k3s.K3sNodeOptions())


def test_agent_config_taints_labels_runtime() -> None:
    plan = compute_plan(
        {"subnet": "10.77.0.0/24"}, [NodeInput("a", "10.0.0.2", 5), NodeInput("b", "10.0.0.3", 2)]
    )
    opts = k3s.options_from(
        {
            "taints": ["dedicated=llm:NoSchedule"],
            "labels": {"zone": "rack1"},
            "default_runtime": "nvidia",
        }
    )
    config = k3s.agent_config(plan, "a", CP, opts)
    assert config["node-taint"] == ["dedicated=llm:NoSchedule"]
    assert "zone=rack1" in config["node-label"]
    assert "sparkrack.io/rank=1" in config["node-label"]  # spark_index 5 sorts after 2
    assert config["default-runtime"] == "nvidia"
    assert k3s.options_from({"default_runtime": "", "flannel_iface": None}) == k3s.K3sNodeOptions()


def test_server_config() -> None:
    config = k3s.server_config(CP, k3s.options_from({}))
    # Hardening: Secrets encrypted at rest, agents join with their own secret, Pod Security
    # admission from the file the role writes.
    assert config["secrets-encryption"] is True
    assert config["agent-token-file"] == "/etc/rancher/k3s/sparkrack-agent-secret"
    assert config["kube-apiserver-arg"] == [
        "admission-control-config-file=/etc/rancher/k3s/sparkrack-psa.yaml"
    ]
    assert "token" not in config and "token-file" not in config
    assert config["node-ip"] == config["advertise-address"] == "192.168.1.10"
    assert config["tls-san"] == ["192.168.1.10"]
    assert config["write-kubeconfig-mode"] == "0600"
    assert config["disable"] == ["traefik", "servicelb"]
    assert config["node-label"] == ["sparkrack.io/role=control-plane"]
    assert "flannel-iface" not in config and "node-taint" not in config


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"taints": ["dedicated=llm"]}, "k3s_agent_taints"),
        ({"taints": "a=b:NoSchedule"}, "k3s_agent_taints"),
        ({"labels": {"sparkrack.io/rank": "9"}}, "k3s_agent_labels.sparkrack.io/rank"),
        ({"flannel_iface": "eth0; rm -rf /"}, "k3s_agent_flannel_iface"),
        ({"default_runtime": "Nvidia Runtime"}, "k3s_agent_default_runtime"),
    ],
)
def test_bad_agent_options_are_refused(example: Any, raw: dict[str, Any], key: str) -> None:
    with pytest.raises(SparkrackError) as exc:
        k3s.agent_config(example.plan(), "spark1", CP, k3s.options_from(raw))
    assert key in str(exc.value)


def test_unknown_option_and_unknown_node_are_refused(example: Any) -> None:
    with pytest.raises(SparkrackError, match="unknown option"):
        k3s.options_from({"flannel": "eth0"})
    with pytest.raises(SparkrackError, match="not a Spark"):
        k3s.agent_config(example.plan(), "cp1", CP, k3s.K3sNodeOptions())


def test_release_assets_per_architecture() -> None:
    arm = k3s.release_assets("v1.35.3+k3s1", "aarch64")
    assert (
        arm["binary_url"]
        == "https://github.com/k3s-io/k3s/releases/download/v1.35.3%2Bk3s1/k3s-arm64"
    )
    assert arm["sha256sum_url"].endswith("/v1.35.3%2Bk3s1/sha256sum-arm64.txt")
    assert (
        arm["install_script_url"]
        == "https://raw.githubusercontent.com/k3s-io/k3s/v1.35.3%2Bk3s1/install.sh"
    )
    x86 = k3s.release_assets("v1.35.3+k3s1", "x86_64")
    assert (x86["binary"], x86["images"]) == ("k3s", "k3s-airgap-images-amd64.tar.zst")
    with pytest.raises(SparkrackError, match="k3s_version"):
        k3s.release_assets("1.35.3", "x86_64")
    with pytest.raises(SparkrackError, match="ansible_architecture"):
        k3s.release_assets("v1.35.3+k3s1", "riscv64")


def test_sha256_from_release_sums_file() -> None:
    sums = (
        "1111111111111111111111111111111111111111111111111111111111111111  k3s-airgap-images-arm64.tar\n"
        "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789  k3s-arm64\n"
    )
    assert (
        k3s.sha256_from_sums(sums, "k3s-arm64")
        == "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
    )
    with pytest.raises(SparkrackError, match="k3s: has no sha256 line"):
        k3s.sha256_from_sums(sums, "k3s")


K3S_YAML = """\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0EK
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    client-certificate-data: Q0VSVAo=
    client-key-data: S0VZCg==
"""


def test_kubeconfig_points_at_the_control_plane() -> None:
    out = yaml.safe_load(k3s.rewrite_kubeconfig(K3S_YAML, "https://192.168.1.10:6443"))
    assert out["clusters"][0]["cluster"]["server"] == "https://192.168.1.10:6443"
    assert out["clusters"][0]["cluster"]["certificate-authority-data"] == "Q0EK"
    assert out["users"][0]["user"]["client-key-data"] == "S0VZCg=="
    assert out["current-context"] == "sparkrack"
    assert out["contexts"] == [
        {"name": "sparkrack", "context": {"cluster": "sparkrack", "user": "sparkrack"}}
    ]
    with pytest.raises(SparkrackError, match="not a kubeconfig"):
        k3s.rewrite_kubeconfig("just: text", "https://x:6443")


def test_filters_render_config_yaml_through_ansible(
    ansible_playbook: Playbook, tmp_path: Path
) -> None:
    """The exact filter calls the roles make, through real ansible-playbook and to_nice_yaml."""
    out = tmp_path / "agent.yaml"
    play = [
        {"ansible.builtin.import_playbook": str(ROOT / "playbooks" / "preflight.yml")},
        {
            "name": "render",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "agent config",
                    "ansible.builtin.copy": {
                        "content": "{{ sparkrack_plan"
                        " | sparkrack_k3s_agent_config(hostvars, 'spark2',"
                        " 'cp1', {'flannel_iface': None, 'labels': {}, 'taints': [], 'default_runtime': ''})"
                        " | to_nice_yaml(indent=2) }}",
                        "dest": str(out),
                        "mode": "0600",
                    },
                },
                {
                    "name": "server url",
                    "ansible.builtin.copy": {
                        "content": "{{ 'cp1' | sparkrack_k3s_server_url(hostvars) }}",
                        "dest": str(tmp_path / "url"),
                        "mode": "0600",
                    },
                },
            ],
        },
    ]
    path = tmp_path / "render.yml"
    path.write_text(yaml.safe_dump(play))
    proc = ansible_playbook("-i", str(ROOT / "inventories/lab"), str(path), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = yaml.safe_load(out.read_text())
    assert config["node-ip"] == "172.28.250.12"  # lab mgmt_ip of spark2
    assert config["server"] == "https://172.28.250.10:6443"
    assert "sparkrack.io/spark-index=2" in config["node-label"]
    assert (tmp_path / "url").read_text() == "https://172.28.250.10:6443"


def test_earlyoom_acts_below_the_kubelets_eviction_threshold() -> None:
    """spark_base's earlyoom sizes lie under the hard eviction threshold: the kubelet goes first."""
    defaults = yaml.safe_load((ROOT / "roles/spark_base/defaults/main.yml").read_text())
    spec = yaml.safe_load((ROOT / "roles/spark_base/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    eviction_bytes = k3s.memory_guard().eviction_hard_mb * 1_000_000
    kill, term = defaults["spark_base_earlyoom_kill_kib"], defaults["spark_base_earlyoom_term_kib"]
    assert kill * 1024 < term * 1024 < eviction_bytes
    for key in (k for k in defaults if k.startswith("spark_base_earlyoom")):
        assert options[key]["default"] == defaults[key], key
    assert defaults["spark_base_earlyoom"] is False


# --- hardening --------------------------------------------------------------------------------


def kernel_conflicts(sysctls: dict[str, Any]) -> list[str]:
    """Settings a Spark writes that the kubelet's protect-kernel-defaults would refuse."""
    return [
        k for k, v in sysctls.items() if k in k3s.KUBELET_SYSCTLS and v != k3s.KUBELET_SYSCTLS[k]
    ]


def spark_sysctl_file(extra: dict[str, Any] | None = None) -> dict[str, str]:
    """The spark_base sysctl file as its template renders it (the role's defaults)."""
    import jinja2

    from sparkrack.inputs.variable_table import contract_fact

    defaults = yaml.safe_load((ROOT / "roles/spark_base/defaults/main.yml").read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["combine"] = lambda a, b: {**a, **b}
    text = env.from_string((ROOT / "roles/spark_base/templates/sysctl.conf.j2").read_text()).render(
        ansible_managed="managed",
        spark_base_sysctl={**defaults["spark_base_sysctl"], **(extra or {})},
        sparkrack_contract=contract_fact(),
    )
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return dict(tuple(part.strip() for part in ln.split("=", 1)) for ln in lines)


def test_every_spark_writes_what_protect_kernel_defaults_checks() -> None:
    defaults = yaml.safe_load((ROOT / "roles/spark_base/defaults/main.yml").read_text())
    assert kernel_conflicts(defaults["spark_base_sysctl"]) == []
    written = spark_sysctl_file()
    for key, value in k3s.KUBELET_SYSCTLS.items():
        assert written[key] == str(value), key
    # The Spark's own settings are written too.
    assert written["net.ipv4.conf.all.arp_ignore"] == "1"


def test_negative_control_a_conflicting_spark_setting_is_found() -> None:
    assert kernel_conflicts({"kernel.panic": 0, "net.core.rmem_max": 1}) == ["kernel.panic"]


def test_pod_security_admission_is_restricted_by_default() -> None:
    config = k3s.pod_security_config()
    [plugin] = config["plugins"]
    defaults = plugin["configuration"]["defaults"]
    assert {defaults[m] for m in ("enforce", "audit", "warn")} == {"restricted"}
    assert plugin["configuration"]["exemptions"]["namespaces"] == ["kube-system"]


def test_agents_join_with_the_agent_token_never_the_server_token() -> None:
    real = (ROOT / "roles/k3s_server/tasks/hardware/real.yml").read_text()
    assert "sparkrack_contract.k3s_agent_token_file" in real
    for server_token in ("server/node-token", "server/token"):
        assert server_token not in real
    main = yaml.safe_load((ROOT / "roles/k3s_server/tasks/main.yml").read_text())
    [secret] = [t for t in main if "k3s_agent_secret_file" in json.dumps(t)]
    assert secret["no_log"] is True and secret["ansible.builtin.copy"]["force"] is False
    assert secret["ansible.builtin.copy"]["mode"] == "0600"


def test_the_role_writes_the_same_admission_config() -> None:
    from sparkrack.adapters.ansible import FILTERS

    assert FILTERS["sparkrack_k3s_pod_security_config"]({}) == k3s.pod_security_config()
