"""The interface every cluster backend implements, and the errors it raises.

Callers never branch on ``Cluster.backend``: they take ``backend_for(cluster)`` and call one of these methods.
Failures raise :mod:`clusters.errors`. Each method does its work synchronously (in a Celery worker, a command
or a test); the after-commit hand-off from the portal's own transactions is :mod:`clusters.port`.
"""

from __future__ import annotations

from typing import Protocol

from pools.models import Cluster
from queues.models import Job
from queues.ports import PodLog, RunEvent, SentObjects


class ClusterBackend(Protocol):
    """What the portal asks of a cluster."""

    cluster: Cluster

    def job_create(self, *, job_id: int) -> None:
        """A job was recorded as pending: hand it to the cluster's scheduler."""

    def job_delete(self, *, job_id: int) -> None:
        """A job was cancelled in the portal: stop it in the cluster and release what it held there."""

    def job_logs(self, *, job: Job, tail_lines: int) -> list[PodLog]:
        """The last ``tail_lines`` lines of each pod of the job (raises ClusterUnavailable when unreachable)."""

    def job_events(self, *, job: Job) -> list[RunEvent]:
        """Events about the job, its workload and its pods, oldest first (raises ClusterUnavailable)."""

    def job_sent_objects(self, *, job: Job) -> SentObjects:
        """What the portal creates for the job in a Kubernetes cluster (what a simulated one would get), built now."""

    def push_policy(self, *, now=None) -> str:
        """Make the cluster follow the portal's queue policy now; a one-line report (raises ClusterError)."""

    def sync(self, *, full: bool = False) -> None:
        """Bring the portal's view of the cluster up to date (inventory, workloads, health)."""

    def health_apply(self) -> None:
        """Keep new work off devices excluded for health (taints, cordons, device taints), undo released ones."""

    def protection_apply(self, *, now=None) -> None:
        """Make the cluster's scheduler honour the protected work of running jobs now (queues.protection)."""

    def reconcile(self, *, dry_run: bool = False):
        """Compare the cluster's workloads and pods with the portal's jobs, allocations and metering; a report."""

    def drift_check(self):
        """Push the portal's configuration objects and record where the cluster differs from them."""

    def drift_reapply(self, *, row):
        """The portal wins for one configuration object: apply the portal's version again."""

    def drift_adopt(self, *, row):
        """The cluster wins for one configuration object: copy its values into the portal's models."""
