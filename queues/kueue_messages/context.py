"""What the translation reads besides Kueue's text (the pool view), what it returns, and quantity helpers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kernel.quantity import format_quantity, is_device_resource, parse_quantity
from queues.engine.model import HEALTH_TAINT_KEYS

from .codes import UNRECOGNISED


@dataclass(frozen=True)
class QuotaFigures:
    """One (ClusterQueue, flavor, resource): its quota and what is reserved, and its cohort's totals."""

    nominal: int
    used: int
    borrowing_limit: int | None = None
    in_cohort: bool = False
    cohort_capacity: int | None = None
    cohort_used: int | None = None
    #: The root of its cohort tree ("" without one) and its ``reclaimWithinCohort`` ("" when unknown).
    cohort: str = ""
    reclaim: str = ""


@dataclass(frozen=True)
class PoolFigures:
    """One (flavor, resource) of the pool: present units, free usable units, units excluded for health."""

    total: int
    free: int
    health_excluded: int = 0
    max_free_per_node: int = 0


@dataclass(frozen=True)
class HealthNode:
    """A node whose units of a (flavor, resource) are out for health: how many, and why in words."""

    node: str
    units: int
    causes: tuple[str, ...] = ()


@dataclass
class MessageContext:
    """What the portal knows beyond Kueue's text; every part is optional (empty means "unknown")."""

    cluster_queue: str = ""
    quotas: dict[tuple[str, str, str], QuotaFigures] = field(default_factory=dict)
    pool: dict[tuple[str, str], PoolFigures] = field(default_factory=dict)
    flavor_labels: dict[str, str] = field(default_factory=dict)
    topology_flavors: dict[str, list[str]] = field(default_factory=dict)
    class_flavors: tuple[str, ...] = ()
    #: Total request of the workload per resource, and per pod.
    request: dict[str, int] = field(default_factory=dict)
    per_pod: dict[str, int] = field(default_factory=dict)
    health_taint_keys: frozenset[str] = HEALTH_TAINT_KEYS
    #: Per (flavor, resource): the nodes with units out for health, most units first.
    health_nodes: dict[tuple[str, str], tuple[HealthNode, ...]] = field(default_factory=dict)

    def quota(self, flavor: str, resource: str) -> QuotaFigures | None:
        """Figures of the workload's ClusterQueue for a flavor/resource."""
        return self.quotas.get((self.cluster_queue, flavor, resource))

    def borrowers(self, flavor: str, resource: str) -> list[dict[str, Any]]:
        """The other queues of the workload's cohort tree using more of (flavor, resource) than their own nominal
        quota, with how much above it, most first (what holds the quota the workload's queue lent)."""
        own = self.quota(flavor, resource)
        if own is None or not own.cohort:
            return []
        holders = [
            {"clusterQueue": cq, "units": f.used - f.nominal}
            for (cq, fl, res), f in self.quotas.items()
            if (fl, res) == (flavor, resource)
            and cq != self.cluster_queue
            and f.cohort == own.cohort
            and f.used > f.nominal
        ]
        return sorted(holders, key=lambda h: (-h["units"], h["clusterQueue"]))

    def label(self, flavor: str) -> str:
        """A flavor's display name."""
        return self.flavor_labels.get(flavor) or flavor

    def health_nodes_of(self, flavors: Sequence[str], resource: str) -> list[HealthNode]:
        """The nodes of these flavors with ``resource`` out for health, most units first."""
        found = [n for f in dict.fromkeys(flavors) for n in self.health_nodes.get((f, resource), ())]
        return sorted(found, key=lambda n: (-n.units, n.node))

    def device_resource(self) -> str:
        """The device resource the workload asks for (first extended resource), or ""."""
        for name in (*self.per_pod, *self.request):
            if is_device_resource(name):
                return name
        return ""


# --- results ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlavorReason:
    """One per-flavor reason found inside a flavor-assignment message."""

    id: str
    text: str
    code: str
    flavor: str = ""
    resource: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    plain: str = ""


@dataclass(frozen=True)
class Translation:
    """The portal's reading of one Kueue text."""

    code: str
    message: str
    kueue_message: str
    ids: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def recognised(self) -> bool:
        """Whether every part of the text was understood."""
        return self.code != UNRECOGNISED


def parse_amount(value: str, resource: str) -> int | None:
    """A quantity from a message as an int in canonical units (None when it does not parse)."""
    try:
        return parse_quantity(value, resource)
    except ValueError:
        return None


def format_amount(value: int | None, resource: str) -> str:
    """A parsed quantity as a message prints it ("?" when it did not parse)."""
    return "?" if value is None else format_quantity(value, resource)


def resource_label(resource: str) -> str:
    """How a resource reads in a sentence."""
    if resource in ("nvidia.com/gpu", "amd.com/gpu"):
        return "GPUs"
    if resource.startswith("nvidia.com/mig-"):
        return f"MIG {resource.removeprefix('nvidia.com/mig-')} slices"
    return resource
