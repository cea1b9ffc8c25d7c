"""Operations metrics: sync freshness per cluster and kind, Celery task failures, budget burn (grouped queries).

Sync kinds, each with its own record of success:

* ``watch``: the Kubernetes list/watch sync (``Cluster.last_synced_at``; failures ``last_sync_error_at``); its lag
  is the age of the oldest job change observed from the cluster and not applied to the job yet.
* ``reconcile``: the reconciler's reports (a report without an error is a success).
* ``policy_push``: pushes of the queue policy; its lag is the age of the oldest push not applied yet.
* ``diagnosis``: the stored wait diagnoses (``ClusterDiagnosis.computed_at``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from django.db.models import Max, Min, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from billing.models import Budget, UsageRecord
from billing.pricing import local_day
from billing.services.budgets import period_bounds
from billing.services.common import billing_tz
from clusters.models import KubeJobState, ReconcileReport
from pools.models import Cluster
from portal.models import TaskFailure
from queues.models import ClusterDiagnosis, PolicyPush

#: The sync kinds reported, in order.
SYNC_KINDS = ("watch", "reconcile", "policy_push", "diagnosis")
#: Policy pushes not applied yet.
UNFINISHED_PUSHES = (PolicyPush.State.PENDING, PolicyPush.State.RETRYING)


def _age(now: datetime, at: datetime | None) -> float | None:
    return None if at is None else max((now - at).total_seconds(), 0.0)


def sync_metrics(now: datetime) -> list[Metric]:
    """Last success, last failure, age and lag of each sync kind per cluster (five queries)."""
    names = ["cluster", "kind"]
    success = GaugeMetricFamily(
        "portal_sync_last_success_timestamp_seconds", "When the sync kind last succeeded (Unix time).", labels=names
    )
    age = GaugeMetricFamily(
        "portal_sync_last_success_age_seconds", "Seconds since the sync kind last succeeded.", labels=names
    )
    failure = GaugeMetricFamily(
        "portal_sync_last_failure_timestamp_seconds", "When the sync kind last failed (Unix time).", labels=names
    )
    lag = GaugeMetricFamily(
        "portal_sync_lag_seconds",
        "Age of the oldest change seen but not applied yet (0: nothing waits); watch and policy_push only.",
        labels=names,
    )
    clusters = list(Cluster.objects.order_by("name").values_list("id", "name", "last_synced_at", "last_sync_error_at"))
    names_by_id = {pk: name for pk, name, _, _ in clusters}
    ok: dict[tuple[str, str], datetime | None] = {}
    bad: dict[tuple[str, str], datetime | None] = {}
    waiting: dict[tuple[str, str], datetime | None] = {}
    for _pk, name, synced, failed in clusters:
        ok[(name, "watch")], bad[(name, "watch")] = synced, failed
        waiting[(name, "watch")] = waiting[(name, "policy_push")] = None
    dirty = KubeJobState.objects.filter(dirty=True).values("cluster_id").annotate(first=Min("observed_at")).order_by()
    for row in dirty:
        waiting[(names_by_id[row["cluster_id"]], "watch")] = row["first"]
    reports = (
        ReconcileReport.objects.filter(finished_at__isnull=False)
        .values("cluster_id")
        .annotate(ok=Max("finished_at", filter=Q(error="")), bad=Max("finished_at", filter=~Q(error="")))
        .order_by()
    )
    for row in reports:
        ok[(names_by_id[row["cluster_id"]], "reconcile")] = row["ok"]
        bad[(names_by_id[row["cluster_id"]], "reconcile")] = row["bad"]
    pushes = (
        PolicyPush.objects.values("cluster_id")
        .annotate(
            ok=Max("finished_at", filter=Q(state=PolicyPush.State.SUCCEEDED)),
            bad=Max("last_attempt_at", filter=Q(state__in=(PolicyPush.State.RETRYING, PolicyPush.State.FAILED))),
            first=Min("requested_at", filter=Q(state__in=UNFINISHED_PUSHES)),
        )
        .order_by()
    )
    for row in pushes:
        key = (names_by_id[row["cluster_id"]], "policy_push")
        ok[key], bad[key], waiting[key] = row["ok"], row["bad"], row["first"]
    for cluster_id, computed in ClusterDiagnosis.objects.values_list("cluster_id", "computed_at"):
        ok[(names_by_id[cluster_id], "diagnosis")] = computed
    for key in sorted(ok.keys() | bad.keys() | waiting.keys(), key=lambda k: (k[0], SYNC_KINDS.index(k[1]))):
        labels = list(key)
        if ok.get(key) is not None:
            success.add_metric(labels, ok[key].timestamp())
            age.add_metric(labels, _age(now, ok[key]))
        if bad.get(key) is not None:
            failure.add_metric(labels, bad[key].timestamp())
        if key in waiting:
            lag.add_metric(labels, _age(now, waiting[key]) or 0.0)
    return [success, age, failure, lag]


def celery_metrics() -> list[Metric]:
    """Celery task failures per task, counted over every worker since the database was created (one query)."""
    failures = CounterMetricFamily(
        "portal_celery_task_failures", "Celery task runs that raised, over every worker.", labels=["task"]
    )
    last = GaugeMetricFamily(
        "portal_celery_task_last_failure_timestamp_seconds", "When the task last failed (Unix time).", labels=["task"]
    )
    for task, count, at in TaskFailure.objects.order_by("task").values_list("task", "count", "last_failure_at"):
        failures.add_metric([task], count)
        last.add_metric([task], at.timestamp())
    return [failures, last]


def budget_metrics(now: datetime) -> list[Metric]:
    """Spent, limit and burn ratio (spent / limit) of each active budget in its current period (two queries)."""
    names = ["team", "period", "currency"]
    spent = GaugeMetricFamily("portal_budget_spent", "Usage cost so far in the budget's current period.", labels=names)
    limit = GaugeMetricFamily("portal_budget_limit", "The budget's amount per period.", labels=names)
    ratio = GaugeMetricFamily(
        "portal_budget_burn_ratio", "Spent / limit in the current period (1: used up).", labels=names
    )
    today = local_day(now, billing_tz())
    starts = {period: period_bounds(period, today)[0] for period in Budget.Period.values}
    budgets = list(
        Budget.objects.filter(active=True)
        .order_by("team__slug", "period", "currency")
        .values_list("team_id", "team__slug", "period", "currency", "amount")
    )
    if not budgets:
        return [spent, limit, ratio]
    sums = {period: Sum("cost", filter=Q(day__gte=start), default=Decimal(0)) for period, start in starts.items()}
    rows = (
        UsageRecord.objects.filter(day__gte=min(starts.values()), day__lte=today)
        .values("team_id", "currency")
        .annotate(**sums)
        .order_by()
    )
    totals = {(r["team_id"], r["currency"]): r for r in rows}
    for team_id, team, period, currency, amount in budgets:
        used = Decimal(totals.get((team_id, currency), {}).get(period) or 0)
        labels = [team, period, currency]
        spent.add_metric(labels, float(used))
        limit.add_metric(labels, float(amount))
        ratio.add_metric(labels, float(used / amount))
    return [spent, limit, ratio]


def ops_families(now: datetime) -> Iterable[Metric]:
    """Every operations metric family."""
    yield from sync_metrics(now)
    yield from celery_metrics()
    yield from budget_metrics(now)
