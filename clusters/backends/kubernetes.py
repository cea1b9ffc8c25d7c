"""The Kubernetes + Kueue backend: Kueue admits, the portal submits suspended Jobs and reads the cluster back.

The HTTP side is :mod:`clusters.backends.k8s` (the only code that imports ``kubernetes``); the services it drives
are in :mod:`clusters.kube_sync`, each taking the connection as an argument so tests can hand them an emulator.
"""

from __future__ import annotations

from datetime import datetime
from functools import cached_property

from clusters.backends.k8s.client import KubeClient
from clusters.backends.k8s.health import health_directives_sync
from clusters.kube_sync.api import KubeRejected
from clusters.kube_sync.config import PushReport, kube_config_adopt, kube_config_push, kube_config_reapply
from clusters.kube_sync.job_run import kube_job_events, kube_job_logs
from clusters.kube_sync.jobs import job_sent_objects, kube_job_create, kube_job_delete
from clusters.kube_sync.protection import kube_protection_sync
from clusters.kube_sync.reconcile import kube_reconcile
from clusters.kube_sync.sync import kube_sync_run
from clusters.models import KubeConfigObject, ReconcileReport
from pools.models import Cluster
from queues.models import Job
from queues.ports import PodLog, RunEvent, SentObjects


class KubernetesBackend:
    """Backend of a real cluster running Kueue."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @cached_property
    def api(self) -> KubeClient:
        """The cluster connection (one ApiClient per cluster, shared in the process)."""
        return KubeClient(self.cluster)

    def job_create(self, *, job_id: int) -> None:
        """Create the job's suspended batch Job with Kueue's queue label (Kueue admits it)."""
        if Job.objects.filter(pk=job_id, cluster=self.cluster).exists():
            kube_job_create(job_id=job_id, api=self.api)

    def job_delete(self, *, job_id: int) -> None:
        """Delete the job's batch Job with propagation; its Pods go with it."""
        if Job.objects.filter(pk=job_id, cluster=self.cluster).exists():
            kube_job_delete(job_id=job_id, api=self.api)

    def job_logs(self, *, job: Job, tail_lines: int) -> list[PodLog]:
        """The last lines of each pod's log (read_namespaced_pod_log; one attempt, short timeout)."""
        return kube_job_logs(job, api=self.api, tail_lines=tail_lines)

    def job_events(self, *, job: Job) -> list[RunEvent]:
        """Events about the Job, its Workload and its pods (by involvedObject.name), oldest first."""
        return kube_job_events(job, api=self.api)

    def job_sent_objects(self, *, job: Job) -> SentObjects:
        """The job's object of its kind and its DRA ResourceClaimTemplates, built as submission builds them (the
        sync keeps only their status, so this is a rebuild with the current settings, not a read of the cluster)."""
        return job_sent_objects(job, simulated=False)

    def push_policy(self, *, now: datetime | None = None) -> str:
        """Apply the portal's Kueue objects (server-side apply); a field conflict or refusal raises KubeRejected."""
        report = self.drift_check(now=now)
        problems = report.errors + [f"{c}: field conflict with another manager" for c in report.conflicts]
        if problems:
            raise KubeRejected("; ".join(problems))
        return f"kubernetes: {report.text()}"

    def sync(self, *, full: bool = False) -> None:
        """One sync pass now: watch deltas since the bookmarks (relist where there are none, or all with full)."""
        kube_sync_run(cluster=self.cluster, api=self.api, full=full)

    def health_apply(self) -> None:
        """Apply the health directives (node taints, cordons, DeviceTaintRules) and undo released ones."""
        health_directives_sync(cluster=self.cluster, api=self.api)

    def protection_apply(self, *, now: datetime | None = None) -> None:
        """Raise protected jobs' Kueue priority while their protection holds, lower it after (a label patch)."""
        kube_protection_sync(cluster=self.cluster, api=self.api, now=now)

    def reconcile(self, *, dry_run: bool = False) -> ReconcileReport:
        """Reconcile workloads, pods, allocations and metering; the stored report."""
        return kube_reconcile(cluster=self.cluster, api=self.api, dry_run=dry_run)

    def drift_check(self, *, now: datetime | None = None) -> PushReport:
        """Push the portal's configuration objects and record drift (what the beat entry does)."""
        return kube_config_push(cluster=self.cluster, api=self.api, now=now)

    def drift_reapply(self, *, row: KubeConfigObject) -> KubeConfigObject:
        """Force-apply the portal's version of one object (or delete an orphan)."""
        return kube_config_reapply(row=row, api=self.api)

    def drift_adopt(self, *, row: KubeConfigObject) -> KubeConfigObject:
        """Copy one object's live values into the portal's models."""
        return kube_config_adopt(row=row, api=self.api)
