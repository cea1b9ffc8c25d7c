"""A job's pod sets, as every layer sees them: the engine input, the manifests, billing and the pages.

A job's stored shape is its kind, its primary pod set (``pod_count`` x ``devices_per_pod``) and the resolved
companion pod sets of its kind (``Job.companion_pod_sets``: name, count, devices per pod, cpu and memory per
pod, filled in at submission). :func:`job_pod_sets` is the one reading of that shape: companions first, in
Kueue's order for the kind's integration, then the primary pod set.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.quantity import format_quantity, parse_quantity
from pools.models import ResourceClass
from pools.workload_kinds import kind_spec
from queues.models import Job


@dataclass(frozen=True)
class PodSetShape:
    """One pod set of a job: how many pods, and what each pod asks for (quantities in Kubernetes notation)."""

    name: str
    count: int
    devices_per_pod: int
    cpu: str
    memory: str
    primary: bool

    @property
    def total_devices(self) -> int:
        """Devices the whole pod set asks for."""
        return self.count * self.devices_per_pod


def primary_requests(rc: ResourceClass, devices_per_pod: int) -> tuple[str, str]:
    """CPU and memory per pod of a pod with ``devices_per_pod`` devices of class ``rc``."""
    cpu = parse_quantity(rc.cpu_per_device, "cpu") * devices_per_pod
    memory = parse_quantity(rc.memory_per_device, "memory") * devices_per_pod
    return format_quantity(cpu, "cpu"), format_quantity(memory, "memory")


def job_pod_sets(job: Job) -> tuple[PodSetShape, ...]:
    """The job's pod sets in Kueue's order: its kind's companions (as resolved at submission), then the primary."""
    shapes = [
        PodSetShape(
            name=c["name"],
            count=int(c["count"]),
            devices_per_pod=int(c["devices_per_pod"]),
            cpu=c["cpu"],
            memory=c["memory"],
            primary=False,
        )
        for c in job.companion_pod_sets or ()
    ]
    cpu, memory = primary_requests(job.resource_class, job.devices_per_pod)
    shapes.append(
        PodSetShape(
            name=kind_spec(job.kind).primary_pod_set,
            count=job.pod_count,
            devices_per_pod=job.devices_per_pod,
            cpu=cpu,
            memory=memory,
            primary=True,
        )
    )
    return tuple(shapes)
