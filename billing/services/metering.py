"""Metering: turn allocations (the cluster's timestamps of who held which device) into priced usage records.

``metering_sync`` is a convergent sync: for every allocation that is open, changed, or not yet final it
computes the records the allocation *should* have — from its ``started_at`` to its hard stop, cut at billing
midnights and rate changes — and applies the difference. Running it again, after a crash (the transaction
rolls back), from two workers at once (they serialise on a lock row), or after the portal was down for
hours (nothing depends on when it ran) gives the same rows.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q

from billing.models import MeteringCursor, Rate, RollupDay, UsageRecord
from billing.pricing import (
    RateBook,
    RatePeriod,
    Unit,
    cost_of,
    duration_us,
    local_day,
    split_interval,
    unit_for,
)
from billing.services.common import METERING_LOCK, billing_tz, default_currency, require_aware, take_lock
from billing.services.quotas import quota_history_sync
from kernel.quantity import parse_decimal
from pools.models import Allocation, Device
from queues.models import Job, JobEvent, QuotaLine

log = logging.getLogger(__name__)

#: How old the highest allocation pk seen must be before the incremental sweep stops looking below it.
CURSOR_LAG = timedelta(minutes=10)
#: Allocations handled per batch of queries.
BATCH = 500
#: Fields that decide whether a stored record is up to date (``metered_at`` is not one of them).
COMPARED = (
    "end",
    "duration_us",
    "day",
    "flavor_id",
    "resource_name",
    "unit_kind",
    "mig_profile",
    "slice_fraction",
    "borrowed",
    "rate_id",
    "unit_price",
    "currency",
    "cost",
    "open",
    "final",
    "stop",
    "source_start",
    "source_end",
    "team_id",
    "user_id",
    "resource_class_id",
    "job_id",
)


@dataclass
class MeteringReport:
    """What one metering run did."""

    full: bool = False
    allocations: int = 0
    created: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    days: set[date] = field(default_factory=set)
    #: Allocations still open although their job ended or their device / node is gone: metering stopped at
    #: that instant; the reconciler should close them.
    stopped_early: list[int] = field(default_factory=list)

    @property
    def changed(self) -> int:
        """Rows written or removed."""
        return self.created + self.updated + self.deleted


def _up_to_date():
    """Final records computed from the allocation's current timestamps (correlated on the outer allocation)."""
    return UsageRecord.objects.filter(
        allocation=OuterRef("pk"), final=True, source_start=OuterRef("started_at"), source_end=OuterRef("ended_at")
    )


def dirty_allocations(*, now: datetime):
    """Every allocation whose usage records may be missing or stale (the full sweep: reads the whole history)."""
    non_final = UsageRecord.objects.filter(allocation=OuterRef("pk"), final=False)
    return Allocation.objects.filter(started_at__lte=now).filter(
        Q(ended_at__isnull=True) | Exists(non_final) | ~Exists(_up_to_date())
    )


def changed_allocation_ids(*, now: datetime, since_pk: int) -> set[int]:
    """Allocations an incremental run must look at; the cost follows the changes, not the history.

    Open allocations (at most one per device); allocations with records not yet final (open at the last
    run and closed since, or marked for re-pricing); and allocations above the cursor with no up-to-date
    records (new since the last runs: inserted open, or opened and closed while the portal was down).
    Closed allocations are never edited afterwards (``queues`` only closes open ones), so nothing else changes.
    """
    # ``order_by()``: the models' default orderings would join jobs (and break the DISTINCT) for nothing.
    open_ids = (
        Allocation.objects.filter(ended_at__isnull=True, started_at__lte=now).order_by().values_list("pk", flat=True)
    )
    not_final = UsageRecord.objects.filter(final=False).order_by().values_list("allocation_id", flat=True).distinct()
    new = (
        Allocation.objects.filter(pk__gt=since_pk, started_at__lte=now)
        .filter(~Exists(_up_to_date()))
        .order_by()
        .values_list("pk", flat=True)
    )
    return {*open_ids, *not_final, *new}


def _advance_cursor(cursor: MeteringCursor, *, now: datetime, full: bool) -> None:
    """Move the never-metered mark up to the highest pk seen ``CURSOR_LAG`` ago (see ``MeteringCursor``)."""
    if full:
        cursor.full_sweep_at = now
    if cursor.seen_at is not None and now - cursor.seen_at < CURSOR_LAG:
        if full:
            cursor.save(update_fields=["full_sweep_at"])
        return
    checked = max(cursor.checked_allocation_id, cursor.seen_allocation_id)
    future = (
        Allocation.objects.filter(pk__gt=cursor.checked_allocation_id, started_at__gt=now)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    if future is not None:
        # An allocation stamped after ``now`` (a lagging clock) was skipped: keep looking from it.
        checked = min(checked, future - 1)
    cursor.checked_allocation_id = max(checked, 0)
    cursor.seen_allocation_id = Allocation.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    cursor.seen_at = now
    cursor.save(update_fields=["checked_allocation_id", "seen_allocation_id", "seen_at", "full_sweep_at"])


@transaction.atomic
def metering_sync(*, now: datetime, full: bool = False) -> MeteringReport:
    """Bring every allocation's usage records up to date as of ``now``; idempotent and safe to run concurrently.

    Incremental by default (open, unfinished and new allocations); ``full=True`` re-checks every allocation
    ever recorded — the daily reconcile sweep that heals anything an incremental run could not see.
    """
    require_aware(now, "now")
    take_lock(METERING_LOCK)
    quota_history_sync(now=now)
    cursor, _ = MeteringCursor.objects.get_or_create(name=METERING_LOCK)
    report = MeteringReport(full=full)
    tz = billing_tz()
    books = rate_books()
    if full:
        ids = list(dirty_allocations(now=now).order_by("pk").values_list("pk", flat=True))
    else:
        ids = sorted(changed_allocation_ids(now=now, since_pk=cursor.checked_allocation_id))
    for i in range(0, len(ids), BATCH):
        _meter_batch(ids[i : i + BATCH], now=now, tz=tz, books=books, report=report)
    _advance_cursor(cursor, now=now, full=full)
    if report.days:
        RollupDay.objects.bulk_create(
            [RollupDay(day=day, dirty=True) for day in sorted(report.days)],
            update_conflicts=True,
            unique_fields=["day"],
            update_fields=["dirty"],
        )
    if report.stopped_early:
        log.warning("metering stopped early for open allocations %s (job ended or device gone)", report.stopped_early)
    return report


def rate_books() -> dict[int | None, RateBook]:
    """Every flavor's rates, loaded once per run."""
    currency = default_currency()
    periods: dict[int, list[RatePeriod]] = defaultdict(list)
    for r in Rate.objects.all():
        periods[r.flavor_id].append(
            RatePeriod(r.pk, r.kind, r.mig_profile, r.price_per_hour, r.currency, r.effective_from, r.effective_to)
        )
    books: dict[int | None, RateBook] = defaultdict(lambda: RateBook((), default_currency=currency))
    books.update({fid: RateBook(p, default_currency=currency) for fid, p in periods.items()})
    return books


def _meter_batch(ids: Sequence[int], *, now: datetime, tz, books, report: MeteringReport) -> None:
    """Meter one batch of allocations."""
    allocations = list(
        Allocation.objects.filter(pk__in=ids)
        .select_related("job", "device", "device__node", "device__parent")
        .order_by("pk")
    )
    existing: dict[int, dict[datetime, UsageRecord]] = defaultdict(dict)
    for record in UsageRecord.objects.filter(allocation_id__in=ids).order_by():  # no join for the default order
        existing[record.allocation_id][record.start] = record
    units = _units(allocations)
    borrowed = _borrowed_flags([a for a in allocations if not existing.get(a.pk)])
    to_create: list[UsageRecord] = []
    to_update: list[UsageRecord] = []
    to_delete: list[int] = []
    for allocation in allocations:
        report.allocations += 1
        have = existing.get(allocation.pk, {})
        flag = next(iter(have.values())).borrowed if have else borrowed.get(allocation.pk, False)
        want = _desired(allocation, unit=units[allocation.pk], borrowed=flag, have=have, now=now, tz=tz, books=books)
        if (
            want
            and want[-1].stop not in (UsageRecord.Stop.OPEN, UsageRecord.Stop.ENDED)
            and allocation.ended_at is None
        ):
            report.stopped_early.append(allocation.pk)
        wanted_starts = {r.start for r in want}
        for start, record in have.items():
            if start not in wanted_starts:
                to_delete.append(record.pk)
                report.days.add(record.day)
        for record in want:
            old = have.get(record.start)
            if old is None:
                to_create.append(record)
                report.days.add(record.day)
            elif any(getattr(old, f) != getattr(record, f) for f in COMPARED):
                record.pk = old.pk
                to_update.append(record)
                report.days.update({old.day, record.day})
            else:
                report.unchanged += 1
    if to_delete:
        UsageRecord.objects.filter(pk__in=to_delete).delete()
    if to_create:
        UsageRecord.objects.bulk_create(to_create)
    if to_update:
        UsageRecord.objects.bulk_update(to_update, [*(f.removesuffix("_id") for f in COMPARED), "metered_at"])
    report.created += len(to_create)
    report.updated += len(to_update)
    report.deleted += len(to_delete)


def hard_stop(allocation: Allocation, *, now: datetime) -> tuple[datetime, str]:
    """Where metering of an allocation stops: its true end; while open, ``now`` — but never after its job
    finished or its device or node disappeared (no usage is billed for a pod that is gone)."""
    if allocation.ended_at is not None and allocation.ended_at <= now:
        candidates = [(allocation.ended_at, UsageRecord.Stop.ENDED)]
    else:
        candidates = [(now, UsageRecord.Stop.OPEN)]
    job = allocation.job
    if job.state in Job.FINAL_STATES and job.finished_at is not None:
        candidates.append((job.finished_at, UsageRecord.Stop.JOB_FINISHED))
    if allocation.device.gone_at is not None:
        candidates.append((allocation.device.gone_at, UsageRecord.Stop.DEVICE_GONE))
    if allocation.device.node.gone_at is not None:
        candidates.append((allocation.device.node.gone_at, UsageRecord.Stop.NODE_GONE))
    # A "gone" time before the allocation began is stale (the node came back); it cannot stop it.
    valid = [(at, why) for at, why in candidates if at >= allocation.started_at] or candidates[:1]
    return min(valid, key=lambda c: c[0])


def _desired(
    allocation: Allocation,
    *,
    unit: Unit,
    borrowed: bool,
    have: dict[datetime, UsageRecord],
    now: datetime,
    tz,
    books,
) -> list[UsageRecord]:
    """The records an allocation should have as of ``now``."""
    stop_at, stop = hard_stop(allocation, now=now)
    if stop == UsageRecord.Stop.OPEN:
        # Two workers with different clocks: never move an open allocation's metering backwards.
        metered = max((r.end for r in have.values() if r.open), default=stop_at)
        stop_at = max(stop_at, metered)
    stop_at = max(stop_at, allocation.started_at)
    final = allocation.ended_at is not None and allocation.ended_at <= now
    job = allocation.job
    flavor_id = allocation.device.node.flavor_id or job.assigned_flavor_id
    book = books[flavor_id]
    pieces = split_interval(allocation.started_at, stop_at, tz=tz, boundaries=book.boundaries(unit))
    records = []
    for n, (start, end) in enumerate(pieces):
        price = book.price(unit, start)
        us = duration_us(start, end)
        last = n == len(pieces) - 1
        records.append(
            UsageRecord(
                allocation_id=allocation.pk,
                start=start,
                end=end,
                duration_us=us,
                day=local_day(start, tz),
                job_id=job.pk,
                team_id=job.team_id,
                user_id=job.owner_id,
                resource_class_id=job.resource_class_id,
                flavor_id=flavor_id,
                resource_name=allocation.device.resource_name,
                unit_kind=unit.kind,
                mig_profile=unit.profile,
                slice_fraction=unit.fraction,
                borrowed=borrowed,
                rate_id=price.rate_id,
                unit_price=price.unit_price,
                currency=price.currency,
                cost=cost_of(us, price.unit_price),
                open=last and stop == UsageRecord.Stop.OPEN,
                final=final,
                stop=stop if last else UsageRecord.Stop.SPLIT,
                source_start=allocation.started_at,
                source_end=allocation.ended_at,
                metered_at=now,
            )
        )
    return records


def _units(allocations: Iterable[Allocation]) -> dict[int, Unit]:
    """The pricing unit of each allocation's device (replica and sibling counts in one query)."""
    allocations = list(allocations)
    parent_ids = {a.device.parent_id for a in allocations if a.device.parent_id}
    children: dict[tuple[int, str], int] = {
        (row["parent_id"], row["kind"]): row["n"]
        for row in Device.objects.filter(parent_id__in=parent_ids).values("parent_id", "kind").annotate(n=Count("pk"))
    }
    units = {}
    for allocation in allocations:
        device = allocation.device
        parent = device.parent
        profile = device.mig_profile or (parent.mig_profile if parent is not None else "")
        product = device.product or (parent.product if parent is not None else "")
        replicas = children.get((parent.pk, Device.Kind.SHARED), 0) if parent is not None else 0
        if not replicas:
            raw = device.node.labels.get("nvidia.com/gpu.replicas") or device.attributes.get("replicas") or 1
            try:
                replicas = max(int(raw), 1)
            except (TypeError, ValueError):
                replicas = 1
        siblings = children.get((parent.pk, Device.Kind.MIG), 1) if parent is not None else 1
        units[allocation.pk] = unit_for(
            kind=device.kind, profile=profile, product=product, replicas=replicas, siblings=siblings
        )
    return units


def _borrowed_flags(allocations: Sequence[Allocation]) -> dict[int, bool]:
    """Whether each newly metered allocation is borrowed capacity, decided as at its admission.

    When the admission says the workload did not borrow, every device is owned. Otherwise the devices
    within the team's nominal quota for that (flavor, resource) — counting what the team already held at
    that instant — are owned and the rest borrowed, in pod order.
    """
    if not allocations:
        return {}
    job_ids = {a.job_id for a in allocations}
    admissions: dict[int, list[tuple[datetime, object]]] = defaultdict(list)
    for event in JobEvent.objects.filter(job_id__in=job_ids, kind=JobEvent.Kind.ADMITTED).order_by("at", "pk"):
        admissions[event.job_id].append((event.at, (event.details or {}).get("borrowing")))
    groups: dict[tuple, list[Allocation]] = defaultdict(list)
    for a in allocations:
        groups[(a.job_id, a.started_at, a.device.node.flavor_id, a.device.resource_name)].append(a)
    flags: dict[int, bool] = {}
    nominals = _nominals({a.job for a in allocations})
    for (job_id, started_at, flavor_id, resource_name), members in groups.items():
        job = members[0].job
        said = [b for at, b in admissions.get(job_id, []) if at <= started_at]
        borrowing = said[-1] if said else (job.borrowing if job.admitted_at and job.admitted_at <= started_at else None)
        members.sort(key=lambda a: (a.pod_index, a.device_id, a.pk))
        if flavor_id is None or borrowing is False:
            # No flavor, no quota line to compare with: trust what the admission said (unknown = owned).
            flags.update({a.pk: bool(borrowing) for a in members})
            continue
        nominal = nominals.get((job.team_id, job.cluster_id, flavor_id, resource_name), Decimal(0))
        held = (
            Allocation.objects.filter(
                job__team_id=job.team_id,
                device__node__flavor_id=flavor_id,
                device__resource_name=resource_name,
            )
            .exclude(job_id=job_id)
            .filter(Q(started_at__lt=started_at) | Q(started_at=started_at, job_id__lt=job_id))
            .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=started_at))
            .count()
        )
        owned = max(int(nominal) - held, 0)
        flags.update({a.pk: n >= owned for n, a in enumerate(members)})
    return flags


def _nominals(jobs: Iterable[Job]) -> dict[tuple[int, int, int, str], Decimal]:
    """Nominal quota per (team, cluster, flavor, resource) for the teams of the given jobs."""
    team_ids = {j.team_id for j in jobs}
    out: dict[tuple[int, int, int, str], Decimal] = {}
    lines = QuotaLine.objects.filter(team_quota__team_id__in=team_ids).values(
        "team_quota__team_id", "team_quota__cluster_id", "flavor_id", "resource_name", "nominal"
    )
    for line in lines:
        try:
            nominal = parse_decimal(line["nominal"])
        except ValueError:
            continue
        key = (line["team_quota__team_id"], line["team_quota__cluster_id"], line["flavor_id"], line["resource_name"])
        out[key] = nominal
    return out
