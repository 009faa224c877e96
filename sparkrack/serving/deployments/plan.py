"""What the serve play prints for a set of deployments: each one's plan (ranks, Sparks, VF,
addresses, rank 0's command) and the summary lines of the whole."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkrack import contract
from sparkrack.serving.context import ServingContext
from sparkrack.serving.deployments import gateway
from sparkrack.serving.deployments.load import Deployment
from sparkrack.serving.trust import trust_facts


def deployment_plan(d: Deployment) -> dict[str, Any]:
    """What the serve play prints for one deployment: ranks, Sparks, VF, addresses, rank 0's command."""
    res = d.res
    ctx, fabric = res.ctx, res.engine.uses_fabric
    ranks = []
    for r in res.ranks:
        row: dict[str, Any] = {"rank": r.rank, "node": str(r.node.name)}
        row["spark_index"] = r.node.spark_index
        if fabric:
            vfs = r.node.rail_vfs(d.vf if d.vf is not None else ctx.plan.serving_vf_index)
            row["vf"] = vfs[0].index
            row["fabric_address"] = vfs[0].address
            row["rdma_device"] = ",".join(vf.rdma_device for vf in vfs)
        ranks.append(row)
    return {
        # The code that will run comes first: image, model revision, the repo's own code.
        "runs": trust_facts(d.profile, res.engine),
        "deployment": d.name,
        "profile": d.profile.name,
        "model": d.profile.model,
        "alias": d.alias,
        "image": d.profile.image,
        "engine": res.engine.name,
        "transport": d.profile.transport if fabric else "none (single Spark)",
        "vf": d.vf,
        "dist_init_addr": (
            f"{ctx.head_address}:{ctx.dist_port}" if fabric else "none (single Spark)"
        ),
        "ranks": ranks,
        "command_rank0": res.command(0),
    }


def summary(per: Sequence[Mapping[str, Any]], ctx: ServingContext, objects: int) -> list[str]:
    """The serving plan as lines for the play's output."""
    lines = []
    for d in per:
        plan = d["plan"]
        runs = plan["runs"]
        lines.append(
            f"deployment {d['name']} runs image {runs['image']}, model {runs['model']}, "
            f"remote code: {runs['remote_code']}"
        )
        lines.append(
            f"deployment {d['name']}: {d['profile']} ({d['model']}, alias {d['alias']}) on "
            f"{len(plan['ranks'])} Spark(s), {plan['engine']} image {plan['image']}, NCCL "
            f"transport {plan['transport']}, VF {plan['vf']}, dist-init-addr "
            f"{plan['dist_init_addr']}"
        )
        lines += [f"  rank {r['rank']}: {r}" for r in plan["ranks"]]
        lines.append(f"  command of rank 0: {plan['command_rank0']}")
        copy = f", copied to {', '.join(d['copy_to'])}" if d["copy_to"] else ""
        lines.append(
            f"  weights: {d['model']}@{d['revision']} fetched once by Job {d['fetch_job']} "
            f"({d['need_bytes'] / 1e9:.0f} GB free disk asked){copy}"
        )
    lines.append(
        f"{objects} manifests validated; clients call Service {contract.API_SERVICE}."
        f"{ctx.agents_namespace}:{ctx.api_port} (LiteLLM {gateway.LITELLM_VERSION}, routes by alias)"
    )
    return lines
