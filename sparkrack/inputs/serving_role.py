"""The serving role's ``defaults/main.yml`` and ``meta/argument_specs.yml``, written from the
variable table: each ``serving_*`` row of :data:`~.variable_table.VARIABLES` gives its default,
its argument-spec type and its description, and :data:`PLAY_OPTIONS` the options only the serve
play reads (its waits, the smoke request, the vaulted secrets, the kubeconfig).

``python -m sparkrack.inputs.serving_role`` rewrites both files; ``--check`` says which differs.
``tests/inputs/test_serving_role.py`` holds the files equal to what this module writes.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparkrack.inputs.variable_table import SERVING, Variable, serving_defaults

ROLE = Path("roles/serving")
DEFAULTS = ROLE / "defaults" / "main.yml"
SPECS = ROLE / "meta" / "argument_specs.yml"
WIDTH = 100
FROM_FACT = '"{{{{ sparkrack_contract.serving_defaults.{0} }}}}"'


@dataclass(frozen=True)
class PlayOption:
    """An option the serve play reads and no inventory check types beyond its argument spec."""

    name: str
    default: Any
    spec: str
    doc: str
    no_log: bool = False


PLAY_OPTIONS: tuple[PlayOption, ...] = (
    PlayOption(
        "serving_hf_token",
        "{{ vault_hf_token | default('') }}",
        "str",
        "the HF token itself, from a vaulted variable, never printed; empty: public models only",
        no_log=True,
    ),
    PlayOption(
        "serving_gateway_key",
        "{{ vault_gateway_key | default('') }}",
        "str",
        "the gateway's master key, from a vaulted variable; clients send it as their API key",
        no_log=True,
    ),
    PlayOption("serving_gateway_timeout", 300, "int", "seconds to wait for the gateway"),
    PlayOption(
        "serving_teardown_timeout", 300, "int", "seconds to wait for the previous model's pods"
    ),
    PlayOption("serving_ready_timeout", 2400, "int", "seconds to wait for the new pods' Ready"),
    PlayOption(
        "serving_smoke_prompt",
        "Reply with the single word: ready",
        "str",
        "the smoke test: one streaming chat request to the head",
    ),
    PlayOption("serving_smoke_max_tokens", 64, "int", "tokens the smoke request asks for"),
    PlayOption("serving_smoke_timeout", 300, "int", "seconds the smoke request may take"),
    PlayOption("serving_log_lines", 60, "int", "log lines per rank printed when a deploy fails"),
    PlayOption(
        "serving_kubeconfig",
        "{{ sparkrack_kubeconfig | default(sparkrack_contract.kubeconfig) }}",
        "path",
        "the kubeconfig on the control machine (written by the k3s_server role)",
    ),
    PlayOption(
        "serving_simulated_nccl_log",
        "{{ role_path }}/../../tests/data/nccl/captured/socket.log",
        "path",
        "the lab only (spark_hardware: simulated): the captured NCCL log judged instead of the "
        "head's (KWOK pods run nothing); real NCCL 2.28.9 output over the socket transport",
    ),
)

DESCRIPTION = (
    "Validates every deployment (schema + every seed rule for its Sparks, VFs, names, aliases, "
    "memory per Spark), renders each deployment's StatefulSets, Services and ConfigMaps and the "
    "LiteLLM gateway, validates them against the Kubernetes schemas, and when k3s_api_ready is "
    "true on the control plane removes the objects of deployments that left the list by label, "
    "applies, and per deployment waits for readiness, sends one streaming chat request and "
    "checks the head's NCCL transport. Without an API it prints the serving plan and says it "
    "did not apply."
)
HEADER = (
    "Written by `python -m sparkrack.inputs.serving_role` from sparkrack/inputs/variable_table.py "
    "(one row per serving_* variable: its default, type and doc) and the play's own options in "
    "sparkrack/inputs/serving_role.py. Do not edit: change the row and run the module; "
    "tests/inputs/test_serving_role.py fails on a hand edit."
)


@dataclass(frozen=True)
class Option:
    """One option as both files show it."""

    name: str
    default: Any
    kind: str
    elements: str
    doc: str
    no_log: bool


def options(rows: Iterable[Variable] = SERVING) -> list[Option]:
    """The table's ``serving_*`` rows, then the play's own options."""
    out = []
    for v in rows:
        kind, elements = v.spec_type
        out.append(Option(v.name, v.default, kind, elements, v.doc, v.secret))
    for p in PLAY_OPTIONS:
        kind, _, elements = p.spec.partition("/")
        out.append(Option(p.name, p.default, kind, elements, p.doc, p.no_log))
    return out


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _comment(text: str) -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH - 2,
        initial_indent="# ",
        subsequent_indent="# ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def defaults_text(rows: Iterable[Variable] = SERVING) -> str:
    """``roles/serving/defaults/main.yml``: each option's doc as a comment, then its default: a
    render default as the contract fact's (``sparkrack_contract.serving_defaults``, the table's
    value exported once, so no role spells a contract value out), else the value as JSON, which
    YAML reads as the same value."""
    rows = tuple(rows)
    exported = serving_defaults(rows)
    lines = ["---", *_comment(HEADER)]
    for opt in options(rows):
        lines += ["", *_comment(opt.doc)]
        value = FROM_FACT.format(opt.name) if opt.name in exported else json.dumps(opt.default)
        lines.append(f"{opt.name}: {value}")
    return "\n".join(lines) + "\n"


def _spec(opt: Option, exported: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": opt.kind}
    if opt.elements:
        spec["elements"] = opt.elements
    if opt.default is not None and not _is_template(opt.default) and opt.name not in exported:
        spec["default"] = opt.default
    if opt.no_log:
        spec["no_log"] = True
    spec["description"] = opt.doc
    return spec


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key (yamllint's indent-sequences)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def specs_text(rows: Iterable[Variable] = SERVING) -> str:
    """``roles/serving/meta/argument_specs.yml``: one option per table row and play option; a
    default read from the contract fact is computed at run time, so its option shows none."""
    rows = tuple(rows)
    exported = serving_defaults(rows)
    data = {
        "argument_specs": {
            "main": {
                "short_description": "Render, validate and apply the inventory's deployments "
                "(run on the control machine)",
                "description": [DESCRIPTION],
                "options": {opt.name: _spec(opt, exported) for opt in options(rows)},
            }
        }
    }
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=WIDTH, allow_unicode=True)
    return "\n".join(["---", *_comment(HEADER), body])


def files(root: Path, rows: Iterable[Variable] = SERVING) -> dict[Path, str]:
    """Each generated file under ``root`` -> the text this module writes for it."""
    rows = tuple(rows)
    return {root / DEFAULTS: defaults_text(rows), root / SPECS: specs_text(rows)}


def drifted(root: Path, rows: Iterable[Variable] = SERVING) -> list[Path]:
    """The generated files under ``root`` whose text is not what this module writes."""
    return [
        path
        for path, text in files(root, rows).items()
        if not path.is_file() or path.read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on drift")
    args = parser.parse_args(argv)
    if args.check:
        stale = drifted(args.root)
        for path in stale:
            print(f"{path}: not what `python -m sparkrack.inputs.serving_role` writes")
        return 1 if stale else 0
    for path, text in files(args.root).items():
        path.write_text(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
