"""Writes of jobs on unhealthy or repaired hardware: the job side of pools' health and repair workflow.

pools decides that devices are unhealthy or that a repair ticket must drain; these services move the jobs on them
(through the states the backends already drive: ``preempting`` → checkpoint → requeue), submit and cancel the
burn-in jobs of repair tickets, and write each job's timeline. pools reaches them through
``pools.health.ports``, implemented by ``clusters.repair``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count

from kernel.errors import Conflict
from kernel.quantity import parse_quantity
from pools.models import Allocation, Cluster, Device
from queues.models import Job, JobEvent, Membership, QuotaLine, Team, TeamQuota
from queues.policy.pushes import policy_push_request
from queues.ports import cluster_port
from queues.services import has_checkpoint_policy, job_finish, job_state_set, record_event

log = logging.getLogger(__name__)

MOVABLE = (Job.State.ADMITTED, Job.State.RUNNING)


def device_label(device: Device) -> str:
    """``node/key`` (with the GPU index when known) for messages."""
    index = f" (gpu {device.index})" if device.index is not None and device.kind == Device.Kind.FULL else ""
    return f"{device.node.name}/{device.key}{index}"


def _move_off(job: Job, *, now: datetime, message: str, details: Mapping) -> None:
    """Put a running job in ``preempting`` (the backends checkpoint where it can, then requeue it)."""
    job_state_set(job, Job.State.PREEMPTING, now=now)
    record_event(job, JobEvent.Kind.PREEMPTED, message, at=now, details=details)


def job_protect(job: Job, *, held: Sequence[Device], reason: str, now: datetime, evict_without_checkpoint: bool) -> str:
    """Move one job off devices that turned unhealthy, or say why it stays; returns what its timeline now says."""
    where = ", ".join(device_label(d) for d in held)
    checkpoint = has_checkpoint_policy(job)
    details = {"reason": "device_unhealthy", "devices": [d.pk for d in held], "health": reason}
    if job.state in MOVABLE and (checkpoint or evict_without_checkpoint):
        _move_off(job, now=now, message=f"Moving off unhealthy hardware: {where} ({reason}).", details=details)
        if checkpoint:
            how = job.checkpoint_signal or " ".join(job.checkpoint_command)
            what = (
                f"Checkpoint requested ({how}) before the job leaves the unhealthy device; once it is written to "
                f"{job.checkpoint_path} the job is requeued and resumes on healthy devices."
            )
            record_event(job, JobEvent.Kind.CHECKPOINT_REQUESTED, what, at=now, details=details)
        else:
            what = (
                "The job has no checkpoint policy, so it is evicted at once and requeued on healthy devices; "
                "the GPU time since its start is lost."
            )
            record_event(job, JobEvent.Kind.NOTE, what, at=now, details=details)
    elif job.state in MOVABLE:
        what = (
            f"A GPU this job runs on became unhealthy ({where}: {reason}). The job has no checkpoint policy, so "
            "it keeps running; the GPU leaves the pool when the job ends. Consider checkpointing and resubmitting."
        )
        record_event(job, JobEvent.Kind.NOTE, what, at=now, details=details)
    else:
        what = f"A GPU this job holds became unhealthy ({where}: {reason}); the job is already leaving it."
        record_event(job, JobEvent.Kind.NOTE, what, at=now, details=details)
    return what


def jobs_protect(*, devices: Sequence[Device], reason: str, now: datetime, evict_without_checkpoint: bool) -> list[int]:
    """Move the jobs holding devices that turned unhealthy: checkpoint first where they can, else evict or wait.

    Each job's timeline says what happens; its owner is told through the lifecycle notifications (``notify``).
    Validation jobs are never moved (they are there to test the device). Returns the ids of the jobs concerned.
    """
    if not devices:
        return []
    allocs = (
        Allocation.objects.filter(device__in=list(devices), ended_at__isnull=True)
        .exclude(job__validation_run__isnull=False)
        .select_related("job__owner", "job__team", "device__node")
        .order_by("job_id")
    )
    by_job: dict[int, tuple[Job, list[Device]]] = {}
    for alloc in allocs:
        by_job.setdefault(alloc.job_id, (alloc.job, []))[1].append(alloc.device)
    for job, held in by_job.values():
        job_protect(job, held=held, reason=reason, now=now, evict_without_checkpoint=evict_without_checkpoint)
    return list(by_job)


def jobs_drain(*, job_ids: Sequence[int], ticket_id: int, actor_label: str, now: datetime) -> list[int]:
    """Evict the running jobs among ``job_ids`` to drain repair ticket ``ticket_id``; returns the evicted ids."""
    evicted = []
    for job in Job.objects.filter(pk__in=list(job_ids)).order_by("pk"):
        if job.state not in MOVABLE:
            continue
        text = f"Evicted by {actor_label} to drain GPU repair ticket #{ticket_id}."
        _move_off(job, now=now, message=text, details={"reason": "repair_drain"})
        if has_checkpoint_policy(job):
            record_event(job, JobEvent.Kind.CHECKPOINT_REQUESTED, "Checkpoint requested before the eviction.", at=now)
        evicted.append(job.pk)
    return evicted


def validation_team_ensure(*, slug: str) -> Team:
    """The platform team validation jobs run in (created on first use)."""
    team, _ = Team.objects.get_or_create(
        slug=slug, defaults={"name": "Platform validation", "namespace": slug, "local_queue_name": "main"}
    )
    return team


def validation_queue_needs(*, cluster: Cluster) -> dict[tuple[int, str], int]:
    """(flavor id, resource) → the most units of it one present node of ``cluster`` has: what a burn-in may ask
    (a ticket is one card or one node)."""
    rows = (
        Device.objects.filter(node__cluster=cluster, node__gone_at__isnull=True, node__flavor__isnull=False)
        .exclude(resource_name="")
        .values("node_id", "node__flavor_id", "resource_name")
        .annotate(units=Count("id"))
    )
    needs: dict[tuple[int, str], int] = {}
    for row in rows:
        key = (row["node__flavor_id"], row["resource_name"])
        needs[key] = max(needs.get(key, 0), row["units"])
    return needs


@transaction.atomic
def validation_queue_ensure(*, slug: str, cluster: Cluster, user=None) -> TeamQuota:
    """The validation team and its queue on ``cluster``, covering every flavor and device resource of the cluster
    with as many units as its largest node has: created, or widened (never narrowed), and pushed when changed.

    Raises ``Conflict`` (an admin error, said in words) when the queue cannot serve: its name is another team's
    queue, the team's queue there has another name, or the queue is stopped.
    """
    team = validation_team_ensure(slug=slug)
    where = f"cluster {cluster.name}"
    taken = TeamQuota.objects.filter(cluster=cluster, cluster_queue_name=slug).exclude(team=team).first()
    if taken is not None:
        raise Conflict(
            f"the validation queue {slug} on {where} is team {taken.team.name}'s queue: rename that queue, or set "
            "another validation team in Admin → Health policies"
        )
    quota, created = TeamQuota.objects.get_or_create(team=team, cluster=cluster, defaults={"cluster_queue_name": slug})
    if quota.stop_policy != TeamQuota.StopPolicy.NONE:
        raise Conflict(
            f"the validation queue {quota.cluster_queue_name} on {where} is stopped "
            f"({quota.get_stop_policy_display()}): set its stop policy to None in Admin → Team quotas, "
            "or burn-in jobs cannot start"
        )
    lines = {(ln.flavor_id, ln.resource_name): ln for ln in quota.lines.all()}
    changed = []
    order = len(lines)
    for (flavor_id, resource), units in sorted(validation_queue_needs(cluster=cluster).items()):
        line = lines.get((flavor_id, resource))
        if line is None:
            QuotaLine.objects.create(
                team_quota=quota, flavor_id=flavor_id, flavor_order=order, resource_name=resource, nominal=str(units)
            )
            order += 1
            changed.append(f"{resource} {units}")
        elif parse_quantity(line.nominal, resource) < units:
            line.nominal = str(units)
            line.save(update_fields=["nominal"])
            changed.append(f"{resource} {units}")
    if created or changed:
        policy_push_request(
            clusters=[cluster],
            reason=f"validation queue {quota.cluster_queue_name} {'created' if created else 'widened'}: "
            + ", ".join(changed),
            user=user,
        )
    return quota


def validation_owner_ensure(*, user: User | None, team: Team) -> User:
    """The user a validation job is submitted as (the acting admin, else a portal service user), a team member."""
    if user is None:
        user, created = get_user_model().objects.get_or_create(
            username="portal-health", defaults={"is_active": False, "email": ""}
        )
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
    Membership.objects.get_or_create(team=team, user=user)
    return user


def validation_job_cancel(*, job_id: int, now: datetime, message: str) -> None:
    """Cancel a validation job that has not ended, then stop it in its cluster after commit."""
    job = Job.objects.get(pk=job_id)
    if job.is_final:
        return
    job_finish(job, state=Job.State.CANCELLED, now=now, message=f"Validation cancelled: {message}.")
    transaction.on_commit(lambda: cluster_port().job_cancelled(job_id=job_id))
