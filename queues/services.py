"""Writes of job scheduling: submitting, cancelling and moving jobs through their lifecycle.

Every state change of a job goes through here (or queues.health_jobs, for moves off unhealthy hardware) and
leaves a JobEvent, so the timeline is complete.
Allocations are opened and closed only here, so no ending of a job can leave a device held.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from kernel.errors import Conflict, ValidationFailed
from kernel.labels import duration_words, plural
from pools import state_version
from pools.models import USABLE_HEALTH, Allocation, Cluster, Device, ResourceFlavor
from pools.workload_kinds import WorkloadKind, kind_spec
from queues import selectors
from queues.job_spec import JobSpec, job_spec_errors, spec_image
from queues.models import Job, JobEvent, Membership, PriorityClass, Team, WaitReason
from queues.pod_sets import companions_resolve, job_pod_sets, pod_sets_phrase
from queues.ports import cluster_port, job_event_listener


def _membership(*, user: User, team: Team) -> Membership:
    """The user's membership of the team, or a refusal."""
    membership = Membership.objects.filter(user=user, team=team).first()
    if membership is None:
        raise ValidationFailed({"team": [f"you are not a member of team {team.slug}"]})
    return membership


def record_event(
    job: Job, kind: str, message: str, *, at: datetime, details: Mapping | None = None, source_key: str = ""
) -> JobEvent:
    """Append an event to a job's timeline (idempotent when ``source_key`` is given); a registered listener
    (lifecycle notifications) sees each new event inside the same transaction."""
    # one transaction for the event and what the listener records (no savepoint: inside a caller's, it is theirs)
    with transaction.atomic(savepoint=False):
        if source_key:
            event, created = JobEvent.objects.get_or_create(
                job=job,
                source_key=source_key,
                defaults={"at": at, "kind": kind, "message": message, "details": details or {}},
            )
        else:
            event = JobEvent.objects.create(job=job, at=at, kind=kind, message=message, details=details or {})
            created = True
        listener = job_event_listener()
        if created and listener is not None:
            listener.job_event_recorded(event=event)
    return event


def job_priority_class(*, team: Team, requested: PriorityClass | None) -> PriorityClass | None:
    """The priority class a new job of ``team`` gets: the team's override while it is demoted, else the one asked
    for, else the default. The one rule for submissions, the feasibility check and the catalogue's ETAs."""
    override = PriorityClass.objects.filter(pk__in=Team.objects.filter(pk=team.pk).values("priority_override")).first()
    return override or requested or PriorityClass.objects.filter(is_default=True).first()


@transaction.atomic
def team_priority_override_set(*, team: Team, priority_class: PriorityClass | None) -> None:
    """Force (or, with ``None``, stop forcing) the priority class of the team's future submissions.

    Billing's budget action calls it when it demotes a team or lifts the demotion; running jobs are not touched.
    """
    Team.objects.filter(pk=team.pk).update(priority_override=priority_class)
    team.priority_override = priority_class
    state_version.bump()  # update() sends no signal; the typical job of the catalogue changes priority


def _invalid(field_name: str, message: str) -> None:
    """A problem found while building a job the caller did not validate first."""
    raise ValidationFailed({field_name: [message]})


def job_build(
    *,
    owner: User,
    team: Team,
    spec: JobSpec,
    cluster: Cluster,
    now: datetime,
    priority_class: PriorityClass | None = None,
) -> Job:
    """The unsaved pending Job a submission records: the one mapping of a spec onto a Job.

    ``job_submit`` saves it; the feasibility check and the catalogue's ETAs explain it without saving. Its
    priority class is ``job_priority_class``'s answer, unless the caller passes that answer (asked once for many).
    """
    priority_class = priority_class or job_priority_class(team=team, requested=spec.priority_class)
    companions = companions_resolve(
        kind=spec.kind,
        rc=spec.resource_class,
        devices_per_pod=spec.devices_per_pod,
        overrides=spec.companions or {},
        err=_invalid,
    )
    return Job(
        team=team,
        owner=owner,
        cluster=cluster,
        name=spec.name,
        kind=spec.kind,
        companion_pod_sets=companions,
        image=spec_image(spec),
        command=list(spec.command),
        args=list(spec.args),
        env=dict(spec.env),
        resource_class=spec.resource_class,
        devices_per_pod=spec.devices_per_pod,
        pod_count=spec.pod_count,
        topology_mode=spec.topology_mode,
        topology_level=spec.topology_level,
        priority_class=priority_class,
        priority=priority_class.value if priority_class else 0,
        max_runtime_seconds=spec.max_runtime_seconds,
        checkpoint_path=spec.checkpoint_path,
        checkpoint_signal=spec.checkpoint_signal,
        checkpoint_command=list(spec.checkpoint_command),
        checkpoint_interval_seconds=spec.checkpoint_interval_seconds,
        protect_min_runtime_seconds=spec.protect_min_runtime_seconds,
        protect_finishing_seconds=spec.protect_finishing_seconds,
        preempt_after_checkpoint=spec.preempt_after_checkpoint,
        sim_runtime_seconds=spec.sim_runtime_seconds,
        sim_fails=spec.sim_fails,
        state=Job.State.PENDING,
        submitted_at=now,
        queued_at=now,
        state_changed_at=now,
        wait_since=now,
    )


@transaction.atomic
def job_submit(
    *,
    owner: User,
    team: Team,
    spec: JobSpec,
    cluster: Cluster | None = None,
    now: datetime | None = None,
    notify_backend: bool = True,
) -> Job:
    """Validate and record a submission, all or nothing; the cluster's backend picks it up after commit.

    ``notify_backend=False`` is for callers that drive the cluster themselves (replays, the demo's history).
    """
    now = now or timezone.now()
    _membership(user=owner, team=team)
    errors = job_spec_errors(spec, team=team, cluster=cluster)
    if errors:
        raise ValidationFailed(errors)
    if cluster is None:
        quota = team.quotas.select_related("cluster").first()
        if quota is None:
            raise ValidationFailed({"team": [f"team {team.slug} has no quota in any cluster: ask an admin"]})
        cluster = quota.cluster
    job = job_build(owner=owner, team=team, spec=spec, cluster=cluster, now=now)
    job.save()
    job.k8s_namespace = team.namespace
    job.k8s_name = f"{job.name}-{job.pk}"
    job.save(update_fields=["k8s_namespace", "k8s_name"])
    total = job.total_devices
    unit = spec.resource_class.resource_name
    if job.companion_pod_sets:
        shapes = job_pod_sets(job)
        what = f"{kind_spec(job.kind).label.lower()}, {pod_sets_phrase(shapes, unit)}"
        details = {"kind": job.kind, "podSets": [_shape_details(ps) for ps in shapes]}
    else:
        label = "" if job.kind == WorkloadKind.BATCH else f"{kind_spec(job.kind).label.lower()}, "
        what = (
            f"{label}{plural(job.pod_count, 'pod')} with {selectors.unit_noun(unit, job.devices_per_pod)}"
            f"{' each' if job.pod_count > 1 else ''}"
        )
        details = {"kind": job.kind}
    record_event(
        job,
        JobEvent.Kind.SUBMITTED,
        f"Submitted by {owner.get_username()}: {what} of {spec.resource_class.name}"
        f" = {selectors.unit_noun(unit, total)}.",
        at=now,
        details=details,
    )
    if notify_backend:
        transaction.on_commit(lambda: cluster_port().job_submitted(job_id=job.pk))
    return job


def _shape_details(ps) -> dict[str, Any]:
    """A pod set as a timeline event's details hold it."""
    return {"name": ps.name, "count": ps.count, "devicesPerPod": ps.devices_per_pod, "cpu": ps.cpu, "memory": ps.memory}


WAIT_FIELDS = ["wait_reason", "wait_message", "kueue_message", "wait_details", "wait_since"]


def _wait_change(
    job: Job, *, code: str, message: str, kueue_message: str, details: Mapping | None, now: datetime
) -> tuple[bool, JobEvent | None]:
    """Apply a wait reason to the job in memory: (changed, the unsaved timeline event of a change of code)."""
    if job.wait_reason == code and job.wait_message == message and job.kueue_message == kueue_message:
        return False, None
    code_changed = job.wait_reason != code
    job.wait_reason = code
    job.wait_message = message
    job.kueue_message = kueue_message
    job.wait_details = dict(details or {})
    if code_changed or job.wait_since is None:
        job.wait_since = now
    if not code_changed:
        return True, None
    event = JobEvent(
        job=job,
        at=now,
        kind=JobEvent.Kind.WAIT_REASON,
        message=message,
        details={"code": code, "label": WaitReason(code).label, "kueueMessage": kueue_message},
    )
    return True, event


def job_set_wait_reason(
    job: Job, *, code: str, message: str, kueue_message: str = "", details: Mapping | None = None, now: datetime
) -> bool:
    """Store the job's current wait reason; a change of code or message is a timeline event. Returns changed."""
    changed, event = _wait_change(
        job, code=code, message=message, kueue_message=kueue_message, details=details, now=now
    )
    if changed:
        job.save(update_fields=WAIT_FIELDS)
    if event is not None:
        event.save()
    return changed


class WaitReasonBatch:
    """``job_set_wait_reason`` for many jobs, written together: one ``bulk_update`` of the jobs' wait fields and
    one ``bulk_create`` of their timeline events per :meth:`flush` (same rows and messages as one by one).

    The caller holds the jobs' row locks and flushes inside the same transaction; a job is added at most once
    per flush, and nothing else writes its wait fields or events before the flush.
    """

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.events: list[JobEvent] = []

    def set_wait_reason(
        self,
        job: Job,
        *,
        code: str,
        message: str,
        kueue_message: str = "",
        details: Mapping | None = None,
        now: datetime,
    ) -> bool:
        """As ``job_set_wait_reason``, written at the next flush. Returns changed."""
        if job.pk in self.jobs:
            raise ValueError(f"job {job.pk} is already in this batch")
        changed, event = _wait_change(
            job, code=code, message=message, kueue_message=kueue_message, details=details, now=now
        )
        if changed:
            self.jobs[job.pk] = job
        if event is not None:
            self.events.append(event)
        return changed

    def discard(self, job: Job) -> None:
        """Drop what was added for this job (its evaluation failed and was rolled back)."""
        if self.jobs.pop(job.pk, None) is not None:
            self.events = [e for e in self.events if e.job_id != job.pk]

    def flush(self) -> int:
        """Write what was added; returns how many jobs changed."""
        jobs, events = list(self.jobs.values()), self.events
        self.jobs, self.events = {}, []
        # jobs given the same reason (one message for a whole queue) in one UPDATE per 500; the rest in bulk_update
        groups: dict[tuple, list[Job]] = {}
        for job in jobs:
            key = (
                job.wait_reason,
                job.wait_message,
                job.kueue_message,
                json.dumps(job.wait_details, sort_keys=True, default=str),
                job.wait_since,
            )
            groups.setdefault(key, []).append(job)
        single = []
        for group in groups.values():
            if len(group) == 1:
                single += group
                continue
            first = group[0]
            values = {name: getattr(first, name) for name in WAIT_FIELDS}
            for i in range(0, len(group), 500):
                Job.objects.filter(pk__in=[j.pk for j in group[i : i + 500]]).update(**values)
        if single:
            Job.objects.bulk_update(single, WAIT_FIELDS, batch_size=500)
        if events:
            JobEvent.objects.bulk_create(events, batch_size=500)
        return len(jobs)


def job_state_set(job: Job, state: str, *, now: datetime, fields: Iterable[str] = ()) -> None:
    """Change state and save the listed fields with it (the caller records the timeline event)."""
    job.state = state
    job.state_changed_at = now
    job.save(update_fields=["state", "state_changed_at", *fields])


def _clear_wait(job: Job) -> list[str]:
    """Forget the wait reason (the job is no longer waiting)."""
    job.wait_reason = ""
    job.wait_message = ""
    job.kueue_message = ""
    job.wait_details = {}
    job.wait_since = None
    return ["wait_reason", "wait_message", "kueue_message", "wait_details", "wait_since"]


def job_admit(
    job: Job,
    *,
    now: datetime,
    cluster_queue: str,
    pod_sets: Sequence[Mapping],
    borrowing: bool,
    devices: Sequence[Sequence[Device]],
    message: str = "",
) -> None:
    """Admit a pending job: record where each pod runs and open one allocation per device it holds."""
    if job.state != Job.State.PENDING:
        raise Conflict(f"job {job.pk} is {job.get_state_display().lower()}, not pending")
    Allocation.objects.bulk_create(
        Allocation(job=job, device=device, pod_index=pod, started_at=now)
        for pod, pod_devices in enumerate(devices)
        for device in pod_devices
    )
    flavor_names = sorted({f for ps in pod_sets for f in ps.get("flavors", {}).values()})
    job.assignment = {"clusterQueue": cluster_queue, "podSets": list(pod_sets)}
    job.borrowing = borrowing
    job.admitted_at = now
    job.assigned_flavor = ResourceFlavor.objects.filter(name__in=flavor_names[:1]).first()
    fields = ["assignment", "borrowing", "admitted_at", "assigned_flavor", *_clear_wait(job)]
    job_state_set(job, Job.State.ADMITTED, now=now, fields=fields)
    nodes = sorted({n for ps in pod_sets for n in ps.get("nodes", [])})
    text = message or f"Admitted by ClusterQueue {cluster_queue}"
    where = f" on {', '.join(flavor_names)}" if flavor_names else ""
    if len(pod_sets) > 1:  # each pod set of a gang may land on its own flavors: say which
        where = ": " + ", ".join(
            f"{ps.get('name')} on {', '.join(sorted(set(ps.get('flavors', {}).values()))) or 'no flavor'}"
            for ps in pod_sets
        )
    record_event(
        job,
        JobEvent.Kind.ADMITTED,
        f"{text}{where}{' (borrowing from the cohort)' if borrowing else ''}; nodes: {', '.join(nodes) or 'n/a'}.",
        at=now,
        details={"clusterQueue": cluster_queue, "podSets": list(pod_sets), "borrowing": borrowing},
    )


def job_start(job: Job, *, now: datetime) -> None:
    """The job's pods are running."""
    if job.state != Job.State.ADMITTED:
        raise Conflict(f"job {job.pk} is {job.get_state_display().lower()}, not admitted")
    resumed = job.started_at is not None
    job.started_at = job.started_at or now
    job_state_set(job, Job.State.RUNNING, now=now, fields=["started_at"])
    if resumed:
        kept = job.run_seconds_banked or 0
        text = (
            f"Resumed from its last checkpoint ({duration_words(kept)} of work kept); all pods running again."
            if kept
            else "Restarted from the beginning (no checkpoint kept its work); all pods running again."
        )
        record_event(job, JobEvent.Kind.RESUMED, text, at=now, details={"keptSeconds": kept})
    else:
        pods = job.pod_count + sum(int(c["count"]) for c in job.companion_pod_sets or ())
        running = "The pod is running." if pods == 1 else f"All {pods} pods running."
        if job.companion_pod_sets:
            running = f"All {pods} pods of its {len(job.companion_pod_sets) + 1} pod sets running."
        record_event(job, JobEvent.Kind.STARTED, running, at=now)


def release_allocations(job: Job, *, now: datetime, reason: str) -> int:
    """Close every open allocation of the job at ``now``; returns how many were closed."""
    return Allocation.objects.filter(job=job, ended_at__isnull=True).update(ended_at=now, end_reason=reason)


FINISH_KINDS: dict[str, JobEvent.Kind] = {
    Job.State.SUCCEEDED: JobEvent.Kind.SUCCEEDED,
    Job.State.FAILED: JobEvent.Kind.FAILED,
    Job.State.CANCELLED: JobEvent.Kind.CANCELLED,
    Job.State.TIMED_OUT: JobEvent.Kind.TIMED_OUT,
}


def job_finish(job: Job, *, state: str, now: datetime, message: str) -> None:
    """End a job in a final state, closing its allocations at the true end time ``now``."""
    if state not in Job.FINAL_STATES:
        raise ValueError(f"{state} is not a final state")
    if job.is_final:
        return
    release_allocations(job, now=now, reason=state)
    job.finished_at = now
    job_state_set(job, state, now=now, fields=["finished_at", *_clear_wait(job)])
    record_event(job, FINISH_KINDS[state], message, at=now)


@transaction.atomic
def job_cancel(*, job: Job, user: User, now: datetime | None = None, notify_backend: bool = True) -> Job:
    """Cancel a job on behalf of a team member or a platform admin; a finished job cannot be cancelled.

    Stopping a development session or an inference service (they run until stopped) is this same cancel."""
    now = now or timezone.now()
    job = Job.objects.select_for_update().get(pk=job.pk)
    if not selectors.is_platform_admin(user):
        _membership(user=user, team=job.team)
    if job.is_final:
        raise Conflict(f"the job already ended ({job.get_state_display().lower()})")
    verb = "Stopped" if kind_spec(job.kind).runs_until_stopped else "Cancelled"
    job_finish(job, state=Job.State.CANCELLED, now=now, message=f"{verb} by {user.get_username()}.")
    if notify_backend:
        transaction.on_commit(lambda: cluster_port().job_cancelled(job_id=job.pk))
    return job


def has_checkpoint_policy(job: Job) -> bool:
    """Whether the job can be asked to checkpoint before it is evicted."""
    return bool(job.checkpoint_path and (job.checkpoint_signal or job.checkpoint_command))


def checkpoint_grace_seconds(job: Job) -> int:
    """How long a job asked to checkpoint has before it is evicted: the simulated cluster's checkpoint time, or the
    pods' termination grace period on Kubernetes (``KUBE_CHECKPOINT_GRACE_SECONDS``); 0 without a policy."""
    if not has_checkpoint_policy(job):
        return 0
    backend = Cluster.objects.filter(pk=job.cluster_id).values_list("backend", flat=True).first()
    if backend == Cluster.Backend.KUBERNETES:
        return int(settings.KUBE_CHECKPOINT_GRACE_SECONDS)
    return int(settings.SIMULATED_CHECKPOINT_SECONDS)


def job_preempt(job: Job, *, now: datetime, preemptor: Job | None, reason: str, message: str) -> None:
    """Start evicting a running job for a preemptor: checkpoint first where the job has a policy."""
    if job.state not in (Job.State.ADMITTED, Job.State.RUNNING):
        return
    who = f"{preemptor.team.slug}/{preemptor.name}" if preemptor else "another job"
    details = {"reason": reason, "kueueMessage": message, "preemptor": preemptor.pk if preemptor else None}
    job.eviction_reason = "Preempted"
    job_state_set(job, Job.State.PREEMPTING, now=now, fields=["eviction_reason"])
    record_event(job, JobEvent.Kind.PREEMPTED, f"Preempted to make room for {who} ({reason}).", at=now, details=details)
    if has_checkpoint_policy(job):
        _checkpoint_requested(job, now=now)
    if preemptor is not None:
        record_event(
            preemptor,
            JobEvent.Kind.PREEMPTING,
            f"Making room: {job.team.slug}/{job.name} is being preempted"
            f"{' after a checkpoint' if has_checkpoint_policy(job) else ''}.",
            at=now,
            details={"victim": job.pk, "reason": reason},
        )


#: Kueue's Evicted reasons of a stopPolicy HoldAndDrain, and who stopped what, in plain words.
QUEUE_STOP_EVICTIONS = {
    "ClusterQueueStopped": "an admin stopped the team's quota (ClusterQueue {queue}, stop policy HoldAndDrain)",
    "LocalQueueStopped": "an admin stopped the team's queue (LocalQueue {queue}, stop policy HoldAndDrain)",
}


def job_evict(job: Job, *, now: datetime, reason: str, message: str) -> None:
    """Start evicting a running job because its queue was stopped (HoldAndDrain): checkpoint first where it can.

    ``reason`` is Kueue's Evicted reason (``ClusterQueueStopped`` / ``LocalQueueStopped``), ``message`` its text.
    The job keeps its devices until the eviction completes (``job_requeue`` with reason ``queue_stopped``).
    """
    if job.state not in (Job.State.ADMITTED, Job.State.RUNNING):
        return
    queue = job.team.local_queue_name if reason == "LocalQueueStopped" else job.assignment.get("clusterQueue", "")
    why = QUEUE_STOP_EVICTIONS.get(reason, "its queue was stopped").format(queue=queue)
    job.eviction_reason = reason
    job_state_set(job, Job.State.PREEMPTING, now=now, fields=["eviction_reason"])
    checkpoint = has_checkpoint_policy(job)
    record_event(
        job,
        JobEvent.Kind.EVICTED,
        f"Evicted: {why}. It {'checkpoints, then ' if checkpoint else ''}goes back into the queue and waits "
        "until the queue is restarted.",
        at=now,
        details={"reason": reason, "kueueMessage": message},
    )
    if checkpoint:
        _checkpoint_requested(job, now=now)


def _checkpoint_requested(job: Job, *, now: datetime) -> None:
    """Timeline: the job was asked to checkpoint before its eviction."""
    how = job.checkpoint_signal or " ".join(job.checkpoint_command)
    record_event(
        job,
        JobEvent.Kind.CHECKPOINT_REQUESTED,
        f"Checkpoint requested ({how}); the job is evicted once it is written to {job.checkpoint_path}.",
        at=now,
    )


def job_requeue(job: Job, *, now: datetime, reason: str, message: str, checkpointed: bool) -> None:
    """Evict a job back into the queue: release its devices, record the GPU time lost if no checkpoint."""
    if job.is_final or job.state == Job.State.PENDING:
        return
    held = Allocation.objects.filter(job=job, ended_at__isnull=True).count()
    release_allocations(job, now=now, reason=reason)
    details: dict = {"reason": reason}
    fields = ["queued_at", "preemption_count", "eviction_reason"]
    run_start = _current_run_start(job)
    if checkpointed:
        record_event(job, JobEvent.Kind.CHECKPOINT_DONE, "Checkpoint written; resuming from it later.", at=now)
    elif run_start is not None:
        last_checkpoint = job.events.filter(kind=JobEvent.Kind.CHECKPOINT_DONE, at__gte=run_start).order_by("-at")
        since = max([run_start, *last_checkpoint.values_list("at", flat=True)[:1]])
        periodic = last_periodic_checkpoint(job, run_start=run_start, now=now)
        kept = 0
        if periodic is not None and periodic > since:
            # Its own periodic checkpoint kept the work up to then: resumed from it, only the rest is lost.
            kept = int((periodic - run_start).total_seconds())
            job.run_seconds_banked = (job.run_seconds_banked or 0) + kept
            fields.append("run_seconds_banked")
            details["periodicCheckpointAt"] = periodic.isoformat()
            details["keptSeconds"] = kept
            since = periodic
        lost_hours = held * max((now - since).total_seconds(), 0) / 3600
        details["lostDeviceHours"] = round(lost_hours, 3)
        if kept:
            message = (
                f"{message} Its last periodic checkpoint ({duration_words(kept)} of work) is kept; "
                f"{lost_hours:.2f} device-hours since it are lost."
            )
        else:
            message = f"{message} No checkpoint: {lost_hours:.2f} device-hours of work lost."
    if reason != "queue_stopped":
        # Kueue orders a job evicted by a stopped queue by its creation time: it keeps its place in the queue.
        job.queued_at = now
    job.preemption_count += 1 if reason == "preempted" else 0
    job.eviction_reason = ""
    job_state_set(job, Job.State.SUSPENDED, now=now, fields=fields)
    job.assignment = {}
    job.borrowing = False
    job_state_set(job, Job.State.PENDING, now=now, fields=["assignment", "borrowing"])
    job.wait_since = now
    job.save(update_fields=["wait_since"])
    record_event(job, JobEvent.Kind.REQUEUED, message, at=now, details=details)


def _current_run_start(job: Job) -> datetime | None:
    """When the job's pods last started running in its current admission (None: they did not, nothing is lost)."""
    if job.started_at is None:
        return None
    starts = job.events.filter(kind__in=(JobEvent.Kind.STARTED, JobEvent.Kind.RESUMED))
    if job.admitted_at is not None:
        starts = starts.filter(at__gte=job.admitted_at)
    return starts.order_by("-at").values_list("at", flat=True).first()


def last_periodic_checkpoint(job: Job, *, run_start: datetime, now: datetime) -> datetime | None:
    """The last checkpoint a job that checkpoints on an interval has written by ``now`` in the run that started at
    ``run_start`` (one every ``checkpoint_interval_seconds`` of its run, to ``checkpoint_path``); None without one."""
    interval = job.checkpoint_interval_seconds
    if not interval or not job.checkpoint_path or now < run_start:
        return None
    done = int((now - run_start).total_seconds() // interval)
    return run_start + timedelta(seconds=done * interval) if done >= 1 else None


def usable_free_devices(*, node_ids: Iterable[int], resource_name: str, kind: str) -> dict[int, list[Device]]:
    """Free, usable units of a resource per node, healthy before degraded, in index order."""
    free = Device.objects.filter(
        node_id__in=list(node_ids),
        resource_name=resource_name,
        kind=kind,
        gone_at__isnull=True,
        health__in=USABLE_HEALTH,
    ).exclude(Exists(Allocation.objects.filter(device=OuterRef("pk"), ended_at__isnull=True)))
    by_node: dict[int, list[Device]] = {}
    free = free.order_by()  # sorted below; the model's ordering would join the node and cluster
    for device in free:
        by_node.setdefault(device.node_id, []).append(device)
    for devices in by_node.values():  # degraded devices are used last
        devices.sort(key=lambda d: (d.health != "healthy", d.index if d.index is not None else 1 << 30, d.key))
    return by_node


def default_runtime(job: Job) -> timedelta:
    """How long a simulated job runs: its own simulated runtime, else the configured default."""
    seconds = job.sim_runtime_seconds or settings.SIMULATED_DEFAULT_RUNTIME_SECONDS
    return timedelta(seconds=seconds)
