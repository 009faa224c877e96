"""Group guard: the exec probe that keeps an SGLang NCCL group all-alive or all-restarting.

STDLIB ONLY — shipped into the serving container (ConfigMap, /opt/sparkrack/group_guard.py).

Why: TP/EP ranks form one NCCL group at start-up. A rank that crashes and restarts alone cannot
rejoin it, and the survivors sit in a half-alive group (collectives hang until NCCL's watchdog,
if ever). Kubernetes restarts containers one by one, so the group restart is built from probes:

* Head (rank 0): its liveness probe is ``GET /health_generate`` — SGLang runs a one-token
  generation, which needs every rank. A dead or restarted worker makes it hang → the probe
  fails → the kubelet restarts the head, which tears the old group down.
* Workers: ``group_guard.py startup`` passes once the head answers ``/health`` (the head only
  answers after the whole group loaded); ``group_guard.py live`` fails as soon as the head that
  this worker has seen healthy stops answering → the kubelet restarts the worker, which then
  re-joins the NEW head's rendezvous. The first success is remembered in a state file in the
  container's own filesystem, so a fresh (restarted) container starts with a clean slate.

Net effect: any rank's death → the head restarts → every worker restarts → one fresh group.
The probes' periods × failure thresholds bound how long a half-alive group can exist.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

STATE = Path("/tmp/sparkrack-head-seen")


def head_healthy(url: str, timeout: float, key: str = "") -> bool:
    """The head answers ``/health`` (with the engine key when one is set: the engine may not
    need it there, but a key it does not ask for does no harm)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(url.rstrip("/") + "/health", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return 200 <= int(resp.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=["startup", "live"])
    parser.add_argument("--head", required=True, help="http://<head address>:<port>")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--state", type=Path, default=STATE)
    parser.add_argument(
        "--api-key-env", default="", help="variable holding the engine key (its name, never a key)"
    )
    args = parser.parse_args(argv)
    key = os.environ.get(args.api_key_env, "") if args.api_key_env else ""
    healthy = head_healthy(args.head, args.timeout, key)
    if healthy:
        args.state.write_text(f"{time.time():.0f}\n")
        return 0
    if args.mode == "startup":
        print(f"group-guard: head {args.head} not healthy yet (group still loading)")
        return 1
    if not args.state.exists():
        # Never saw the head healthy in this container: the startup probe bounds that phase.
        return 0
    print(
        f"group-guard: head {args.head} stopped answering; restarting this rank to re-form the group"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
