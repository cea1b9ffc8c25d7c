"""What the simulated backend's tick calls, so validation jobs run on their quarantined devices.

Three calls, inside the tick's transaction and cluster lock:

* ``before_lifecycle`` — places pending validation jobs on their pinned devices. This is the one place a job
  is given a device outside USABLE_HEALTH: only a validation job, only on the devices of its own ValidationRun,
  only while they are ``validating`` and free.
* ``engine_jobs`` — the live jobs the engine schedules: everything but validation jobs (they bypass the engine,
  whose view of a node counts only usable devices).
* ``after_schedule`` — advances repair tickets (finished drains, finished validations).
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from pools.health.tickets import repair_tickets_advance
from pools.models import Allocation, Cluster, HealthState, ValidationRun
from queues import services as job_services
from queues.engine_input import HOLDING_STATES
from queues.models import Job


def engine_jobs(*, cluster: Cluster) -> QuerySet:
    """Pending and quota-holding jobs of the cluster, validation jobs left out."""

    return (
        Job.objects.filter(cluster=cluster, state__in=(Job.State.PENDING, *HOLDING_STATES))
        .exclude(validation_run__isnull=False)
        .select_related("team", "priority_class", "resource_class")
        .prefetch_related("resource_class__flavor_links__flavor")
    )


def _place_pending(cluster: Cluster, now: datetime) -> list[int]:
    """Admit pending validation jobs onto exactly their run's devices (validating, present, free)."""

    placed = []
    runs = (
        ValidationRun.objects.filter(
            result=ValidationRun.Result.PENDING, job__cluster=cluster, job__state=Job.State.PENDING
        )
        .select_related("job__resource_class", "ticket__node__flavor")
        .prefetch_related("devices")
        .order_by("pk")
    )
    for run in runs:
        job = run.job
        devices = sorted(run.devices.all(), key=lambda d: (d.index if d.index is not None else 1 << 30, d.key))
        ready = all(d.health == HealthState.VALIDATING and d.gone_at is None for d in devices)
        busy = Allocation.objects.filter(device__in=devices, ended_at__isnull=True).exists()
        if not devices or not ready or busy or len(devices) != job.total_devices:
            job_services.job_set_wait_reason(
                job,
                code="health_blocked",
                message="Waiting for its pinned device(s) to be free and in validation.",
                details={"devices": [d.pk for d in devices]},
                now=now,
            )
            continue
        node = run.ticket.node
        flavor = node.flavor.name if node.flavor is not None else ""
        per_pod = job.devices_per_pod
        pods = [devices[i : i + per_pod] for i in range(0, len(devices), per_pod)]
        job_services.job_admit(
            job,
            now=now,
            cluster_queue="",
            pod_sets=[
                {
                    "name": "main",
                    "count": job.pod_count,
                    "flavors": {job.resource_class.resource_name: flavor} if flavor else {},
                    "nodes": [node.name] * job.pod_count,
                }
            ],
            borrowing=False,
            devices=pods,
            message=f"Placed by the repair workflow on its pinned device(s) (ticket #{run.ticket_id})",
        )
        placed.append(job.pk)
    return placed


def before_lifecycle(*, cluster: Cluster, now: datetime) -> list[int]:
    """Place pending validation jobs on their pinned devices; returns the jobs placed.

    Their outcome is the simulated run's: a job submitted with ``sim_fails`` (HEALTH_SIMULATED_VALIDATION_OUTCOME
    = "fail") ends failed after its runtime, like any simulated job.
    """
    return _place_pending(cluster, now)


def after_schedule(*, cluster: Cluster, now: datetime) -> None:
    """Advance the cluster's repair tickets after the tick moved its jobs."""
    repair_tickets_advance(cluster=cluster, now=now)
