"""Queue, quota and hardware metrics: a few grouped queries per scrape, never one per job, device or team.

Labels are the bounded names platform teams group by (cluster, team, class, flavor, resource, wait code, state,
health); a job's name or id is never a label.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Count, F, Max, Min, Sum
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric

from kernel.quantity import is_device_resource, parse_quantity
from pools.models import Allocation, Device, RepairTicket
from queues.models import Job, QuotaLine

#: Upper bounds (seconds) of the time-to-admission buckets: 1 min … 1 day, then +Inf.
ADMISSION_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 12 * 3600.0, 24 * 3600.0)
#: The time-to-admission histogram counts the jobs admitted in this window before the scrape.
ADMISSION_WINDOW = timedelta(hours=24)
#: Job states that hold devices (admitted, running, or being preempted).
ACTIVE_STATES = (Job.State.ADMITTED, Job.State.RUNNING, Job.State.PREEMPTING)
#: Label value for a missing flavor or wait code (Prometheus drops empty labels, which would merge series).
NONE = "none"


def _devices() -> F:
    return F("devices_per_pod") * F("pod_count")


def pending_metrics(now: datetime) -> list[Metric]:
    """Pending jobs and the devices they ask for, per cluster, team, class and wait code; the oldest wait per
    cluster and class (one query)."""
    jobs = GaugeMetricFamily(
        "portal_jobs_pending",
        "Pending jobs, by the reason they wait (wait code).",
        labels=["cluster", "team", "class", "wait_code"],
    )
    devices = GaugeMetricFamily(
        "portal_jobs_pending_devices",
        "Devices the pending jobs ask for (whole gangs), by wait code.",
        labels=["cluster", "team", "class", "wait_code"],
    )
    oldest = GaugeMetricFamily(
        "portal_jobs_pending_oldest_wait_seconds",
        "How long the longest-waiting pending job has been in the queue (since it last entered it).",
        labels=["cluster", "class"],
    )
    rows = (
        Job.objects.filter(state=Job.State.PENDING)
        .values("cluster__name", "team__slug", "resource_class__slug", "wait_reason")
        .annotate(n=Count("id"), devices=Sum(_devices()), since=Min("queued_at"))
        .order_by()
    )
    first: dict[tuple[str, str], datetime] = {}
    for row in rows:
        labels = [row["cluster__name"], row["team__slug"], row["resource_class__slug"], row["wait_reason"] or NONE]
        jobs.add_metric(labels, row["n"])
        devices.add_metric(labels, row["devices"] or 0)
        key = (row["cluster__name"], row["resource_class__slug"])
        if key not in first or row["since"] < first[key]:
            first[key] = row["since"]
    for (cluster, rc), since in sorted(first.items()):
        oldest.add_metric([cluster, rc], max((now - since).total_seconds(), 0.0))
    return [jobs, devices, oldest]


def admission_metrics(now: datetime) -> list[Metric]:
    """The time-to-admission histogram of the last :data:`ADMISSION_WINDOW` per cluster and class, and the last
    admission per cluster (two queries)."""
    hist = GaugeHistogramMetricFamily(
        "portal_job_admission_wait_seconds",
        "Time from entering the queue to admission of the jobs admitted in the last 24 hours.",
        labels=["cluster", "class"],
    )
    waits: dict[tuple[str, str], list[float]] = defaultdict(list)
    rows = Job.objects.filter(admitted_at__gte=now - ADMISSION_WINDOW, admitted_at__lte=now).values_list(
        "cluster__name", "resource_class__slug", "queued_at", "admitted_at"
    )
    for cluster, rc, queued, admitted in rows:
        waits[(cluster, rc)].append(max((admitted - queued).total_seconds(), 0.0))
    for (cluster, rc), values in sorted(waits.items()):
        buckets = [(_bound(b), sum(1 for v in values if v <= b)) for b in ADMISSION_BUCKETS]
        buckets.append(("+Inf", len(values)))
        hist.add_metric([cluster, rc], buckets, gsum_value=sum(values))
    last = GaugeMetricFamily(
        "portal_job_last_admission_timestamp_seconds",
        "When a job of the cluster was last admitted (Unix time).",
        labels=["cluster"],
    )
    latest = Job.objects.filter(admitted_at__isnull=False).values("cluster__name").annotate(at=Max("admitted_at"))
    for row in latest.order_by("cluster__name"):
        last.add_metric([row["cluster__name"]], row["at"].timestamp())
    return [hist, last]


def _bound(seconds: float) -> str:
    return f"{seconds:.1f}"


def active_metrics() -> list[Metric]:
    """Devices held by admitted, running and preempting jobs per cluster, team, class and flavor (one query)."""
    devices = GaugeMetricFamily(
        "portal_job_devices",
        "Devices of admitted, running and preempting jobs (whole gangs), by job state.",
        labels=["cluster", "team", "class", "flavor", "state"],
    )
    rows = (
        Job.objects.filter(state__in=ACTIVE_STATES)
        .values("cluster__name", "team__slug", "resource_class__slug", "assigned_flavor__name", "state")
        .annotate(devices=Sum(_devices()))
        .order_by()
    )
    for row in rows:
        labels = [
            row["cluster__name"],
            row["team__slug"],
            row["resource_class__slug"],
            row["assigned_flavor__name"] or NONE,
            row["state"],
        ]
        devices.add_metric(labels, row["devices"] or 0)
    return [devices]


def quota_metrics() -> list[Metric]:
    """Nominal, used and borrowed device quota per cluster, team, flavor and resource (two queries).

    Used is what the team's open allocations hold on the flavor; borrowed the part of it above nominal.
    """
    names = ["cluster", "team", "flavor", "resource"]
    nominal = GaugeMetricFamily(
        "portal_quota_nominal_devices", "Nominal quota of the team's ClusterQueue.", labels=names
    )
    used = GaugeMetricFamily("portal_quota_used_devices", "Devices the team's running pods hold.", labels=names)
    borrowed = GaugeMetricFamily(
        "portal_quota_borrowed_devices", "Devices the team holds above its nominal quota (borrowed).", labels=names
    )
    held = (
        Allocation.objects.filter(ended_at__isnull=True)
        .values("job__cluster_id", "job__team_id", "device__node__flavor_id", "device__resource_name")
        .annotate(n=Count("id"))
        .order_by()
    )
    holding = {
        (r["job__cluster_id"], r["job__team_id"], r["device__node__flavor_id"], r["device__resource_name"]): r["n"]
        for r in held
    }
    lines = QuotaLine.objects.filter(team_quota__isnull=False).values_list(
        "team_quota__cluster_id",
        "team_quota__team_id",
        "flavor_id",
        "resource_name",
        "team_quota__cluster__name",
        "team_quota__team__slug",
        "flavor__name",
        "nominal",
    )
    for cluster_id, team_id, flavor_id, resource, cluster, team, flavor, quantity in lines.order_by():
        if not is_device_resource(resource):
            continue
        labels = [cluster, team, flavor, resource]
        n_nominal = parse_quantity(quantity, resource)
        n_used = holding.get((cluster_id, team_id, flavor_id, resource), 0)
        nominal.add_metric(labels, n_nominal)
        used.add_metric(labels, n_used)
        borrowed.add_metric(labels, max(n_used - n_nominal, 0))
    return [nominal, used, borrowed]


def hardware_metrics() -> list[Metric]:
    """Present schedulable units by health state, and open repair tickets by state (two queries)."""
    devices = GaugeMetricFamily(
        "portal_devices",
        "Schedulable units (GPUs, MIG slices, shared replicas) on present nodes, by health state.",
        labels=["cluster", "flavor", "resource", "health"],
    )
    rows = (
        Device.objects.filter(gone_at__isnull=True, node__gone_at__isnull=True)
        .exclude(resource_name="")
        .values("node__cluster__name", "node__flavor__name", "resource_name", "health")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        labels = [row["node__cluster__name"], row["node__flavor__name"] or NONE, row["resource_name"], row["health"]]
        devices.add_metric(labels, row["n"])
    tickets = GaugeMetricFamily(
        "portal_repair_tickets_open", "Repair tickets not closed yet, by state.", labels=["cluster", "state"]
    )
    open_rows = (
        RepairTicket.objects.filter(state__in=RepairTicket.OPEN_STATES)
        .values("node__cluster__name", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in open_rows:
        tickets.add_metric([row["node__cluster__name"], row["state"]], row["n"])
    return [devices, tickets]


def queue_families(now: datetime) -> Iterable[Metric]:
    """Every queue, quota and hardware metric family."""
    yield from pending_metrics(now)
    yield from admission_metrics(now)
    yield from active_metrics()
    yield from quota_metrics()
    yield from hardware_metrics()
