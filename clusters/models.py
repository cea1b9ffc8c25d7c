"""Models of the cluster integration: what the portal pushed to each Kubernetes cluster, what it last saw of each
job there, and what the reconciler found."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from pools.models import Cluster


class KubeConfigObject(models.Model):
    """A Kueue object (or team Namespace) the portal pushes to a cluster: what it last applied, and drift seen.

    ``desired`` is what the portal would apply now; ``live`` the same fields as the cluster has them; ``drift``
    the differing paths. A row is ``drifted`` when the cluster changed something the portal applied (an admin
    re-applies or adopts it), ``conflict`` when another field manager owns a field the portal does not force.
    """

    class Status(models.TextChoices):
        IN_SYNC = "in_sync", "In sync"
        DRIFTED = "drifted", "Drifted (changed in the cluster)"
        CONFLICT = "conflict", "Conflict (owned by another manager)"
        ORPHANED = "orphaned", "Orphaned (no longer wanted by the portal)"
        ERROR = "error", "Error"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="kube_objects")
    kind = models.CharField(max_length=40)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.IN_SYNC)
    desired = models.JSONField(default=dict, blank=True)
    live = models.JSONField(default=dict, blank=True)
    live_status = models.JSONField(default=dict, blank=True, help_text="The live object's status (ClusterQueues).")
    drift = models.JSONField(default=list, blank=True, help_text="[{path, portal, live}]")
    applied_hash = models.CharField(max_length=64, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    drift_detected_at = models.DateTimeField(null=True, blank=True)
    live_resource_version = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["cluster", "kind", "namespace", "name"]
        verbose_name = "cluster configuration object"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "kind", "namespace", "name"], name="kube_object_once"),
        ]
        indexes = [models.Index(fields=["cluster", "status"], name="kube_object_status")]

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


class KubeJobState(models.Model):
    """What the portal last saw of a job in its cluster: the Workload, the batch Job and its Pods, in compact form.

    Written by the sync from list and watch events, so the job's state machine can be re-run from the database
    alone (after a restart, or when one of the three objects changes without the others).
    """

    job = models.OneToOneField("queues.Job", on_delete=models.CASCADE, related_name="kube_state")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="kube_job_states")
    batch_job = models.JSONField(default=dict, blank=True)
    workload = models.JSONField(default=dict, blank=True)
    pods = models.JSONField(default=dict, blank=True, help_text="Pod name → compact pod.")
    job_deleted_at = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField()
    evaluated_at = models.DateTimeField(null=True, blank=True)
    dirty = models.BooleanField(default=True, help_text="Changed since the job was last evaluated.")
    protected_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set while the portal holds the job's Kueue priority raised for its protection from preemption "
        "(clusters.kube_sync.protection): until when the protection holds.",
    )

    class Meta:
        verbose_name = "job as seen in its cluster"
        indexes = [
            models.Index(fields=["cluster"], condition=Q(dirty=True), name="kube_job_state_dirty"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} in {self.cluster_id}"


class ReconcileReport(models.Model):
    """One run of the reconciler over a cluster: every mismatch between Kueue, pods, allocations and metering."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="reconcile_reports")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    dry_run = models.BooleanField(default=False)
    counts = models.JSONField(default=dict, blank=True, help_text="Findings per kind.")
    findings = models.JSONField(default=list, blank=True, help_text="[{kind, action, message, job, ...}]")
    repaired = models.PositiveIntegerField(default=0)
    reported = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["cluster", "-started_at"], name="reconcile_cluster_recent")]

    def __str__(self) -> str:
        return f"reconcile {self.cluster_id} @ {self.started_at:%Y-%m-%d %H:%M}"
