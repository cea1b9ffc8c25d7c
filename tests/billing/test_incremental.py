"""Incremental metering: a run's work follows the changes since the last runs, not the history; the daily
full sweep heals what an incremental run cannot see."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Sum

from billing import services
from billing.models import MeteringCursor, UsageRecord
from billing.services.metering import CURSOR_LAG
from pools.models import Allocation
from tests.billing.conftest import T0, H, allocation_us, run_job

pytestmark = pytest.mark.django_db


def billed_us() -> int:
    return UsageRecord.objects.aggregate(t=Sum("duration_us"))["t"] or 0


def test_incremental_run_looks_only_at_open_unfinished_and_new_allocations(world):
    for n in range(30):
        run_job(world, devices=1, start=T0 + n * timedelta(minutes=10), end=T0 + n * timedelta(minutes=10) + H)
    running = run_job(world, devices=2, start=T0 + 6 * H)
    first = services.metering_sync(now=T0 + 7 * H)
    assert first.allocations == 32
    second = services.metering_sync(now=T0 + 8 * H)
    assert second.allocations == 2  # only the open ones: 30 closed allocations are not read again
    # Closing the running job: its allocations (records not final yet) are revisited once.
    from queues import services as job_services

    job_services.job_finish(running, state="succeeded", now=T0 + 8 * H + timedelta(minutes=30), message="done")
    third = services.metering_sync(now=T0 + 9 * H)
    assert third.allocations == 2
    assert services.metering_sync(now=T0 + 10 * H).allocations == 0
    assert billed_us() == allocation_us(Allocation.objects.all(), T0 - H, T0 + 11 * H)


def test_allocations_recorded_after_the_fact_are_found_by_the_next_run(world):
    run_job(world, devices=1, start=T0, end=T0 + H)
    services.metering_sync(now=T0 + 2 * H)
    services.metering_sync(now=T0 + 2 * H + 2 * CURSOR_LAG)  # the cursor moves past the first allocation
    assert MeteringCursor.objects.get().checked_allocation_id >= Allocation.objects.get().pk
    # The portal was down: a job that started and ended meanwhile is recorded late, with its cluster times.
    run_job(world, devices=2, start=T0 + 3 * H, end=T0 + 4 * H)
    report = services.metering_sync(now=T0 + 6 * H)
    assert report.allocations == 2
    assert billed_us() == allocation_us(Allocation.objects.all(), T0, T0 + 6 * H)


def test_full_sweep_heals_an_allocation_below_the_cursor(world):
    run_job(world, devices=1, start=T0, end=T0 + H)
    services.metering_sync(now=T0 + 2 * H)
    # An insert whose transaction stayed open past the cursor's lag (simulated by moving the cursor on).
    late = run_job(world, devices=1, start=T0 + H, end=T0 + 2 * H)
    MeteringCursor.objects.update(checked_allocation_id=late.allocations.get().pk)
    assert services.metering_sync(now=T0 + 3 * H).allocations == 0
    assert not UsageRecord.objects.filter(job=late).exists()
    report = services.metering_sync(now=T0 + 3 * H, full=True)
    assert report.full
    assert report.created == 1
    assert billed_us() == allocation_us(Allocation.objects.all(), T0, T0 + 3 * H)
    assert MeteringCursor.objects.get().full_sweep_at == T0 + 3 * H
    assert services.metering_sync(now=T0 + 3 * H, full=True).changed == 0


def test_an_allocation_stamped_after_now_is_not_skipped_by_the_cursor(world):
    # A worker whose clock lags runs before an allocation it sees as starting in the future.
    future = run_job(world, devices=1, start=T0 + 5 * H, end=T0 + 6 * H)
    services.metering_sync(now=T0)
    services.metering_sync(now=T0 + CURSOR_LAG * 2)
    assert MeteringCursor.objects.get().checked_allocation_id < future.allocations.get().pk
    services.metering_sync(now=T0 + 7 * H)
    assert billed_us() == 3600 * 10**6
