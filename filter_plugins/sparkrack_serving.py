"""Jinja filters for the serving role. Thin wrappers: all logic lives in sparkrack.profiles,
sparkrack.nccl and sparkrack.diagnose; a refusal raises AnsibleFilterError naming file, key,
problem, fix and rule id, so the play stops before anything is applied.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from ansible.errors import AnsibleFilterError  # noqa: E402

from sparkrack.addressplan import FabricPlan  # noqa: E402
from sparkrack.errors import SparkrackError  # noqa: E402


def serving_render(
    profile_ref: str,
    plan_fact: Mapping[str, Any],
    hostvars: Any,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """``{{ serving_profile | sparkrack_serving_render(sparkrack_plan, hostvars, settings) }}``

    ``sparkrack_plan`` is the address plan preflight computed; it is read here, never recomputed.

    -> {profile, model, transport, selector, head_pod, plan, manifests}: the profile validated
    for this inventory's Spark count and every manifest validated against the Kubernetes schemas.
    """
    from sparkrack.k8svalidate import validate_manifests
    from sparkrack.profiles import (
        context_from_vars,
        engine_of,
        load_checked,
        render_manifests,
        serving_selector,
    )
    from sparkrack.profiles_cli import serving_plan

    try:
        plan = FabricPlan.from_dict(plan_fact)
        profile = load_checked(str(profile_ref), nodes=len(plan.nodes))
        gid: dict[str, int] = {}
        for node in plan.nodes:
            value = hostvars[node.name].get("roce_gid_index")
            if value is not None and str(value).isdigit():
                gid[node.name] = int(value)
        ctx = context_from_vars(plan, dict(settings), gid)
        docs = render_manifests(profile, ctx)
        problems = validate_manifests(docs, source=f"serving {profile.name}")
        if problems:
            raise SparkrackError(problems)
    except SparkrackError as exc:
        raise AnsibleFilterError(f"serving profile refused:\n{exc}") from None
    # One pod per StatefulSet (replicas: 1), rank 0 first; single-Spark engines have one.
    pods = [f"{d['metadata']['name']}-0" for d in docs if d["kind"] == "StatefulSet"]
    return {
        "profile": profile.name,
        "model": profile.model,
        "transport": profile.transport,
        # One process on one Spark uses no NCCL: the transport gate applies to multi-Spark groups.
        "nccl_check": engine_of(profile.data).uses_fabric,
        "namespace": ctx.namespace,
        "selector": serving_selector(profile),
        "head_pod": pods[0],
        "pods": pods,
        "api_port": ctx.api_port,
        "plan": serving_plan(profile, ctx),
        "manifests": docs,
    }


def nccl_problems(log: Any, requested: str) -> list[str]:
    """``{{ head_log | sparkrack_nccl_problems('roce') }}`` -> problem lines (empty = transport ok)."""
    from sparkrack.nccl import check_transport

    text = "\n".join(log) if isinstance(log, list) else str(log or "")
    return [str(p) for p in check_transport(text, requested, source="head NCCL log")]  # type: ignore[arg-type]


def diagnose_lines(log: Any) -> list[str]:
    """``{{ rank_log | sparkrack_diagnose }}`` -> one text block per known failure signature."""
    from sparkrack.diagnose import diagnose

    text = "\n".join(log) if isinstance(log, list) else str(log or "")
    return [str(f) for f in diagnose(text)]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sparkrack_serving_render": serving_render,
            "sparkrack_nccl_problems": nccl_problems,
            "sparkrack_diagnose": diagnose_lines,
        }
