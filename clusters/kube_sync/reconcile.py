"""The reconciler: compare Kueue's workloads, the pods, the portal's allocations and the metering, and repair.

A run relists the cluster (so the snapshots are the cluster's present state, whatever a watch may have missed),
then checks every live job and every open allocation. Each mismatch is repaired where the truth is clear —
always at the cluster's own time, so no device-time is billed after a pod was gone and none is lost — or
reported. The run's findings are kept as a :class:`~pools.models.ReconcileReport` (the last
``KUBE_RECONCILE_REPORTS_KEPT`` per cluster) that admins read in the Django admin.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from clusters.kube_sync.api import KubeApi, KubeError, KubeUnavailable
from clusters.kube_sync.checks import reconcile_checks
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.eval_context import EvalContext
from clusters.kube_sync.evaluate import evaluate_job, job_mismatch
from clusters.kube_sync.jobs import kube_job_create, kube_job_delete
from clusters.kube_sync.observe import parse_time, pod_is_live
from clusters.kube_sync.sync import ClusterSync
from clusters.models import KubeJobState, ReconcileReport
from kernel.labels import plural
from pools.models import USABLE_HEALTH, Allocation, Cluster, Device, Node
from queues import job_sync
from queues import services as job_services
from queues.models import Job

log = logging.getLogger(__name__)

HOLDING = (Job.State.ADMITTED, Job.State.RUNNING, Job.State.PREEMPTING)


class _Findings:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, kind: str, action: str, message: str, **extra: Any) -> None:
        self.items.append({"kind": kind, "action": action, "message": message, **extra})


def kube_reconcile(
    *, cluster: Cluster, api: KubeApi, dry_run: bool = False, relist: bool = True, now: datetime | None = None
) -> ReconcileReport:
    """Run the reconciler over one cluster and store its report (``dry_run``: report, repair nothing)."""
    now = now or timezone.now()
    report = ReconcileReport.objects.create(cluster=cluster, started_at=now, dry_run=dry_run)
    found = _Findings()
    try:
        foreign: list[str] = []
        if relist and not dry_run:
            sync = ClusterSync(cluster, api)
            result = sync.run(full=True, watch_seconds=0)
            if result.unreachable:
                raise KubeUnavailable(result.unreachable)
            foreign = sync.foreign_jobs
            for action, n in result.actions.items():
                found.add(
                    "missed_transition", "repaired", f"{n} job transition(s) applied from a full relist: {action}"
                )
        _check_jobs(cluster, found, dry_run=dry_run, api=api, now=now)
        _check_allocations(cluster, found, dry_run=dry_run, now=now)
        _check_dead_nodes(cluster, found, now=now)
        _check_registered(cluster, found)
        for name in foreign:
            found.add(
                "foreign_job",
                "reported",
                f"the cluster has a Job labelled as the portal's that it does not know: {name}",
            )
    except KubeError as exc:
        report.error = exc.message
        log.warning("cluster %s: reconcile stopped: %s", cluster.name, exc.message)
    report.findings = found.items
    report.counts = dict(Counter(f["kind"] for f in found.items))
    report.repaired = sum(1 for f in found.items if f["action"] == "repaired")
    report.reported = sum(1 for f in found.items if f["action"] != "repaired")
    report.finished_at = timezone.now()
    report.save()
    keep = int(kube_setting("KUBE_RECONCILE_REPORTS_KEPT"))
    old = (
        ReconcileReport.objects.filter(cluster=cluster)
        .order_by("-started_at", "-id")
        .values_list("pk", flat=True)[keep:]
    )
    ReconcileReport.objects.filter(pk__in=list(old)).delete()
    return report


def _check_jobs(cluster: Cluster, found: _Findings, *, dry_run: bool, api: KubeApi, now: datetime) -> None:
    """Live jobs whose portal state disagrees with the cluster; jobs never submitted; cancelled jobs still there."""
    ctx = EvalContext(cluster, now=now)
    live = Job.objects.filter(cluster=cluster).exclude(state__in=Job.FINAL_STATES)
    states = {s.job_id: s for s in KubeJobState.objects.filter(job__in=live)}
    for job in live.select_related("team", "owner", "resource_class", "priority_class").prefetch_related(
        "resource_class__flavor_links__flavor"
    ):
        st = states.get(job.pk)
        if not job.k8s_uid:
            age = (now - job.submitted_at).total_seconds()
            if age < int(kube_setting("KUBE_RESUBMIT_AFTER_SECONDS")):
                continue
            if dry_run:
                found.add("never_submitted", "reported", f"job {job.pk} was never created in the cluster", job=job.pk)
                continue
            try:
                outcome = kube_job_create(job_id=job.pk, api=api, now=now)
            except KubeError as exc:
                found.add(
                    "never_submitted", "reported", f"job {job.pk}: resubmitting failed: {exc.message}", job=job.pk
                )
                continue
            found.add("never_submitted", "repaired", f"job {job.pk} submitted again ({outcome})", job=job.pk)
            continue
        problem = job_mismatch(job, st)
        if not problem:
            continue
        if dry_run or st is None:
            found.add("state_mismatch", "reported", f"job {job.pk}: {problem}", job=job.pk)
            continue
        with transaction.atomic():
            locked = job_sync.job_lock(job_id=job.pk)
            locked.team, locked.resource_class = job.team, job.resource_class
            evaluated = evaluate_job(locked, st, ctx)
        still = job_mismatch(locked, st)
        action = "reported" if still or not evaluated.actions else "repaired"
        found.add(
            "state_mismatch",
            action,
            f"job {job.pk}: {problem}" + (f" → {', '.join(evaluated.actions)}" if evaluated.actions else ""),
            job=job.pk,
        )
    gone = Job.objects.filter(cluster=cluster, state=Job.State.CANCELLED).exclude(k8s_uid="")
    for st in (
        KubeJobState.objects.filter(job__in=gone, job_deleted_at__isnull=True)
        .exclude(batch_job={})
        .select_related("job")
    ):
        if st.batch_job.get("deleted"):
            continue
        if dry_run:
            found.add(
                "cancelled_still_running", "reported", f"job {st.job_id} is cancelled but its Job exists", job=st.job_id
            )
            continue
        try:
            kube_job_delete(job_id=st.job_id, api=api)
            found.add("cancelled_still_running", "repaired", f"job {st.job_id}: deleted its Job again", job=st.job_id)
        except KubeError as exc:
            found.add(
                "cancelled_still_running", "reported", f"job {st.job_id}: delete failed: {exc.message}", job=st.job_id
            )


def _check_allocations(cluster: Cluster, found: _Findings, *, dry_run: bool, now: datetime) -> None:
    """Open allocations nobody should hold: of ended or pending jobs, on vanished devices, without a pod."""
    open_allocs = Allocation.objects.filter(job__cluster=cluster, ended_at__isnull=True).select_related(
        "job", "device", "device__node"
    )
    ended_jobs: dict[int, Job] = {}
    for alloc in open_allocs.filter(Q(job__state__in=Job.FINAL_STATES) | Q(job__state=Job.State.PENDING)):
        ended_jobs.setdefault(alloc.job_id, alloc.job)
    for job in ended_jobs.values():
        at = job.finished_at if job.is_final else job.state_changed_at
        n = Allocation.objects.filter(job=job, ended_at__isnull=True).count()
        if dry_run:
            state = job.get_state_display().lower()
            text = f"job {job.pk} ({state}) still holds {plural(n, 'device')}"
            found.add("orphaned_allocation", "reported", text, job=job.pk)
            continue
        job_services.release_allocations(job, now=at or now, reason="reconciled")
        found.add(
            "orphaned_allocation",
            "repaired",
            f"job {job.pk} ({job.get_state_display().lower()}): closed {n} allocation(s) at {at:%Y-%m-%d %H:%M:%S}",
            job=job.pk,
        )
    states = {s.job_id: s for s in KubeJobState.objects.filter(job__cluster=cluster, job__state__in=HOLDING)}
    holding = open_allocs.filter(job__state__in=HOLDING)
    reported: set[tuple[int, str]] = set()
    for alloc in holding:
        st = states.get(alloc.job_id)
        node = alloc.device.node
        if alloc.device.gone_at or node.gone_at:
            found.add(
                "device_gone",
                "reported",
                f"job {alloc.job_id} holds {node.name}/{alloc.device.key}, which left the cluster "
                f"({(alloc.device.gone_at or node.gone_at):%Y-%m-%d %H:%M:%S}); the job is requeued by the sync",
                job=alloc.job_id,
            )
            continue
        if st is None or (alloc.job_id, node.name) in reported:
            continue
        pods_here = [p for p in (st.pods or {}).values() if p.get("node") == node.name and pod_is_live(p)]
        if not pods_here and (st.pods or {}):
            reported.add((alloc.job_id, node.name))
            found.add(
                "allocation_without_pod",
                "reported",
                f"job {alloc.job_id} holds devices on {node.name} but none of its pods runs there",
                job=alloc.job_id,
            )


def _check_dead_nodes(cluster: Cluster, found: _Findings, *, now: datetime) -> None:
    """Present nodes NotReady for long whose devices still count as usable capacity."""
    limit = timedelta(seconds=int(kube_setting("KUBE_DEAD_NODE_SECONDS")))
    for node in Node.objects.filter(cluster=cluster, gone_at__isnull=True, ready=False):
        ready: dict = next((c for c in node.conditions or [] if c.get("type") == "Ready"), {})
        since = parse_time(ready.get("lastTransitionTime"))
        if since is None or now - since < limit:
            continue
        counted = (
            Device.objects.filter(node=node, gone_at__isnull=True, health__in=USABLE_HEALTH)
            .exclude(resource_name="")
            .count()
        )
        if counted:
            found.add(
                "dead_node_counted",
                "reported",
                f"node {node.name} has been NotReady since {since:%Y-%m-%d %H:%M} but {counted} device(s) still count "
                "as healthy capacity (the page shows them excluded: the node is NotReady; health owns the state)",
                node=node.name,
            )


def _check_registered(cluster: Cluster, found: _Findings) -> None:
    """The checks other apps registered (billing's open usage records): reported, not repaired."""
    for check in reconcile_checks():
        for finding in check(cluster):
            found.add(finding.kind, "reported", finding.message)
