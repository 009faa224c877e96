"""The watchdog's settings as the serving context carries them (``serving_watchdog_*``)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack import contract

EVIDENCE_DIR = "/var/lib/sparkrack/evidence"


@dataclass(frozen=True)
class WatchdogSettings:
    image: str
    stall_s: float = 10.0
    interval_s: float = 10.0
    max_restarts: int = 3
    restart_window_s: float = 1800.0
    restart_grace_s: float = 600.0
    evidence_dir: str = EVIDENCE_DIR
    """Host directory of the evidence bundles on the control-plane node."""
    canary: bool = False
    """Probe with the answer canary (``watch --probe canary``): wrong answers are not healthy."""


def labels(deployment: str) -> dict[str, str]:
    """The labels of a deployment's watchdog objects (and the selector of its pod)."""
    return {
        **contract.PART_OF,
        contract.LABEL_COMPONENT: contract.COMPONENT_WATCHDOG,
        contract.LABEL_DEPLOYMENT: deployment,
    }
