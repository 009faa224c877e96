"""The names of a deployment's objects, which the engines (probes), the objects and the serve play
share: one place each."""

from __future__ import annotations

from dataclasses import dataclass

from sparkrack import contract
from sparkrack.fabric.addressplan import NodePlan
from sparkrack.serving.context import ServingContext
from sparkrack.serving.profile.model import Profile


def deployment_name(ctx: ServingContext, profile: Profile) -> str:
    """A deployment's name: the inventory's, else the profile's as a DNS label."""
    return ctx.deployment or contract.slug(profile.name)


@dataclass(frozen=True)
class ObjectNames:
    """The names of one deployment's objects: every one starts with the deployment's name."""

    deployment: str
    """The deployment's name (its label value): the inventory's, else the profile's as a DNS label."""
    headless: str
    api: str
    switch: str
    fetch: str
    keys: str
    """The Secret of the deployment's engine and admin keys (created once by the serve play)."""

    @classmethod
    def of(cls, deployment: str) -> ObjectNames:
        s = f"{contract.OBJECT_PREFIX}-{deployment}"
        return cls(deployment, s, f"{s}-api", f"{s}-switch", f"{s}-fetch", f"{s}-keys")

    def statefulset(self, rank: int) -> str:
        return f"{self.headless}-r{rank}"

    def pod(self, rank: int) -> str:
        """The one pod of a rank's StatefulSet."""
        return f"{self.statefulset(rank)}-0"

    def pod_host(self, rank: int, namespace: str) -> str:
        """The DNS name of a rank's pod (its StatefulSet's headless Service, ready or not)."""
        return f"{self.pod(rank)}.{self.headless}.{namespace}.svc.cluster.local"

    def configmap(self, volume: str) -> str:
        """The ConfigMap of one of the engine's file sets (named by its volume)."""
        return f"{self.headless}-{volume}"

    @property
    def manifest(self) -> str:
        """The ConfigMap of the manifest sha256 the head's download reported (the serve play
        writes it; the receivers mount it)."""
        return f"{self.fetch}-manifest"

    def receiver(self, node: NodePlan) -> str:
        """The receiver Job of one non-head Spark."""
        return f"{self.headless}-recv-{node.spark_index}"
