"""Shared helpers of the billing services: billing time zone, default currency, the serialising lock."""

from __future__ import annotations

from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction

from billing.models import BillingLock
from kernel.errors import ValidationFailed

#: The lock every metering run and rollup takes, so workers never interleave their writes.
METERING_LOCK = "metering"


def billing_tz() -> tzinfo:
    """Time zone whose midnights cut billing days (``BILLING_TIME_ZONE``, else ``TIME_ZONE``)."""
    return ZoneInfo(settings.BILLING_TIME_ZONE or settings.TIME_ZONE)


def default_currency() -> str:
    """Currency of rates that name none, and of usage that no rate prices (``BILLING_CURRENCY``)."""
    return (settings.BILLING_CURRENCY or "EUR").upper()


def require_aware(when: datetime, field: str) -> datetime:
    """Refuse naive datetimes: billing compares instants across time zones."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValidationFailed({field: [f"{when.isoformat()} has no time zone; give a timezone-aware time"]})
    return when


def take_lock(name: str) -> None:
    """Lock the named row until the current transaction ends (creating it first if needed).

    Precondition: inside ``transaction.atomic``. On PostgreSQL this is ``SELECT … FOR UPDATE``, which makes
    a concurrent worker wait and then see everything the first one committed; SQLite serialises writers.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("take_lock needs an open transaction")
    BillingLock.objects.bulk_create([BillingLock(name=name)], ignore_conflicts=True)
    BillingLock.objects.select_for_update().get(name=name)
