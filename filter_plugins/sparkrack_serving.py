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
    deployments: Mapping[str, Any],
    plan_fact: Mapping[str, Any],
    hostvars: Any,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """``{{ serving_vars | sparkrack_serving_render(sparkrack_plan, hostvars, settings) }}``

    ``serving_vars`` holds ``serving_deployments``/``serving_profile``/``serving_profile_file``/
    ``serving_spark``; ``sparkrack_plan`` is the address plan preflight computed (read here,
    never recomputed). -> every deployment validated for its Sparks, every manifest (the
    deployments' and the gateway's) validated against the Kubernetes schemas, and per deployment
    the facts the serve play needs (see :func:`sparkrack.profiles.serving.render_serving`).
    """
    from sparkrack.k8svalidate import validate_manifests
    from sparkrack.profiles import context_from_vars
    from sparkrack.profiles.serving import from_vars, render_serving

    try:
        plan = FabricPlan.from_dict(plan_fact)
        gid: dict[str, int] = {}
        for node in plan.nodes:
            value = hostvars[node.name].get("roce_gid_index")
            if value is not None and str(value).isdigit():
                gid[node.name] = int(value)
        ctx = context_from_vars(plan, dict(settings), gid)
        serving = from_vars(dict(deployments), ctx, "inventory serving_deployments")
        rendered = render_serving(serving, str(settings.get("serving_gateway_key_secret") or ""))
        problems = validate_manifests(rendered["manifests"], source="serving")
        if problems:
            raise SparkrackError(problems)
    except SparkrackError as exc:
        raise AnsibleFilterError(f"serving refused:\n{exc}") from None
    return rendered


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
