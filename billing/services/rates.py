"""Writes of rates: one validation path for the admin and scripts; history is re-priced by the next sync."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.db.models import Q

from billing.models import Rate, UsageRecord
from billing.pricing import mig_share
from billing.services.common import default_currency, require_aware
from kernel.errors import ValidationFailed
from pools.models import ResourceFlavor


def _errors(
    *, kind: str, mig_profile: str, price: Decimal, currency: str, start: datetime, end: datetime | None
) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if kind not in Rate.Kind.values:
        errors["kind"] = [f"{kind!r} is not one of {', '.join(Rate.Kind.values)}"]
    if kind == Rate.Kind.FULL and mig_profile:
        errors["mig_profile"] = ["a full-card rate has no MIG profile"]
    if kind == Rate.Kind.MIG and not mig_share(mig_profile):
        errors["mig_profile"] = [f"{mig_profile!r} is not a MIG profile such as 1g.10gb"]
    if price < 0:
        errors["price_per_hour"] = ["a price cannot be negative"]
    if len(currency) != 3 or not currency.isalpha():
        errors["currency"] = [f"{currency!r} is not a three-letter currency code such as EUR"]
    if end is not None and end <= start:
        errors["effective_to"] = ["must be after effective_from"]
    return errors


def rate_errors(
    *,
    flavor: ResourceFlavor,
    price_per_hour: Decimal | str | int | None,
    effective_from: datetime | None,
    effective_to: datetime | None = None,
    kind: str = Rate.Kind.FULL,
    mig_profile: str = "",
    currency: str = "",
    rate: Rate | None = None,
) -> dict[str, list[str]]:
    """Every problem with a rate, keyed by field (the admin form shows them; ``rate_set`` refuses them)."""
    if effective_from is None:
        return {"effective_from": ["give the time the rate comes into force"]}
    for name, value in (("effective_from", effective_from), ("effective_to", effective_to)):
        if value is not None and (value.tzinfo is None or value.utcoffset() is None):
            return {name: [f"{value.isoformat()} has no time zone; give a timezone-aware time"]}
    try:
        price = Decimal(str(price_per_hour))
    except InvalidOperation:
        return {"price_per_hour": [f"{price_per_hour!r} is not a number"]}
    currency = (currency or default_currency()).upper()
    errors = _errors(
        kind=kind, mig_profile=mig_profile.strip(), price=price, currency=currency, start=effective_from,
        end=effective_to,
    )  # fmt: skip
    if errors:
        return errors
    for other in _overlapping(
        flavor=flavor, kind=kind, mig_profile=mig_profile.strip(), start=effective_from, end=effective_to, rate=rate
    ):
        if not (other.effective_to is None and other.effective_from < effective_from):
            return {
                "effective_from": [f"overlaps the rate in force from {other.effective_from:%Y-%m-%d %H:%M} ({other})"]
            }
    return {}


def _overlapping(*, flavor, kind, mig_profile, start, end, rate, lock: bool = False) -> list[Rate]:
    """Rates of the same key whose period overlaps [start, end), in pk order (locked when asked)."""
    same_key = Rate.objects.filter(flavor=flavor, kind=kind, mig_profile=mig_profile)
    if lock:
        same_key = same_key.select_for_update()
    if rate is not None and rate.pk is not None:
        same_key = same_key.exclude(pk=rate.pk)
    overlap = Q(effective_to__isnull=True) | Q(effective_to__gt=start)
    if end is not None:
        overlap &= Q(effective_from__lt=end)
    return list(same_key.filter(overlap).order_by("pk"))


@transaction.atomic
def rate_set(
    *,
    flavor: ResourceFlavor,
    price_per_hour: Decimal | str | int,
    effective_from: datetime,
    effective_to: datetime | None = None,
    kind: str = Rate.Kind.FULL,
    mig_profile: str = "",
    currency: str = "",
    note: str = "",
    rate: Rate | None = None,
) -> Rate:
    """Create (or, given ``rate``, change) a rate; an open rate of the same key that began earlier is closed
    where the new one starts; any other overlap is refused. Usage in the affected periods is re-priced by the
    next ``metering_sync``."""
    require_aware(effective_from, "effective_from")
    if effective_to is not None:
        require_aware(effective_to, "effective_to")
    mig_profile = mig_profile.strip()
    currency = (currency or default_currency()).upper()
    # Lock the key's rates first, then check: two admins saving at once cannot both pass the overlap check.
    overlapping = _overlapping(
        flavor=flavor, kind=kind, mig_profile=mig_profile, start=effective_from, end=effective_to, rate=rate, lock=True
    )
    errors = rate_errors(
        flavor=flavor, price_per_hour=price_per_hour, effective_from=effective_from, effective_to=effective_to,
        kind=kind, mig_profile=mig_profile, currency=currency, rate=rate,
    )  # fmt: skip
    if errors:
        raise ValidationFailed(errors)
    repriced = [(effective_from, effective_to)]
    for other in overlapping:  # only open rates that began earlier are left: a rate change closes them
        other.effective_to = effective_from
        other.save(update_fields=["effective_to"])
    if rate is not None and rate.pk is not None:
        old = Rate.objects.get(pk=rate.pk)
        repriced.append((old.effective_from, old.effective_to))
    else:
        rate = Rate(flavor=flavor, kind=kind, mig_profile=mig_profile)
    rate.price_per_hour = Decimal(str(price_per_hour))
    rate.currency = currency
    rate.effective_from = effective_from
    rate.effective_to = effective_to
    rate.note = note
    rate.save()
    _mark_for_repricing(flavor=flavor, periods=repriced)
    return rate


def _mark_for_repricing(*, flavor: ResourceFlavor, periods: list[tuple[datetime, datetime | None]]) -> int:
    """Make the next metering run recompute the flavor's usage overlapping the given periods."""
    overlap = Q()
    for start, end in periods:
        overlap |= Q(end__gt=start) & (Q() if end is None else Q(start__lt=end))
    return UsageRecord.objects.filter(overlap, flavor=flavor, final=True).update(final=False)
