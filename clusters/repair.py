"""The cluster integration's side of :mod:`pools.health.ports`: the repair steps that act on jobs.

pools' health workflow decides (a device turned unhealthy, a ticket drains, a burn-in starts or is cancelled);
the jobs move only through the queues services (``queues.health_jobs``, ``queues.services.job_submit``), which
write each job's timeline, and reach the clusters through ``queues.ports``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from pools.health.ports import JobOutcome, ValidationJobRequest
from pools.models import Device
from queues import health_jobs
from queues.models import Job
from queues.services import JobSpec, job_submit


class QueuesRepairJobs:
    """Implements :class:`pools.health.ports.RepairJobsPort` with the queues services."""

    def jobs_protect(
        self, *, devices: Sequence[Device], reason: str, now: datetime, evict_without_checkpoint: bool
    ) -> list[int]:
        """Move the jobs off devices that turned unhealthy (queues.health_jobs.jobs_protect)."""
        return health_jobs.jobs_protect(
            devices=devices, reason=reason, now=now, evict_without_checkpoint=evict_without_checkpoint
        )

    def jobs_drain(self, *, job_ids: Sequence[int], ticket_id: int, actor_label: str, now: datetime) -> list[int]:
        """Evict the jobs still holding a ticket's devices (queues.health_jobs.jobs_drain)."""
        return health_jobs.jobs_drain(job_ids=job_ids, ticket_id=ticket_id, actor_label=actor_label, now=now)

    def validation_submit(self, *, request: ValidationJobRequest, now: datetime) -> int:
        """Submit the burn-in job in the validation team's queue (made to cover the cluster first), as the acting
        admin or the portal's service user."""
        team = health_jobs.validation_queue_ensure(slug=request.team_slug, cluster=request.cluster).team
        owner = health_jobs.validation_owner_ensure(user=request.user, team=team)
        spec = JobSpec(
            name=request.name,
            image=request.image,
            resource_class=request.resource_class,
            devices_per_pod=request.devices_per_pod,
            pod_count=request.pod_count,
            command=list(request.command),
            env=dict(request.env),
            max_runtime_seconds=request.max_runtime_seconds,
            sim_runtime_seconds=request.sim_runtime_seconds,
            sim_fails=request.sim_fails,
        )
        return job_submit(owner=owner, team=team, spec=spec, cluster=request.cluster, now=now).pk

    def validation_cancel(self, *, job_id: int, now: datetime, message: str) -> None:
        """Cancel the burn-in job (queues.health_jobs.validation_job_cancel)."""
        health_jobs.validation_job_cancel(job_id=job_id, now=now, message=message)

    def job_outcomes(self, *, job_ids: Sequence[int]) -> Mapping[int, JobOutcome]:
        """Each job's state, whether it ended (and succeeded), when, and its timeline's last message."""
        out = {}
        for job in Job.objects.filter(pk__in=list(job_ids)).order_by("pk"):
            last = job.events.order_by("-at", "-id").first()
            out[job.pk] = JobOutcome(
                job_id=job.pk,
                state=job.state,
                ended=job.is_final,
                succeeded=job.state == Job.State.SUCCEEDED,
                finished_at=job.finished_at,
                last_message=last.message if last else "",
            )
        return out
