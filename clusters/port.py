"""The cluster integration's side of :mod:`queues.ports`: changes go to Celery tasks, reads ask the backend now."""

from __future__ import annotations

from clusters import tasks
from clusters.backends import backend_for
from clusters.errors import ClusterError
from clusters.kube_sync.jobs import job_for_manifest
from queues.models import Job
from queues.ports import ClusterUnreachable, PodLog, RunEvent, SentObjects


class CeleryClusterPort:
    """Implements :class:`queues.ports.ClusterPort` with the tasks of :mod:`clusters.tasks` and the backends."""

    def job_submitted(self, *, job_id: int) -> None:
        """Create the job in its cluster from a task (retried while the cluster is unreachable)."""
        tasks.cluster_job_create.delay(job_id)

    def job_cancelled(self, *, job_id: int) -> None:
        """Delete the job from its cluster from a task."""
        tasks.cluster_job_delete.delay(job_id)

    def policy_push_requested(self, *, push_id: int) -> None:
        """Apply the pushed policy from a task (retried with backoff while the cluster is unreachable)."""
        tasks.policy_push.delay(push_id)

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
