"""Celery tasks of billing: thin, named, idempotent; each calls one service (beat entries: docs/billing.md)."""

from __future__ import annotations

from datetime import date, timedelta

from celery import shared_task
from django.utils import timezone

from billing import services
from billing.pricing import local_day
from billing.services.common import billing_tz
from kernel.tasks import DB_RETRY


@shared_task(name="billing.metering_sync", ignore_result=True, acks_late=True, **DB_RETRY)
def metering_sync() -> None:
    """Meter every open or changed allocation up to now."""
    services.metering_sync(now=timezone.now())


@shared_task(name="billing.usage_rollup_pending", ignore_result=True, acks_late=True, **DB_RETRY)
def usage_rollup_pending() -> None:
    """Re-roll today and every day metering changed (or that was rolled before it ended)."""
    services.usage_rollup_pending(now=timezone.now())


@shared_task(name="billing.usage_rollup_day", ignore_result=True, acks_late=True, **DB_RETRY)
def usage_rollup_day(day: str | None = None) -> None:
    """Roll up one day (ISO date; default: yesterday in the billing time zone)."""
    now = timezone.now()
    target = date.fromisoformat(day) if day else local_day(now, billing_tz()) - timedelta(days=1)
    services.usage_rollup(day=target, now=now)


@shared_task(name="billing.budgets_check", ignore_result=True, acks_late=True, **DB_RETRY)
def budgets_check() -> None:
    """Notify budget thresholds crossed in the current period (each once) and apply demotions at 100 %."""
    services.budget_check(now=timezone.now())


@shared_task(name="billing.metering_full_sweep", ignore_result=True, acks_late=True, **DB_RETRY)
def metering_full_sweep() -> None:
    """Re-check every allocation ever recorded (the daily reconcile that heals what incremental runs missed)."""
    services.metering_sync(now=timezone.now(), full=True)


@shared_task(name="billing.reservation_unused_notices", ignore_result=True, acks_late=True, **DB_RETRY)
def reservation_unused_notices() -> None:
    """Tell the leads of each team whose reservation ended (yesterday or a few days before) how much went unused."""
    services.reservation_unused_notices(now=timezone.now())
