"""``sparkrack images -i INV``: every image an inventory runs, and how each is pinned.

One line per image: what runs it (a deployment, the fetch and receiver Jobs, the gateway, the
monitoring stack when it is on), the reference, and its pin state (``digest``, ``tag`` or
``moving tag``). Exit 0; a moving tag is marked, not refused here (``sparkrack validate``
refuses it unless the profile accepts it with ``allow_moving_tag``).
"""

from __future__ import annotations

import argparse
import json

from sparkrack.cli.exitcodes import ExitCode
from sparkrack.cli.options import add_format, add_inventory, print_warnings


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    add_inventory(parser)
    add_format(parser, "table", "json")
    parser.set_defaults(handler=run_images)


def image_rows(inventory: str) -> list[dict[str, str]]:
    """(used by, image, pin state, digest) of every image the inventory's serve play runs."""
    from sparkrack.inputs.imageref import digest_of, pin_state
    from sparkrack.serving.deployments import gateway
    from sparkrack.serving.deployments.bundle import from_inventory

    deployments = from_inventory(inventory, check_memory=False)
    print_warnings(deployments.warnings)
    used: list[tuple[str, str]] = [
        (f"deployment {d.name} ({d.profile.name})", d.profile.image)
        for d in deployments.deployments
    ]
    if deployments.ctx.fetch_image:
        used.append(("weight copy (push and receiver Jobs)", deployments.ctx.fetch_image))
    if deployments.ctx.watchdog is not None:
        used.append(("stall watchdog (every deployment)", deployments.ctx.watchdog.image))
    used.append(("gateway (LiteLLM)", gateway.IMAGE))
    return [
        {"used_by": who, "image": image, "pin": pin_state(image), "digest": digest_of(image) or ""}
        for who, image in used
    ]


def run_images(args: argparse.Namespace) -> int:
    rows = image_rows(args.inventory)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return ExitCode.OK
    width = max(len(r["used_by"]) for r in rows)
    for row in rows:
        mark = {"moving tag": "MOVING TAG", "digest": "digest", "tag": "tag"}[row["pin"]]
        print(f"{row['used_by']:<{width}}  {mark:<10}  {row['image']}")
    return ExitCode.OK
