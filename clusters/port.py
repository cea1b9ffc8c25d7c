"""The cluster integration's side of :mod:`queues.ports`: each call hands the work to a Celery task."""

from __future__ import annotations

from clusters import tasks


class CeleryClusterPort:
    """Implements :class:`queues.ports.ClusterPort` with the tasks of :mod:`clusters.tasks`."""

    def job_submitted(self, *, job_id: int) -> None:
        """Create the job in its cluster from a task (retried while the cluster is unreachable)."""
        tasks.cluster_job_create.delay(job_id)

    def job_cancelled(self, *, job_id: int) -> None:
        """Delete the job from its cluster from a task."""
        tasks.cluster_job_delete.delay(job_id)

    def policy_push_requested(self, *, push_id: int) -> None:
        """Apply the pushed policy from a task (retried with backoff while the cluster is unreachable)."""
        tasks.policy_push.delay(push_id)
