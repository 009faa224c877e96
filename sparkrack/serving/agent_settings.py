"""The watchdog's settings as the serving context carries them (``serving_watchdog_*``)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack import contract
from sparkrack.inputs.variable_table import SERVING_DEFAULTS

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


@dataclass(frozen=True)
class MemguardSettings:
    """The memory guard's settings (``serving_memguard_*``); its image is the watchdog's."""

    image: str
    floor: str = str(SERVING_DEFAULTS["serving_memguard_floor"])
    """MemFree below which the guard acts (the planner's OS headroom by default)."""
    psi_full: float = float(SERVING_DEFAULTS["serving_memguard_psi_full"])
    interval_s: float = 2.0
    grace_s: int = 10


def name(deployment: str) -> str:
    """The name of a deployment's watchdog objects: its Deployment, account, Role and the
    ConfigMap holding its state."""
    return f"{contract.OBJECT_PREFIX}-{deployment}-{contract.COMPONENT_WATCHDOG}"


def labels(deployment: str) -> dict[str, str]:
    """The labels of a deployment's watchdog objects (and the selector of its pod)."""
    return {
        **contract.PART_OF,
        contract.LABEL_COMPONENT: contract.COMPONENT_WATCHDOG,
        contract.LABEL_DEPLOYMENT: deployment,
    }
