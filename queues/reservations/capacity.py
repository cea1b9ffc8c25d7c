"""The capacity a reservation is measured against: the devices of its hardware that can run jobs now."""

from __future__ import annotations

from pools.models import USABLE_HEALTH, Cluster, Device, ResourceFlavor


def healthy_capacity(*, cluster: Cluster, flavor: ResourceFlavor, resource_name: str) -> int:
    """Devices of the flavor and resource on the cluster that could run a job: healthy or degraded, on present, ready,
    schedulable nodes."""
    return Device.objects.filter(
        node__cluster=cluster,
        node__flavor=flavor,
        node__gone_at__isnull=True,
        node__ready=True,
        node__unschedulable=False,
        gone_at__isnull=True,
        resource_name=resource_name,
        health__in=USABLE_HEALTH,
    ).count()
