"""Daily rollups: usage per team × user × class × flavor × day, and reserved capacity (idle, lent) per team × day.

``usage_rollup(day=…)`` recomputes one day from the usage records and job events and replaces that day's
rows in one transaction, so it can run any number of times. ``usage_rollup_pending`` is the sweep the beat
schedule runs: today, every day metering changed since its last rollup, days rolled before they ended,
and days missing between the first rolled day and today.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce

from billing.models import (
    CapacityDaily,
    CapacityTeamMonthly,
    LedgerDaily,
    ReclaimRecord,
    RollupDay,
    UsageDaily,
    UsageRecord,
    UsageTeamDaily,
    UsageTeamMonthly,
)
from billing.pricing import US_PER_HOUR, RateBook, Unit, cost_of, day_bounds, duration_us, local_day, unit_for
from billing.services.common import METERING_LOCK, billing_tz, default_currency, require_aware, take_lock
from billing.services.ledger import ledger_month_rollup, ledger_rows, reclaim_rows
from billing.services.metering import rate_books
from billing.services.quotas import quota_history_sync, quota_spans
from pools.gpu_usage import GpuUtilSample
from pools.models import Allocation, Device
from queues.models import Cohort, JobEvent, TeamQuota

#: Allocation end reasons (and requeue reasons) that mean the hardware failed, not the scheduler.
HARDWARE_REASONS = frozenset({"node_lost", "device_lost", "device_unhealthy", "unhealthy", "hardware", "xid"})
#: How far back the sweep fills days that were never rolled up.
MAX_BACKFILL_DAYS = 400


def is_hardware_reason(reason: str) -> bool:
    """Whether an end / requeue reason is a hardware failure (node lost, device unhealthy, XID, health…)."""
    reason = (reason or "").lower()
    return reason in HARDWARE_REASONS or reason.startswith(("health", "xid", "node_lost", "device_"))


@dataclass
class RollupReport:
    """What one day's rollup wrote."""

    day: date
    usage_rows: int
    capacity_rows: int
    complete: bool


@transaction.atomic
def usage_rollup(*, day: date, now: datetime) -> RollupReport:
    """Replace the rollups of one billing day (hours after ``now`` are not counted yet); idempotent."""
    require_aware(now, "now")
    take_lock(METERING_LOCK)
    quota_history_sync(now=now)
    tz = billing_tz()
    lo, hi = day_bounds(day, tz)
    until = min(hi, max(now, lo))
    UsageDaily.objects.filter(day=day).delete()
    UsageTeamDaily.objects.filter(day=day).delete()
    CapacityDaily.objects.filter(day=day).delete()
    LedgerDaily.objects.filter(day=day).delete()
    ReclaimRecord.objects.filter(day=day).delete()
    usage = _usage_rows(day=day, lo=lo, hi=hi)
    UsageDaily.objects.bulk_create(usage)
    UsageTeamDaily.objects.bulk_create(_team_rows(usage))
    capacity, ledger = _capacity_rows(day=day, lo=lo, until=until)
    CapacityDaily.objects.bulk_create(capacity)
    LedgerDaily.objects.bulk_create(ledger)
    ReclaimRecord.objects.bulk_create(reclaim_rows(day=day, lo=lo, hi=hi))
    month_rollup(month=day.replace(day=1))
    complete = now >= hi
    RollupDay.objects.bulk_create(
        [RollupDay(day=day, dirty=False, complete=complete, rolled_at=now, rolled_until=until)],
        update_conflicts=True,
        unique_fields=["day"],
        update_fields=["dirty", "complete", "rolled_at", "rolled_until"],
    )
    return RollupReport(day=day, usage_rows=len(usage), capacity_rows=len(capacity), complete=complete)


def month_bounds(month: date) -> tuple[date, date]:
    """[first day, first day of the next month) of the month containing ``month``."""
    first = month.replace(day=1)
    return first, (first.replace(day=28) + timedelta(days=4)).replace(day=1)


MONTH_USAGE_KEY = ("team_id", "resource_class_id", "flavor_id", "currency")
CAPACITY_SUMMED = ("reserved_us", "idle_us", "lent_us", "unbacked_us", "idle_cost", "lent_credit")


@transaction.atomic
def month_rollup(*, month: date) -> tuple[int, int]:
    """Rewrite one month's team rollups (and its borrowing ledger) from its daily rows (exact ``Decimal`` sums);
    (usage rows, capacity rows).

    ``usage_rollup`` calls it for the month of each day it rolls, so the monthly rows always equal the sums of
    the daily ones; a report over whole months reads these instead of ~30 daily rows each.
    """
    first, after = month_bounds(month)
    usage: dict[tuple, UsageTeamMonthly] = {}
    daily = UsageTeamDaily.objects.filter(day__gte=first, day__lt=after).order_by()
    for values in daily.values_list(*MONTH_USAGE_KEY, *SUMMED):
        key, sums = values[: len(MONTH_USAGE_KEY)], values[len(MONTH_USAGE_KEY) :]
        row = usage.get(key)
        if row is None:
            row = usage[key] = UsageTeamMonthly(month=first, **dict(zip(MONTH_USAGE_KEY, key, strict=True)))
        for name, value in zip(SUMMED, sums, strict=True):
            setattr(row, name, getattr(row, name) + value)
    capacity: dict[tuple, CapacityTeamMonthly] = {}
    daily_capacity = CapacityDaily.objects.filter(day__gte=first, day__lt=after).order_by()
    for team_id, currency, *sums in daily_capacity.values_list("team_id", "currency", *CAPACITY_SUMMED):
        cap = capacity.get((team_id, currency))
        if cap is None:
            cap = capacity[(team_id, currency)] = CapacityTeamMonthly(month=first, team_id=team_id, currency=currency)
        for name, value in zip(CAPACITY_SUMMED, sums, strict=True):
            setattr(cap, name, getattr(cap, name) + value)
    UsageTeamMonthly.objects.filter(month=first).delete()
    CapacityTeamMonthly.objects.filter(month=first).delete()
    UsageTeamMonthly.objects.bulk_create(usage.values())
    CapacityTeamMonthly.objects.bulk_create(capacity.values())
    ledger_month_rollup(first=first, after=after)
    return len(usage), len(capacity)


def usage_rollup_range(*, start: date, end: date, now: datetime) -> list[RollupReport]:
    """Roll up every day from ``start`` to ``end`` inclusive (each in its own transaction)."""
    reports = []
    day = start
    while day <= end:
        reports.append(usage_rollup(day=day, now=now))
        day += timedelta(days=1)
    return reports


def pending_days(*, now: datetime) -> list[date]:
    """Days whose rollup is stale: today, dirty or incomplete days, and never-rolled days since the first one."""
    today = local_day(now, billing_tz())
    days = set(
        RollupDay.objects.filter(Q(dirty=True) | Q(complete=False), day__lte=today).values_list("day", flat=True)
    )
    days.add(today)
    known = set(RollupDay.objects.filter(day__lte=today).values_list("day", flat=True))
    if known:
        first = max(min(known), today - timedelta(days=MAX_BACKFILL_DAYS))
        day = first
        while day < today:
            if day not in known:
                days.add(day)
            day += timedelta(days=1)
    return sorted(days)


def usage_rollup_pending(*, now: datetime) -> list[RollupReport]:
    """The beat sweep: roll up every pending day (see ``pending_days``)."""
    return [usage_rollup(day=day, now=now) for day in pending_days(now=now)]


def _key(team_id, user_id, class_id, flavor_id, currency) -> tuple:
    return (team_id, user_id, class_id, flavor_id, currency)


def _usage_rows(*, day: date, lo: datetime, hi: datetime) -> list[UsageDaily]:
    """Usage and lost hours of one day, per team × user × class × flavor × currency."""
    rows: dict[tuple, UsageDaily] = {}

    def row(key: tuple) -> UsageDaily:
        if key not in rows:
            team_id, user_id, class_id, flavor_id, currency = key
            rows[key] = UsageDaily(
                day=day, team_id=team_id, user_id=user_id, resource_class_id=class_id, flavor_id=flavor_id,
                currency=currency,
            )  # fmt: skip
        return rows[key]

    sums = (
        UsageRecord.objects.filter(day=day)
        .values("team_id", "user_id", "resource_class_id", "flavor_id", "currency")
        .annotate(
            owned_us=Sum("duration_us", filter=Q(borrowed=False), default=0),
            borrowed_us=Sum("duration_us", filter=Q(borrowed=True), default=0),
            owned_cost=Sum("cost", filter=Q(borrowed=False), default=Decimal(0)),
            borrowed_cost=Sum("cost", filter=Q(borrowed=True), default=Decimal(0)),
        )
        .order_by()
    )
    for s in sums:
        r = row(_key(s["team_id"], s["user_id"], s["resource_class_id"], s["flavor_id"], s["currency"]))
        r.owned_us, r.borrowed_us = s["owned_us"], s["borrowed_us"]
        r.owned_cost, r.borrowed_cost = s["owned_cost"], s["borrowed_cost"]
    for s in _idle_held(day=day):
        key = _key(s["team_id"], s["user_id"], s["resource_class_id"], s["flavor_id"], s["currency"])
        if key in rows:  # idle time is part of the usage: there is always a usage row for it
            rows[key].idle_held_us += s["idle_us"]
    currency = default_currency()
    for job, flavor_id, hours, hardware in _lost_hours(lo=lo, hi=hi):
        r = row(_key(job["team_id"], job["owner_id"], job["resource_class_id"], flavor_id, currency))
        if hardware:
            r.lost_hardware_hours += hours
        else:
            r.lost_preemption_hours += hours
    return list(rows.values())


SUMMED = (
    "owned_us", "borrowed_us", "owned_cost", "borrowed_cost", "lost_preemption_hours", "lost_hardware_hours",
    "idle_held_us",
)  # fmt: skip


def _idle_held(*, day: date) -> list[dict]:
    """Device time (µs) of one day's usage records held while the card was idle, per team × user × class × flavor ×
    currency: each record's duration × the share of its card's DCGM samples in [start, end) under
    ``NOTIFY_IDLE_PERCENT`` (the negotiation's threshold, queues.idle). One query; a record whose card has no
    samples counts none (unknown is not idle), as do days re-rolled after ``GPU_UTIL_RETENTION_DAYS``."""
    card = Coalesce(OuterRef("allocation__device__parent_id"), OuterRef("allocation__device_id"))
    samples = GpuUtilSample.objects.filter(
        device_id=card, observed_at__gte=OuterRef("start"), observed_at__lt=OuterRef("end")
    ).order_by()

    def counted(rows) -> Subquery:
        return Subquery(rows.values("device_id").annotate(n=Count("pk")).values("n")[:1])

    records = (
        UsageRecord.objects.filter(day=day, duration_us__gt=0)
        .annotate(
            n_all=counted(samples),
            n_idle=counted(samples.filter(gpu_util__lt=settings.NOTIFY_IDLE_PERCENT)),
        )
        .filter(n_idle__gt=0)
        .values("team_id", "user_id", "resource_class_id", "flavor_id", "currency", "duration_us", "n_all", "n_idle")
    )
    sums: dict[tuple, int] = defaultdict(int)
    for r in records:
        key = (r["team_id"], r["user_id"], r["resource_class_id"], r["flavor_id"], r["currency"])
        sums[key] += r["duration_us"] * r["n_idle"] // r["n_all"]
    return [
        {"team_id": k[0], "user_id": k[1], "resource_class_id": k[2], "flavor_id": k[3], "currency": k[4], "idle_us": v}
        for k, v in sums.items()
    ]


def _team_rows(usage: list[UsageDaily]) -> list[UsageTeamDaily]:
    """The user-level rows of a day summed over users."""
    rows: dict[tuple, UsageTeamDaily] = {}
    for u in usage:
        key = (u.team_id, u.resource_class_id, u.flavor_id, u.currency)
        row = rows.get(key)
        if row is None:
            row = rows[key] = UsageTeamDaily(
                day=u.day, team_id=u.team_id, resource_class_id=u.resource_class_id, flavor_id=u.flavor_id,
                currency=u.currency,
            )  # fmt: skip
        for name in SUMMED:
            setattr(row, name, getattr(row, name) + getattr(u, name))
    return list(rows.values())


def _lost_hours(*, lo: datetime, hi: datetime):
    """(job values, flavor id, device-hours, is hardware) for work lost in [lo, hi).

    Preemption and node loss without a checkpoint: the ``lostDeviceHours`` of requeued events. Hardware
    endings with no requeue (the job failed with its node): the allocation's time since its last checkpoint.
    """
    events = list(
        JobEvent.objects.filter(kind=JobEvent.Kind.REQUEUED, at__gte=lo, at__lt=hi).values(
            "job_id", "at", "details", "job__team_id", "job__owner_id", "job__resource_class_id",
            "job__assigned_flavor_id",
        )
    )  # fmt: skip
    ended = defaultdict(list)
    if events:
        for a in Allocation.objects.filter(
            job_id__in={e["job_id"] for e in events}, ended_at__gte=lo, ended_at__lt=hi
        ).values("job_id", "ended_at", "device__node__flavor_id"):
            ended[(a["job_id"], a["ended_at"])].append(a["device__node__flavor_id"])
    for e in events:
        details = e["details"] or {}
        raw = details.get("lostDeviceHours")
        if not raw:
            continue
        flavors = [f for f in ended.get((e["job_id"], e["at"]), []) if f is not None]
        flavor_id = flavors[0] if flavors else e["job__assigned_flavor_id"]
        job = {
            "team_id": e["job__team_id"],
            "owner_id": e["job__owner_id"],
            "resource_class_id": e["job__resource_class_id"],
        }
        yield job, flavor_id, Decimal(str(raw)), is_hardware_reason(details.get("reason", ""))
    requeued = JobEvent.objects.filter(job_id=OuterRef("job_id"), kind=JobEvent.Kind.REQUEUED, at=OuterRef("ended_at"))
    last_checkpoint = (
        JobEvent.objects.filter(
            job_id=OuterRef("job_id"), kind=JobEvent.Kind.CHECKPOINT_DONE, at__lte=OuterRef("ended_at")
        )
        .order_by("-at")
        .values("at")[:1]
    )
    hardware_endings = (
        Allocation.objects.filter(ended_at__gte=lo, ended_at__lt=hi)
        .exclude(end_reason="")
        .annotate(requeued=Exists(requeued), checkpoint=Subquery(last_checkpoint))
        .filter(requeued=False)
        .values(
            "started_at", "ended_at", "end_reason", "checkpoint", "device__node__flavor_id", "job__team_id",
            "job__owner_id", "job__resource_class_id", "job__assigned_flavor_id",
        )
    )  # fmt: skip
    for ending in hardware_endings:
        if not is_hardware_reason(ending["end_reason"]):
            continue
        since = max(ending["started_at"], ending["checkpoint"]) if ending["checkpoint"] else ending["started_at"]
        us = duration_us(since, ending["ended_at"]) if ending["ended_at"] > since else 0
        job = {
            "team_id": ending["job__team_id"],
            "owner_id": ending["job__owner_id"],
            "resource_class_id": ending["job__resource_class_id"],
        }
        flavor_id = ending["device__node__flavor_id"] or ending["job__assigned_flavor_id"]
        yield job, flavor_id, (Decimal(us) / US_PER_HOUR).quantize(Decimal("0.000001")), True


@dataclass
class _Line:
    """One team's reserved capacity on a (flavor, resource) over the hours of a day, and the root cohort it lends to.

    ``reserved[h]`` is the nominal quota in force × the time of hour ``h`` (µs, summed over the team's
    clusters); ``lend_cap[h]`` the same for the lending limit (the nominal where there is none).
    """

    team_id: int
    flavor_id: int
    resource_name: str
    cohort_id: int | None
    reserved: list[int]
    lend_cap: list[int]
    unbacked: list[int]


def _root_cohorts() -> dict[int, int | None]:
    """Each team's root cohort (the top of its quota's cohort tree), where it has one."""
    parents = dict(Cohort.objects.values_list("pk", "parent_id"))

    def root(cohort_id: int | None) -> int | None:
        seen = set()
        while cohort_id is not None and parents.get(cohort_id) is not None and cohort_id not in seen:
            seen.add(cohort_id)
            cohort_id = parents[cohort_id]
        return cohort_id

    roots: dict[int, int | None] = {}
    for team_id, cohort_id in TeamQuota.objects.filter(cohort__isnull=False).values_list("team_id", "cohort_id"):
        roots.setdefault(team_id, root(cohort_id))
    return roots


def _quota_lines(hours: list[tuple[datetime, datetime]], *, lo: datetime, hi: datetime) -> dict[tuple, _Line]:
    """Reserved capacity per (team, flavor, device resource), hour by hour, from the quota history."""
    roots = _root_cohorts()
    lines: dict[tuple[int, int, str], _Line] = {}
    for key, spans in quota_spans(lo=lo, hi=hi).items():
        reserved = [0] * len(hours)
        lend_cap = [0] * len(hours)
        unbacked = [0] * len(hours)
        for span in spans:
            for h, (hs, he) in enumerate(hours):
                start = max(hs, span.start) if span.start else hs
                end = min(he, span.end) if span.end else he
                if end <= start:
                    continue
                us = duration_us(start, end)
                # only the quota healthy devices backed is reserved (and charged); the rest is reported
                reserved[h] += int(span.reserved * us)
                unbacked[h] += int((span.nominal - span.reserved) * us)
                limit = span.reserved if span.lending_limit is None else min(span.lending_limit, span.reserved)
                lend_cap[h] += int(limit * us)
        lines[key] = _Line(*key, roots.get(key[0]), reserved, lend_cap, unbacked)
    return lines


def _hours(lo: datetime, until: datetime) -> list[tuple[datetime, datetime]]:
    """The hours of [lo, until), the last one possibly partial."""
    out = []
    start = lo
    while start < until:
        end = min(start + timedelta(hours=1), until)
        out.append((start, end))
        start = end
    return out


def _resource_units(keys) -> dict[tuple[int, str], Unit]:
    """The pricing unit of one unit of quota per (flavor, resource), from a device that provides it."""
    units: dict[tuple[int, str], Unit] = {}
    for flavor_id, resource_name in keys:
        device = (
            Device.objects.filter(node__flavor_id=flavor_id, resource_name=resource_name)
            .select_related("parent", "node")
            .first()
        )
        if device is None:
            profile = resource_name.split("/mig-", 1)[1].removesuffix(".shared") if "/mig-" in resource_name else ""
            kind = "shared" if resource_name.endswith(".shared") else ("mig" if profile else "full")
            units[(flavor_id, resource_name)] = unit_for(kind=kind, profile=profile)
            continue
        parent = device.parent
        replicas = 1
        if device.kind == Device.Kind.SHARED and parent is not None:
            replicas = parent.children.filter(kind=Device.Kind.SHARED).count() or 1
        elif device.kind == Device.Kind.SHARED:
            try:
                replicas = int(device.node.labels.get("nvidia.com/gpu.replicas") or 1)
            except ValueError:
                replicas = 1
        units[(flavor_id, resource_name)] = unit_for(
            kind=device.kind,
            profile=device.mig_profile or (parent.mig_profile if parent else ""),
            product=device.product or (parent.product if parent else ""),
            replicas=replicas,
        )
    return units


def _capacity_rows(*, day: date, lo: datetime, until: datetime) -> tuple[list[CapacityDaily], list[LedgerDaily]]:
    """Reserved, idle and lent device time of every team with nominal quota, hour by hour over the day; and the
    borrowing ledger of the day (who the lent time went to), from the same hours."""
    hours = _hours(lo, until)
    lines = _quota_lines(hours, lo=lo, hi=max(until, lo + timedelta(microseconds=1)))
    if not lines:
        return [], []
    owned: defaultdict[tuple, list[int]] = defaultdict(lambda: [0] * len(hours))  # (team, flavor, resource) → µs/h
    borrowed: defaultdict[tuple, list[int]] = defaultdict(lambda: [0] * len(hours))  # (team, flavor, resource) → µs/h
    records = UsageRecord.objects.filter(day=day, start__lt=until, end__gt=lo, duration_us__gt=0).values_list(
        "team_id", "flavor_id", "resource_name", "borrowed", "start", "end"
    )
    for team_id, flavor_id, resource_name, is_borrowed, start, end in records:
        series = (borrowed if is_borrowed else owned)[(team_id, flavor_id, resource_name)]
        for h, (hs, he) in enumerate(hours):
            if start < he and end > hs:
                series[h] += duration_us(max(start, hs), min(end, he))
    idle: dict[tuple, list[int]] = {
        key: [max(line.reserved[h] - owned[key][h], 0) for h in range(len(hours))] for key, line in lines.items()
    }
    groups, borrowers = _cohort_groups(lines=lines, borrowed=borrowed)
    lent = _lent(lines=lines, idle=idle, groups=groups, borrowers=borrowers, n_hours=len(hours))
    books: dict[int | None, RateBook] = rate_books()
    units = _resource_units({(line.flavor_id, line.resource_name) for line in lines.values()})
    counted_us = duration_us(lo, until) if until > lo else 0
    rows = []
    credit: dict[tuple, list[Decimal]] = {}
    currencies: dict[tuple, str] = {}
    for key, line in lines.items():
        unit = units[(line.flavor_id, line.resource_name)]
        book = books[line.flavor_id]
        idle_cost = Decimal(0)
        currency = currencies[key] = book.price(unit, lo).currency
        credit[key] = []
        for h, (hs, _he) in enumerate(hours):
            price = book.price(unit, hs)
            idle_cost += cost_of(idle[key][h], price.unit_price)
            credit[key].append(cost_of(lent[key][h], price.unit_price))
        reserved = sum(line.reserved)
        nominal = (Decimal(reserved) / counted_us).quantize(Decimal("0.001")) if counted_us else Decimal(0)
        rows.append(
            CapacityDaily(
                day=day,
                team_id=line.team_id,
                flavor_id=line.flavor_id,
                resource_name=line.resource_name,
                nominal=nominal,
                reserved_us=reserved,
                owned_us=sum(owned[key]),
                idle_us=sum(idle[key]),
                lent_us=sum(lent[key]),
                unbacked_us=sum(line.unbacked),
                currency=currency,
                idle_cost=idle_cost,
                lent_credit=sum(credit[key], Decimal(0)),
                counted_until=until,
            )
        )
    ledger = ledger_rows(
        day=day, keys_by_group=groups, lent=lent, credit=credit, currency=currencies, borrowers=borrowers
    )
    return rows, ledger


def _cohort_groups(*, lines, borrowed) -> tuple[dict[tuple, list[tuple]], dict[tuple, list[tuple[int, list[int]]]]]:
    """Per (root cohort, flavor, resource): the quota lines of its teams, and every team's borrowed µs per hour."""
    by_group: dict[tuple, list[tuple]] = defaultdict(list)
    for key, line in lines.items():
        if line.cohort_id is not None:
            by_group[(line.cohort_id, line.flavor_id, line.resource_name)].append(key)
    # Every team of the cohort can borrow, including teams with no quota of their own on this flavor.
    team_cohort = {team_id: root for team_id, root in _root_cohorts().items() if root is not None}
    borrowed_in_group: dict[tuple, list[tuple[int, list[int]]]] = defaultdict(list)
    for (team_id, flavor_id, resource_name), series in sorted(borrowed.items()):
        cohort_id = team_cohort.get(team_id)
        if cohort_id is not None:
            borrowed_in_group[(cohort_id, flavor_id, resource_name)].append((team_id, series))
    return by_group, borrowed_in_group


def _lent(*, lines, idle, groups, borrowers, n_hours: int) -> dict[tuple, list[int]]:
    """Idle time of each team that other teams of its cohort consumed by borrowing, hour by hour.

    Per (root cohort, flavor, resource, hour): each team's idle time is lent in proportion to what the
    *other* teams borrowed over all the idle time of the cohort, never more than its own idle time nor its
    lending limit.
    """
    lent = {key: [0] * n_hours for key in lines}
    for group, keys in groups.items():
        group_borrowers = borrowers.get(group, [])
        for h in range(n_hours):
            pool = sum(idle[k][h] for k in keys)
            if not pool:
                continue
            total_borrowed = sum(series[h] for _, series in group_borrowers)
            for k in keys:
                others = total_borrowed - sum(series[h] for team_id, series in group_borrowers if team_id == k[0])
                share = min(idle[k][h], idle[k][h] * others // pool) if others > 0 else 0
                lent[k][h] = min(share, lines[k].lend_cap[h])
    return lent
