"""The cluster integration's side of :mod:`queues.ports`: changes go to Celery tasks, reads ask the backend now.

A task that cannot be sent because the broker is down is not an error of the change that asked for it (the change
is committed): it is logged, and the sweep that covers it sends the work again (the simulated clusters' tick decides
every pending job and frees cancelled jobs' devices; the kubernetes reconciler creates jobs never created and
deletes cancelled ones; ``clusters.policy_push_retry_due`` sends pushes not applied).
"""

from __future__ import annotations

import logging

from celery import Task

from clusters import tasks
from clusters.backends import backend_for
from clusters.errors import ClusterError
from clusters.kube_sync.jobs import job_for_manifest
from kernel.outages import BROKER_ERRORS
from queues.models import Job
from queues.ports import ClusterUnreachable, PodLog, RunEvent, SentObjects

log = logging.getLogger(__name__)


def _send(task: Task, object_id: int, *, swept_by: str) -> None:
    """``task.delay(object_id)``; when the broker is unreachable, say so and leave it to the sweep."""
    try:
        task.delay(object_id)
    except BROKER_ERRORS as exc:
        log.warning("%s(%s) not sent, the broker is unreachable (%s): %s", task.name, object_id, exc, swept_by)


class CeleryClusterPort:
    """Implements :class:`queues.ports.ClusterPort` with the tasks of :mod:`clusters.tasks` and the backends."""

    def job_submitted(self, *, job_id: int) -> None:
        """Create the job in its cluster from a task (retried while the cluster is unreachable)."""
        _send(tasks.cluster_job_create, job_id, swept_by="the next tick or reconcile of its cluster hands it over")

    def job_cancelled(self, *, job_id: int) -> None:
        """Delete the job from its cluster from a task."""
        _send(tasks.cluster_job_delete, job_id, swept_by="the next tick or reconcile of its cluster stops it")

    def policy_push_requested(self, *, push_id: int) -> None:
        """Apply the pushed policy from a task (retried with backoff while the cluster is unreachable)."""
        _send(tasks.policy_push, push_id, swept_by="clusters.policy_push_retry_due sends it again")

    def job_logs(self, *, job_id: int, tail_lines: int) -> list[PodLog]:
        """The job's pod logs from its cluster's backend, now; a cluster error becomes ClusterUnreachable."""
        job = Job.objects.select_related("cluster").get(pk=job_id)
        try:
            return backend_for(job.cluster).job_logs(job=job, tail_lines=tail_lines)
        except ClusterError as exc:
            raise ClusterUnreachable(f"cluster {job.cluster.name}: {exc.message}") from exc

    def job_events(self, *, job_id: int) -> list[RunEvent]:
        """The job's events from its cluster's backend, now; a cluster error becomes ClusterUnreachable."""
        job = Job.objects.select_related("cluster").get(pk=job_id)
        try:
            return backend_for(job.cluster).job_events(job=job)
        except ClusterError as exc:
            raise ClusterUnreachable(f"cluster {job.cluster.name}: {exc.message}") from exc

    def job_sent_objects(self, *, job_id: int) -> SentObjects:
        """What the portal creates for the job in its cluster (or would, in a simulated one), built now: no request
        goes to the cluster."""
        job = job_for_manifest(job_id)
        return backend_for(job.cluster).job_sent_objects(job=job)
