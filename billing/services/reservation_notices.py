"""The day after a reservation's window ends, its team's leads hear how much of it went unused and what that cost."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import Notification
from billing.pricing import US_PER_HOUR, cost_of, day_start, local_day, unit_for
from billing.services.budgets import lead_emails, lead_ids
from billing.services.common import billing_tz, require_aware
from billing.services.metering import rate_books
from kernel.labels import duration_short
from notify.record import reservation_unused_record
from queues.models import Reservation
from queues.reservations.holds import HOLDING_STATES, charged_window
from queues.reservations.selectors import window_use

#: Windows that ended this long before today are no longer reported (a worker that was down catches up to this).
LOOK_BACK = timedelta(days=7)
#: Less unused than this share of the reservation is not worth a notice.
MIN_UNUSED_SHARE = Decimal("0.01")


@dataclass(frozen=True)
class UnusedNotice:
    """A reservation reported as (partly) unused."""

    reservation: Reservation
    notification: Notification
    unused_hours: Decimal


def reservation_unused_notices(*, now: datetime, mail: bool = True) -> list[UnusedNotice]:
    """Report every reservation whose window ended before today (billing day) and within ``LOOK_BACK`` with an
    unused part: a notice on the team's cost page and a message to its leads, once per reservation."""
    require_aware(now, "now")
    tz = billing_tz()
    today = day_start(local_day(now, tz), tz)
    rows = Reservation.objects.filter(
        state__in=HOLDING_STATES, decided_at__isnull=False, starts_at__lt=today, ends_at__gte=today - LOOK_BACK
    ).exclude(billing_notifications__kind=Notification.Kind.RESERVATION_UNUSED)
    done = []
    for r in rows.select_related("team", "flavor").order_by("ends_at", "pk"):
        window = charged_window(r)
        if window is None or not today - LOOK_BACK <= window[1] < today:
            continue
        notice = _notify_unused(reservation=r, now=now, mail=mail)
        if notice is not None:
            done.append(notice)
    return done


def _notify_unused(*, reservation: Reservation, now: datetime, mail: bool) -> UnusedNotice | None:
    """Record and send the notice of one reservation (None: used in full, or already reported by another worker)."""
    use = window_use(reservation, now=now)
    if use is None or not use.reserved_seconds:
        return None
    unused = Decimal(use.unused_seconds) / 3600
    if Decimal(use.unused_seconds) < MIN_UNUSED_SHARE * Decimal(use.reserved_seconds):
        return None
    r = reservation
    price = rate_books()[r.flavor_id].price(unit_for(kind="full"), r.starts_at)
    cost = cost_of(round(use.unused_seconds * US_PER_HOUR / 3600), price.unit_price)
    start, end = timezone.localtime(r.starts_at), timezone.localtime(r.window_end)
    title = f"{r.team.name}: reservation #{r.pk} went {100 * use.unused_seconds / use.reserved_seconds:.0f} % unused"
    message = (
        f"Reservation #{r.pk} of {r.count} {r.flavor.label} for {r.team.name} ({r.purpose}), {start:%a %d %b %H:%M} "
        f"to {end:%a %d %b %H:%M %Z}: {unused:.1f} of {Decimal(use.reserved_seconds) / 3600:.1f} device-hours "
        f"were not used ({duration_short(use.unused_seconds / r.count)} per device on average). Reserved hours are "
        f"charged whether used or not: the unused part costs {cost:.2f} {price.currency}."
    )
    recipients = lead_emails(r.team) if mail else []
    try:
        with transaction.atomic():
            notification = Notification.objects.create(
                team=r.team,
                kind=Notification.Kind.RESERVATION_UNUSED,
                reservation=r,
                spent=cost.quantize(Decimal("0.01")),
                message=message,
                created_at=now,
                emailed_to=recipients,
            )
            if mail:
                reservation_unused_record(
                    notification_id=notification.pk,
                    team=r.team,
                    lead_ids=lead_ids(r.team),
                    title=title,
                    message=message,
                    at=now,
                )
    except IntegrityError:  # another worker reported it first
        return None
    return UnusedNotice(reservation=r, notification=notification, unused_hours=unused)
