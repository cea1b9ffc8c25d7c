"""The Kubernetes + Kueue backend: Kueue admits, the portal submits suspended Jobs and reads the cluster back.

The HTTP side is :mod:`clusters.backends.k8s` (the only code that imports ``kubernetes``); the services it drives
are in :mod:`clusters.kube_sync`. Calls made from the portal's transactions go through Celery tasks so a slow or
unreachable cluster never holds a web request.
"""

from __future__ import annotations

from functools import cached_property

from clusters.backends.k8s.client import KubeClient
from pools.models import Cluster


class KubernetesBackend:
    """Backend of a real cluster running Kueue."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @cached_property
    def api(self) -> KubeClient:
        """The cluster connection (one ApiClient per cluster, shared in the process)."""
        return KubeClient(self.cluster)

    def job_submitted(self, *, job_id: int) -> None:
        """Create the suspended Job from a task (retried while the cluster is unreachable)."""
        from clusters.tasks import kube_job_submit

        kube_job_submit.delay(job_id)

    def job_cancelled(self, *, job_id: int) -> None:
        """Delete the Job from a task; its Pods go with it."""
        from clusters.tasks import kube_job_cancel

        kube_job_cancel.delay(job_id)

    def sync(self) -> None:
        """One sync pass now: watch deltas since the bookmarks (relist where there are none)."""
        from clusters.kube_sync.sync import kube_sync_run

        kube_sync_run(cluster=self.cluster, api=self.api)

    def health_apply(self) -> None:
        """Apply the health directives (node taints, cordons, DeviceTaintRules) and undo released ones."""
        from clusters.backends.k8s.health import health_directives_sync

        health_directives_sync(cluster=self.cluster, api=self.api)
