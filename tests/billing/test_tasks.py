"""Billing tasks: explicitly named, thin (each calls one service), runnable eagerly."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing import tasks
from billing.models import RollupDay, UsageRecord
from tests.billing.conftest import run_job

pytestmark = pytest.mark.django_db


def test_task_names_are_explicit():
    assert tasks.metering_sync.name == "billing.metering_sync"
    assert tasks.usage_rollup_pending.name == "billing.usage_rollup_pending"
    assert tasks.usage_rollup_day.name == "billing.usage_rollup_day"
    assert tasks.budgets_check.name == "billing.budgets_check"


def test_tasks_run_the_services(world):
    now = timezone.now()
    # An hour yesterday at midday: one usage record whatever the time the test runs (a run across midnight
    # is two records, one per billing day).
    noon = (now - timedelta(days=1)).replace(hour=12, minute=0, second=0, microsecond=0)
    run_job(world, devices=1, start=noon - timedelta(hours=2), end=noon - timedelta(hours=1))
    tasks.metering_sync.delay()
    assert UsageRecord.objects.count() == 1
    tasks.usage_rollup_pending.delay()
    assert not RollupDay.objects.filter(dirty=True).exists()
    tasks.usage_rollup_day.delay((now - timedelta(days=2)).date().isoformat())
    assert RollupDay.objects.filter(day=(now - timedelta(days=2)).date(), complete=True).exists()
    tasks.budgets_check.delay()


def test_beat_schedule_runs_every_billing_task_with_an_expiry(settings):
    entries = {e["task"]: e for e in settings.CELERY_BEAT_SCHEDULE.values()}
    for name in (
        "billing.metering_sync",
        "billing.metering_full_sweep",
        "billing.usage_rollup_pending",
        "billing.usage_rollup_day",
        "billing.budgets_check",
    ):
        assert name in entries, name
        assert entries[name]["options"]["expires"] > 0
    assert entries["billing.metering_sync"]["schedule"] == 300
    assert entries["billing.budgets_check"]["schedule"] == 900
    assert tasks.metering_full_sweep.name == "billing.metering_full_sweep"
