"""What the rehearsal starts: every rank of every multi-rank deployment, from the real render.

Argv, environment, labels and Spark of a rank come from the rendered StatefulSet of that rank
(``render_serving``, the render the serve play applies); the policies from the rendered
NetworkPolicies. Kubernetes' part is done as kubelet does it: ``valueFrom`` fields are filled
(``status.podIP``: the pod's cluster address; a Secret key: a placeholder that is never printed)
and ``$(VAR)`` references in argv are expanded. Multus' pod interface names (``net1``...) are
given as the names the Spark's namespace has for the same VFs (the address plan's netdevs): the
rank runs in the Spark's namespace, not in a pod's.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sparkrack import contract
from sparkrack.errors import Problem, SparkrackError
from sparkrack.patches import handed_keys
from sparkrack.serving.deployments.bundle import DeploymentSet, from_inventory, render_serving
from sparkrack.serving.engines.listeners import Bind, Listener, address_env
from sparkrack.serving.rehearsal.policy import Admission, Pod, admission

HostIp = Literal["render", "fabric", "unset"]
"""``render``: the rendered env as is; ``fabric``: the variable the engine reads first for the
address its ranks bind and announce (SGLang: ``SGLANG_HOST_IP``; vLLM: ``VLLM_HOST_IP``) = the
rank's fabric address from the address plan; ``unset``: none of the variables it reads for it."""


def host_ip_variables(listeners: Sequence[Listener]) -> tuple[str, ...]:
    """Every variable that chooses the address of a fabric listener (the engine's own record)."""
    return tuple(
        name
        for row in listeners
        if row.bind is Bind.FABRIC and not row.interface
        for name in row.chosen_by
    )


@dataclass(frozen=True)
class RankRun:
    deployment: str
    rank: int
    node: str
    pod: Pod
    fabric_address: str
    engine: str
    """PyPI distribution of the engine (``sglang``, ``vllm``)."""
    version: str
    argv: tuple[str, ...] = field(repr=False)
    """Words after the engine's entry point, ``$(VAR)`` expanded."""
    env: dict[str, str] = field(repr=False)
    secret_values: tuple[str, ...] = field(default=(), repr=False)

    @property
    def label(self) -> str:
        return f"{self.deployment} rank {self.rank}"


@dataclass(frozen=True)
class Rehearsal:
    ranks: tuple[RankRun, ...]
    policies: tuple[dict[str, Any], ...]

    def admissions(self) -> list[Admission]:
        """Every ordered pair of rehearsed pods, as the policies admit it."""
        pods = [r.pod for r in self.ranks]
        return [admission(self.policies, s, d) for d in pods for s in pods if s.ip != d.ip]

    def by_node(self) -> dict[str, list[Admission]]:
        node_of = {r.pod.ip: r.node for r in self.ranks}
        out: dict[str, list[Admission]] = {}
        for a in self.admissions():
            out.setdefault(node_of[a.dest.ip], []).append(a)
        return out


_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\$")


def expand(word: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of a container argument (``$$`` escapes a ``$``)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(sub, word)


def _container_env(
    entries: Sequence[Mapping[str, Any]], pod_ip: str
) -> tuple[dict[str, str], tuple[str, ...]]:
    env: dict[str, str] = {}
    hidden: list[str] = []
    for e in entries:
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        source = e.get("valueFrom") or {}
        if (source.get("fieldRef") or {}).get("fieldPath") == "status.podIP":
            env[e["name"]] = pod_ip
        elif "secretKeyRef" in source:
            value = secrets.token_hex(16)
            env[e["name"]] = value
            hidden.append(value)
    return env, tuple(hidden)


def _rank_pods(manifests: Sequence[Mapping[str, Any]], deployment: str) -> list[Mapping[str, Any]]:
    return [
        d
        for d in manifests
        if d.get("kind") == "StatefulSet"
        and d["spec"]["template"]["metadata"]["labels"].get(contract.LABEL_DEPLOYMENT) == deployment
    ]


def plan(
    deployments: DeploymentSet, *, host_ip: HostIp = "render", names: Sequence[str] = ()
) -> Rehearsal:
    """The rehearsal of every multi-rank deployment of ``deployments`` (or those ``names``)."""
    rendered = render_serving(deployments, source="rehearsal")
    manifests: list[dict[str, Any]] = rendered["manifests"]
    policies = tuple(d for d in manifests if d.get("kind") == "NetworkPolicy")
    ranks: list[RankRun] = []
    for d in deployments.deployments:
        res = d.res
        if len(res.ranks) < 2 or not res.engine.uses_fabric or (names and d.name not in names):
            continue
        if res.engine.upstream is None:
            raise SparkrackError(
                Problem(
                    d.profile.source,
                    "engine",
                    f"{res.engine.name} has no release wheel to rehearse with",
                    "rehearse engines with an engine-check environment",
                    "rehearsal",
                )
            )
        version = res.engine.upstream_version(d.profile) or "unknown"
        entry = list(res.engine.entry)
        by_rank = {
            int(s["spec"]["template"]["metadata"]["labels"][contract.LABEL_RANK]): s
            for s in _rank_pods(manifests, d.name)
        }
        for rank in res.ranks:
            sts = by_rank[rank.rank]
            template = sts["spec"]["template"]
            # The entry point is in args (SGLang's launcher) or ends the command (vLLM's).
            container = next(
                c for c in template["spec"]["containers"] if _contains(_words(c), entry)
            )
            node = str(template["spec"]["nodeSelector"]["kubernetes.io/hostname"])
            pod_ip = rank.node.node_ip
            env, hidden = _container_env(container.get("env") or [], pod_ip)
            args = _words(container)
            start = _index(args, entry) + len(entry)
            # The keys the launcher hands the server inside its interpreter, after the args.
            handed = handed_keys(container.get("command") or [])
            keys = [w for var, flag in handed.items() for w in (flag, env[var])]
            argv = (*(expand(w, env) for w in args[start:]), *keys)
            vfs = rank.node.rail_vfs(d.vf if d.vf is not None else res.ctx.plan.serving_vf_index)
            netdevs = {contract.pod_ifname(vf.rail): vf.netdev for vf in vfs}
            env = {k: netdevs.get(v, v) if k.endswith("IFNAME") else v for k, v in env.items()}
            listeners = res.engine.multi_rank_listeners
            if host_ip != "render":
                for key in host_ip_variables(listeners):
                    env.pop(key, None)
            if host_ip == "fabric":
                env.update(address_env(listeners, vfs[0].address))
            pod = Pod(
                name=f"{sts['metadata']['name']}-0",
                namespace=str(sts["metadata"]["namespace"]),
                labels=dict(template["metadata"]["labels"]),
                ip=pod_ip,
            )
            ranks.append(
                RankRun(
                    d.name,
                    rank.rank,
                    node,
                    pod,
                    vfs[0].address,
                    res.engine.upstream,
                    version,
                    argv,
                    env,
                    hidden,
                )
            )
    nodes = [r.node for r in ranks]
    if len(set(nodes)) != len(nodes):
        raise SparkrackError(
            Problem(
                "serving_deployments",
                "sparks",
                "two rehearsed ranks share a Spark: their pods would share one address here",
                "rehearse the deployments one at a time (names)",
                "rehearsal",
            )
        )
    return Rehearsal(tuple(ranks), policies)


def plan_inventory(
    inventory: str, *, host_ip: HostIp = "render", switch: Mapping[str, str] | None = None
) -> Rehearsal:
    """The rehearsal of an inventory's deployments; ``switch`` (deployment -> profile) rehearses
    them as the one-line switch of a deployment's profile would run them."""
    return plan(from_inventory(inventory, switch=switch), host_ip=host_ip)


def _words(container: Mapping[str, Any]) -> list[str]:
    return [*(container.get("command") or []), *(container.get("args") or [])]


def _index(words: Sequence[str], part: Sequence[str]) -> int:
    for i in range(len(words) - len(part) + 1):
        if list(words[i : i + len(part)]) == list(part):
            return i
    return -1


def _contains(words: Sequence[str], part: Sequence[str]) -> bool:
    return _index(words, part) >= 0
