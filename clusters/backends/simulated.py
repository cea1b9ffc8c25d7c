"""The embedded simulated cluster: the portal's own Kueue-equivalent engine admits, a clock runs jobs.

Each tick (a Celery beat task in the running portal) moves jobs through their lifecycle:
admitted → running on the next tick; running → succeeded after its simulated runtime (less what
checkpoints banked), timed-out at its maximum runtime, requeued when its node disappears (a development session
or an inference service has no natural end: it runs until stopped; a job of several pod sets submitted to
fail fails as a whole); preempting →
evicted at once without a checkpoint policy, or after the simulated checkpoint time with one. Then the
engine drains queues set to HoldAndDrain (their running jobs start being evicted, as preempted ones are),
and its scheduling cycles admit, preempt, and explain every pending job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from clusters import health_hooks
from clusters.backends.simulated_run import simulated_job_events, simulated_job_logs
from clusters.kube_sync.jobs import job_sent_objects
from kernel.errors import DomainError
from pools.models import Allocation, Cluster
from pools.selectors import SHARING_KIND
from pools.workload_kinds import kind_spec
from queues import job_sync
from queues import services as job_services
from queues.engine import settle
from queues.engine_input import HOLDING_STATES, cluster_engine_input, ts
from queues.guarantees.reasons import backing_index, with_repair_note
from queues.models import Job
from queues.pod_sets import job_pod_sets
from queues.ports import PodLog, RunEvent, SentObjects

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    """What one tick changed."""

    started: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    evicted: list[int] = field(default_factory=list)
    reasons_changed: int = 0


class SimulatedBackend:
    """Backend of a simulated cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def job_create(self, *, job_id: int) -> None:
        """Schedule right away so a new job gets its decision (or its wait reason) without waiting a tick."""
        simulated_cluster_tick_run(cluster_id=self.cluster.pk)

    def job_delete(self, *, job_id: int) -> None:
        """The portal already released the devices; a tick lets waiting jobs use them."""
        simulated_cluster_tick_run(cluster_id=self.cluster.pk)

    def job_logs(self, *, job: Job, tail_lines: int, now: datetime | None = None) -> list[PodLog]:
        """Simulated pod logs: what the simulation did to the job (starts, checkpoints, its end), up to now."""
        return simulated_job_logs(job, tail_lines=tail_lines, now=now or timezone.now())

    def job_events(self, *, job: Job) -> list[RunEvent]:
        """The events a cluster would have recorded for the job, from its timeline."""
        return simulated_job_events(job)

    def job_sent_objects(self, *, job: Job) -> SentObjects:
        """Nothing is sent to a simulated cluster: what a Kubernetes cluster with the same classes would get."""
        return job_sent_objects(job, simulated=True)

    def push_policy(self, *, now: datetime | None = None) -> str:
        """The engine reads the policy from the database: one tick reschedules under it."""
        tick = simulated_cluster_tick_run(cluster_id=self.cluster.pk, now=now)
        return (
            f"simulated cluster rescheduled under the new policy: {len(tick.admitted)} admitted, "
            f"{len(tick.preempted)} preempted, {tick.reasons_changed} wait reasons changed"
        )

    def sync(self, *, full: bool = False) -> None:
        """Run one tick now (the simulated cluster's state is the database: there is nothing to list)."""
        simulated_cluster_tick_run(cluster_id=self.cluster.pk)

    def health_apply(self) -> None:
        """Nothing to do: the engine already leaves devices outside USABLE_HEALTH out of every placement."""

    def protection_apply(self, *, now: datetime | None = None) -> None:
        """Nothing to do: the engine honours every job's protection in its own victim selection."""

    def reconcile(self, *, dry_run: bool = False) -> None:
        """Nothing to compare: the simulated cluster has no state of its own beside the portal's."""
        return

    def drift_check(self, *, now: datetime | None = None):
        """A simulated cluster has no configuration objects to drift."""
        raise DomainError(
            f"cluster {self.cluster.name} is simulated: it has no Kueue objects to drift", field="cluster"
        )

    def drift_reapply(self, *, row):
        """See :meth:`drift_check`."""
        return self.drift_check()

    def drift_adopt(self, *, row):
        """See :meth:`drift_check`."""
        return self.drift_check()


def _runtime(job: Job) -> timedelta:
    """Run time still needed by a job, given what its checkpoints banked."""
    return job_services.default_runtime(job) - timedelta(seconds=job.run_seconds_banked)


def _advance(job: Job, *, now: datetime, lost_nodes: set[int], report: TickReport) -> None:
    """Move one quota-holding job along its lifecycle."""
    if job.pk in lost_nodes:
        job_services.job_requeue(
            job, now=now, reason="node_lost", message="A node this job ran on left the cluster.", checkpointed=False
        )
        report.requeued.append(job.pk)
        return
    if job.state == Job.State.ADMITTED:
        job_services.job_start(job, now=now)
        report.started.append(job.pk)
    elif job.state == Job.State.RUNNING:
        if kind_spec(job.kind).runs_until_stopped:
            return  # a session or a service has no natural end: it runs until stopped (cancelled) or evicted
        ran = now - job.state_changed_at
        total = timedelta(seconds=job.run_seconds_banked) + ran
        if job.max_runtime_seconds and total >= timedelta(seconds=job.max_runtime_seconds):
            end = now - (total - timedelta(seconds=job.max_runtime_seconds))
            job_services.job_finish(
                job,
                state=Job.State.TIMED_OUT,
                now=max(end, job.state_changed_at),
                message=f"Stopped at its maximum runtime of {timedelta(seconds=job.max_runtime_seconds)}.",
            )
            report.finished.append(job.pk)
        elif ran >= _runtime(job):
            end = job.state_changed_at + _runtime(job)
            if job.sim_fails:
                job_services.job_finish(job, state=Job.State.FAILED, now=end, message=_failure_message(job))
            else:
                job_services.job_finish(
                    job, state=Job.State.SUCCEEDED, now=end, message="All pods completed successfully."
                )
            report.finished.append(job.pk)
    elif job.state == Job.State.PREEMPTING:
        stopped = job.eviction_reason in job_services.QUEUE_STOP_EVICTIONS
        checkpointed = job_services.has_checkpoint_policy(job)
        if checkpointed and now - job.state_changed_at < timedelta(seconds=settings.SIMULATED_CHECKPOINT_SECONDS):
            return
        if checkpointed:
            started_run = job.started_at or job.state_changed_at
            banked = int(min(_run_time_so_far(job, now=now, fallback=started_run), 1 << 31))
            job_sync.job_set_run_seconds_banked(job, seconds=banked)
        job_services.job_requeue(
            job,
            now=now,
            reason="queue_stopped" if stopped else "preempted",
            message=(
                "Evicted because its queue was stopped; it waits until an admin restarts the queue."
                if stopped
                else "Evicted after preemption; back in the queue."
            ),
            checkpointed=checkpointed,
        )
        report.requeued.append(job.pk)


def _failure_message(job: Job) -> str:
    """How a job submitted to fail ends: one pod fails; a job of several pod sets fails as a whole, once."""
    if not job.companion_pod_sets:
        return "Pod 0 exited with code 1 (simulated failure)."
    shapes = job_pod_sets(job)
    primary = shapes[-1]
    return (
        f"Pod 0 of pod set {primary.name} exited with code 1 (simulated failure) beyond its backoff limit: the "
        f"{kind_spec(job.kind).label} failed as a whole and the pods of all {len(shapes)} pod sets "
        f"({', '.join(ps.name for ps in shapes)}) were stopped."
    )


def _run_time_so_far(job: Job, *, now: datetime, fallback: datetime) -> float:
    """Seconds of work done, from the first allocation of the current run, plus what was banked before."""
    first = Allocation.objects.filter(job=job, ended_at__isnull=True).order_by("started_at").first()
    start = first.started_at if first else fallback
    return job.run_seconds_banked + max((now - start).total_seconds(), 0)


def _jobs_on_lost_nodes(cluster: Cluster) -> set[int]:
    """Jobs holding a device that is gone or sits on a gone node."""
    return set(
        Allocation.objects.filter(job__cluster=cluster, ended_at__isnull=True)
        .filter(Q(device__gone_at__isnull=False) | Q(device__node__gone_at__isnull=False))
        .values_list("job_id", flat=True)
    )


@transaction.atomic
def simulated_cluster_tick_run(*, cluster_id: int, now: datetime | None = None) -> TickReport:
    """One tick of a simulated cluster: lifecycle, then one scheduling cycle; serialised per cluster."""
    cluster = Cluster.objects.select_for_update().get(pk=cluster_id)
    now = now or timezone.now()
    report = TickReport()
    live = Job.objects.filter(cluster=cluster, state__in=(Job.State.PENDING, *HOLDING_STATES))
    job_sync.jobs_locked(live.only("pk"))
    lost = _jobs_on_lost_nodes(cluster)
    health_hooks.before_lifecycle(cluster=cluster, now=now)  # validation jobs go onto their pinned devices
    holding = live.filter(state__in=HOLDING_STATES).select_related("team", "resource_class").order_by("pk")
    for job in holding:
        _advance(job, now=now, lost_nodes=lost, report=report)
    _schedule(cluster, now=now, report=report)
    health_hooks.after_schedule(cluster=cluster, now=now)  # finished drains and validations move their tickets
    cluster.last_synced_at = now
    cluster.save(update_fields=["last_synced_at"])
    return report


def _schedule(cluster: Cluster, *, now: datetime, report: TickReport) -> None:
    """Run engine cycles back to back until nothing changes and apply every admission and preemption.

    Victims keep their quota until the next tick evicts them (after their checkpoint, if they have a policy),
    so their preemptors wait as Kueue's do ("Pending the preemption of N workload(s)").
    """
    inp = cluster_engine_input(cluster=cluster, jobs=health_hooks.engine_jobs(cluster=cluster), now=now)
    settled = settle(inp.state, ts(now), complete_evictions=False)
    _apply_queue_stops(inp, settled.evictions, now=now, report=report)
    for result in settled.cycles:
        _apply_admissions(cluster, inp, result, now=now, report=report)
        _apply_preemptions(inp, result, now=now, report=report)
    backing = backing_index(inp.guarantees) if inp.guarantees is not None and inp.guarantees.result.shortfalls else {}
    for key, reason in settled.pending.items():
        job = inp.jobs_by_key.get(key)
        if job is None or job.state != Job.State.PENDING:
            continue
        message, details = reason.message, dict(reason.details)
        if backing:  # a wait due to a guarantee repairs left unbacked says so
            message, details = with_repair_note(
                code=reason.code,
                message=message,
                details=details,
                team_id=job.team_id,
                flavor_ids=[link.flavor_id for link in job.resource_class.flavor_links.all()],
                resource=job.resource_class.resource_name,
                index=backing,
            )
        changed = job_services.job_set_wait_reason(
            job,
            code=reason.code,
            message=message,
            kueue_message=reason.kueue_message,
            details=details,
            now=now,
        )
        report.reasons_changed += int(changed)


def _apply_admissions(cluster: Cluster, inp, result, *, now: datetime, report: TickReport) -> None:
    """Record the cycle's admissions with concrete devices."""
    for decision in result.admitted:
        job = inp.jobs_by_key.get(decision.workload)
        if job is None or not decision.admitted or job.state != Job.State.PENDING:
            continue
        devices = _pick_devices(job, decision, inp.nodes_by_name)
        if devices is None:
            log.warning("cluster %s: no free devices for admitted %s; leaving it pending", cluster.name, job)
            continue
        pod_sets = [
            {"name": ps.name, "count": ps.count, "flavors": dict(ps.flavors), "nodes": list(ps.nodes)}
            for ps in decision.pod_sets
        ]
        job_services.job_admit(
            job,
            now=now,
            cluster_queue=decision.cluster_queue,
            pod_sets=pod_sets,
            borrowing=decision.borrowing,
            devices=devices,
            message=decision.message,
        )
        report.admitted.append(job.pk)


def _apply_preemptions(inp, result, *, now: datetime, report: TickReport) -> None:
    """Start evicting the cycle's victims (they keep their quota until their pods are gone)."""
    for preemption in result.preemptions:
        victim = inp.jobs_by_key.get(preemption.victim)
        if victim is None:
            continue
        preemptor = inp.jobs_by_key.get(preemption.preemptor)
        job_services.job_preempt(
            victim, now=now, preemptor=preemptor, reason=preemption.reason, message=preemption.message
        )
        report.preempted.append(victim.pk)


def _apply_queue_stops(inp, evictions, *, now: datetime, report: TickReport) -> None:
    """Start evicting the jobs of queues an admin set to HoldAndDrain (they keep their devices until evicted).

    Only admitted workloads are evicted here: the simulator admits without admission checks, so no job holds
    a bare quota reservation that a stopped queue would release.
    """
    for stop in evictions:
        job = inp.jobs_by_key.get(stop.workload)
        if job is None or not stop.admitted:
            continue
        job_services.job_evict(job, now=now, reason=stop.reason, message=stop.message)
        report.evicted.append(job.pk)


def _pick_devices(job: Job, decision, nodes_by_name) -> list[list] | None:
    """Concrete free devices for each pod of an admitted job, on the nodes the engine chose.

    One list per pod, pod sets in order (a pod set without devices, such as a Ray head, holds none), so a pod's
    index is its place in ``job_pod_sets``.
    """
    rc = job.resource_class
    shapes = job_pod_sets(job)
    by_name = {ps.name: ps.nodes for ps in decision.pod_sets}
    # a pod set that asks for nothing the engine places (no devices, cpu undeclared) may come back without nodes
    if any(len(by_name.get(s.name, ())) != s.count for s in shapes if s.devices_per_pod):
        return None
    node_ids = {nodes_by_name[n].pk for nodes in by_name.values() for n in nodes if n in nodes_by_name}
    free = job_services.usable_free_devices(
        node_ids=node_ids, resource_name=rc.resource_name, kind=SHARING_KIND[rc.sharing]
    )
    picked: list[list] = []
    for shape in shapes:
        if not shape.devices_per_pod:
            picked += [[] for _ in range(shape.count)]
            continue
        for name in by_name[shape.name]:
            pool = free.get(nodes_by_name[name].pk, []) if name in nodes_by_name else []
            if len(pool) < shape.devices_per_pod:
                return None
            picked.append(pool[: shape.devices_per_pod])
            del pool[: shape.devices_per_pod]
    return picked
