"""What reservations cost their teams: every reserved device-hour is charged whether used or not.

The hours the team's jobs used on the reserved hardware inside the window (at most the reserved count at a time) are
already charged as usage; the rest — the unused reservation — is charged here at the flavor's full-card rate in force
when the window (or the part of it in the report) starts. Read from the reservations and the allocations (a report
holds few reservations), cut at the report's periods so that each period's charge adds up to the total.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from django.db.models import Q

from billing.pricing import US_PER_HOUR, cost_of, day_start, unit_for
from billing.services.common import billing_tz
from billing.services.metering import rate_books
from queues.models import Reservation, Team
from queues.reservations.holds import HOLDING_STATES, charged_window
from queues.reservations.selectors import capped_use, held_intervals

Money = dict[str, Decimal]


@dataclass
class ReservationUse:
    """Reserved and used device time (µs) of reservations over some span, and the price of the unused part."""

    reserved_us: int = 0
    used_us: int = 0
    unused_cost: Money = field(default_factory=dict)

    def add(self, other: ReservationUse) -> None:
        """Accumulate another part."""
        self.reserved_us += other.reserved_us
        self.used_us += other.used_us
        for currency, amount in other.unused_cost.items():
            self.unused_cost[currency] = self.unused_cost.get(currency, Decimal(0)) + amount

    @property
    def unused_us(self) -> int:
        """Reserved and not used."""
        return max(self.reserved_us - self.used_us, 0)

    @property
    def reserved_hours(self) -> Decimal:
        """Device-hours reserved."""
        return Decimal(self.reserved_us) / US_PER_HOUR

    @property
    def used_hours(self) -> Decimal:
        """Device-hours of the reservation the team's jobs used."""
        return Decimal(self.used_us) / US_PER_HOUR

    @property
    def unused_hours(self) -> Decimal:
        """Device-hours reserved and not used (charged as the unused reservation)."""
        return Decimal(self.unused_us) / US_PER_HOUR


@dataclass
class ReservationLine:
    """One reservation's part of a report: its window clipped to the report, and its use there."""

    reservation: Reservation
    start: datetime
    end: datetime
    use: ReservationUse


@dataclass
class ReservationCharges:
    """The reservations of a report: one line each, the use per period (keyed like the report's periods), the total."""

    lines: list[ReservationLine] = field(default_factory=list)
    by_period: dict[date, ReservationUse] = field(default_factory=dict)
    total: ReservationUse = field(default_factory=ReservationUse)

    def period(self, start: date) -> ReservationUse:
        """The use of the period starting ``start`` (zero when none)."""
        return self.by_period.get(start, ReservationUse())


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def reservation_charges(
    *, teams: Iterable[Team] | None, start: date, end: date, periods: list[date], now: datetime
) -> ReservationCharges:
    """The reservations of ``teams`` (None: every team) charged over [start, end] (inclusive billing days, up to
    ``now``), each cut at the ``periods`` (their first days, ascending)."""
    tz = billing_tz()
    span = (day_start(start, tz), min(_day_after(end, tz), now))
    if span[1] <= span[0]:
        return ReservationCharges()
    rows = Reservation.objects.filter(state__in=HOLDING_STATES, decided_at__isnull=False)
    rows = rows.filter(starts_at__lt=span[1], ends_at__gt=span[0]).filter(
        Q(cancelled_at__isnull=True) | Q(cancelled_at__gt=span[0])
    )
    if teams is not None:
        rows = rows.filter(team__in=list(teams))
    reservations = list(rows.select_related("team", "flavor", "resource_class").order_by("starts_at", "pk"))
    out = ReservationCharges()
    if not reservations:
        return out
    books = rate_books()
    edges = [day_start(p, tz) for p in periods] + [span[1]]
    for r in reservations:
        window = charged_window(r)
        if window is None:
            continue
        a, b = max(window[0], span[0]), min(window[1], span[1])
        if a >= b:
            continue
        price = books[r.flavor_id].price(unit_for(kind="full"), a)
        intervals = held_intervals(r, start=a, end=b)
        line = ReservationLine(reservation=r, start=a, end=b, use=ReservationUse())
        for i, period in enumerate(periods):
            pa, pb = max(a, edges[i]), min(b, edges[i + 1])
            if pa >= pb:
                continue
            part = ReservationUse(
                reserved_us=_us(r.count * (pb - pa).total_seconds()),
                used_us=_us(capped_use(intervals, count=r.count, start=pa, end=pb)),
            )
            if part.unused_us:
                part.unused_cost = {price.currency: cost_of(part.unused_us, price.unit_price)}
            line.use.add(part)
            out.by_period.setdefault(period, ReservationUse()).add(part)
        out.lines.append(line)
        out.total.add(line.use)
    return out


def _day_after(day: date, tz) -> datetime:
    """Midnight ending ``day``."""
    return day_start(date.fromordinal(day.toordinal() + 1), tz)
