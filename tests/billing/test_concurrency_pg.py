"""Concurrency on PostgreSQL: workers metering, rolling up and checking budgets at the same time count once.

Each thread has its own database connection (Django's are per thread), so these are real concurrent
transactions: the lock row and the unique keys are what keep the totals exact.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection
from django.db.models import Count, Sum

from billing import services
from billing.models import Notification, UsageDaily, UsageRecord
from billing.services import metering
from notify.models import Event as NotifyEvent
from pools.models import Allocation
from tests.billing.conftest import T0, H, allocation_us, make_world, run_job

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WORKERS = 6


def in_threads(*targets) -> list[BaseException]:
    """Start every target at the same instant, each in its own thread and connection; return their errors."""
    barrier = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def run(target):
        try:
            barrier.wait()
            target()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return errors


def build_usage():
    world = make_world()
    for i in range(6):
        run_job(world, devices=1, start=T0 + i * timedelta(minutes=7), end=T0 + 3 * H + timedelta(seconds=i))
    run_job(world, team=world.other, owner=world.carol, devices=2, start=T0 + H)  # still running
    return world


def assert_exact(now) -> None:
    assert UsageRecord.objects.aggregate(t=Sum("duration_us"))["t"] == allocation_us(Allocation.objects.all(), T0, now)
    duplicates = UsageRecord.objects.values("allocation_id", "start").annotate(n=Count("pk")).filter(n__gt=1)
    assert not duplicates.exists()


def test_concurrent_metering_workers_count_every_second_once():
    build_usage()
    now = T0 + 4 * H
    errors = in_threads(*[lambda: services.metering_sync(now=now)] * WORKERS)
    assert errors == []
    assert_exact(now)
    assert UsageRecord.objects.count() == Allocation.objects.count()


def test_concurrent_metering_with_a_worker_that_dies_mid_run():
    build_usage()
    now = T0 + 4 * H
    real = metering._meter_batch
    dying_thread = {}

    def dying(*args, **kwargs):
        real(*args, **kwargs)  # writes, then dies before commit
        if threading.get_ident() == dying_thread.get("id"):
            raise RuntimeError("worker killed")

    def doomed():
        dying_thread["id"] = threading.get_ident()
        services.metering_sync(now=now)

    metering._meter_batch = dying
    try:
        errors = in_threads(doomed, *[lambda: services.metering_sync(now=now)] * (WORKERS - 1))
    finally:
        metering._meter_batch = real
    assert len(errors) == 1
    assert "worker killed" in str(errors[0])
    assert_exact(now)
    services.metering_sync(now=now)  # the rerun after the crash changes nothing
    assert_exact(now)


def test_concurrent_rollups_and_metering_do_not_double_count():
    build_usage()
    now = T0 + 5 * H
    services.metering_sync(now=now)
    errors = in_threads(
        *[lambda: services.usage_rollup(day=T0.date(), now=now)] * 3,
        *[lambda: services.metering_sync(now=now)] * 3,
    )
    assert errors == []
    services.usage_rollup(day=T0.date(), now=now)
    rolled = UsageDaily.objects.aggregate(t=Sum("owned_us") + Sum("borrowed_us"))["t"]
    assert rolled == allocation_us(Allocation.objects.all(), T0, now)


def test_concurrent_budget_checks_notify_each_threshold_once():
    world = build_usage()
    services.metering_sync(now=T0 + 4 * H)
    services.budget_set(team=world.team, amount="20", thresholds=[50, 80, 100])  # spent: ~36 EUR
    mail.outbox = []
    errors = in_threads(*[lambda: services.budget_check(now=T0 + 4 * H)] * WORKERS)
    assert errors == []
    assert sorted(Notification.objects.filter(kind="budget_threshold").values_list("threshold", flat=True)) == [
        50,
        80,
        100,
    ]
    # each threshold is told to the lead once (one outbox row per threshold, whichever worker recorded it)
    assert NotifyEvent.objects.filter(kind="budget").count() == 3
    assert mail.outbox == []  # nothing is mailed inside the check: the outbox's delivery sends it


def test_an_allocation_committed_after_a_metering_run_is_still_metered():
    """A worker's transaction takes an allocation id, a later insert commits first and is metered, the cursor
    moves past both ids; the late commit is still found by the next run (the cursor lags one interval)."""
    from django.db import transaction

    from billing.models import MeteringCursor
    from billing.services.metering import CURSOR_LAG

    world = build_usage()
    t = T0 + 4 * H
    services.metering_sync(now=t)
    services.metering_sync(now=t + 2 * CURSOR_LAG)
    inserted, release, late = threading.Event(), threading.Event(), {}

    def slow_writer():
        with transaction.atomic():
            job = run_job(world, devices=world.free(6)[-1:], start=T0 + H, end=T0 + 2 * H)  # not the quick one's
            late["pk"] = job.allocations.get().pk
            inserted.set()
            assert release.wait(30)

    writer = threading.Thread(target=lambda: (slow_writer(), connection.close()))
    writer.start()
    try:
        assert inserted.wait(30)
        quick = run_job(world, team=world.other, owner=world.carol, devices=1, start=T0, end=T0 + H)
        assert quick.allocations.get().pk > late["pk"]
        services.metering_sync(now=t + 4 * CURSOR_LAG)  # sees the quick one only
        assert UsageRecord.objects.filter(job=quick).exists()
    finally:
        release.set()
        writer.join(30)
    assert not UsageRecord.objects.filter(allocation_id=late["pk"]).exists()
    assert MeteringCursor.objects.get().seen_allocation_id >= quick.allocations.get().pk
    report = services.metering_sync(now=t + 6 * CURSOR_LAG)
    assert report.created >= 1
    assert UsageRecord.objects.filter(allocation_id=late["pk"]).exists()
    assert MeteringCursor.objects.get().checked_allocation_id > late["pk"]
    closed = Allocation.objects.exclude(ended_at__isnull=True)
    assert UsageRecord.objects.filter(final=True).aggregate(t=Sum("duration_us"))["t"] == allocation_us(
        closed, T0, t + 6 * CURSOR_LAG
    )
