"""Reads of the inventory: every present device with what holds it, for the ``inventory`` command."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Prefetch

from pools.models import Allocation, Cluster, Device


@dataclass(frozen=True)
class InventoryRow:
    """One present device as the inventory listing shows it."""

    cluster: str
    node: str
    key: str
    vendor: str
    product: str
    kind: str
    resource_name: str
    parent_key: str | None
    memory_bytes: int | None
    health: str
    health_reason: str
    source: str
    flavor: str | None
    allocated_to: str | None


def cluster_named(name: str) -> Cluster | None:
    """The cluster of that name, if there is one."""
    return Cluster.objects.filter(name=name).first()


def inventory_devices(*, cluster: Cluster | None = None) -> list[InventoryRow]:
    """Present devices on present nodes (partitioned and shared cards included), in listing order; 2 queries."""
    open_allocations = Allocation.objects.filter(ended_at__isnull=True).select_related("job__team")
    devices = (
        Device.objects.filter(gone_at__isnull=True, node__gone_at__isnull=True)
        .select_related("node__cluster", "node__flavor", "parent")
        .prefetch_related(Prefetch("allocations", queryset=open_allocations, to_attr="open_allocations"))
        .order_by("node__cluster__name", "node__name", "resource_name", "index", "key")
    )
    if cluster is not None:
        devices = devices.filter(node__cluster=cluster)
    rows = []
    for d in devices:
        job = d.open_allocations[0].job if d.open_allocations else None
        rows.append(
            InventoryRow(
                cluster=d.node.cluster.name,
                node=d.node.name,
                key=d.key,
                vendor=d.vendor,
                product=d.product,
                kind=d.kind,
                resource_name=d.resource_name,
                parent_key=d.parent.key if d.parent else None,
                memory_bytes=d.memory_bytes,
                health=d.health,
                health_reason=d.health_reason,
                source=d.source,
                flavor=d.node.flavor.name if d.node.flavor else None,
                allocated_to=f"{job.team.slug}/{job.name}" if job else None,
            )
        )
    return rows
