"""Pure pricing rules (no database): what share of a card a unit is, which rate is in force, and how an
interval of device time splits at billing-day and rate boundaries.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from decimal import ROUND_HALF_EVEN, Decimal

#: Compute slices of a MIG-capable card, by product name fragment; 7 for A100 / H100 / H200 / B200.
MIG_SLICES_BY_PRODUCT = (("A30", 4),)
DEFAULT_MIG_SLICES = 7
_MIG_COMPUTE = re.compile(r"^(?P<g>\d+)g\.")
US_PER_HOUR = 3_600_000_000
COST_PLACES = Decimal("0.00000001")
PRICE_PLACES = Decimal("0.0000000001")


@dataclass(frozen=True)
class Unit:
    """What one allocation holds, for pricing: its kind, MIG profile and share of a full card (num/den)."""

    kind: str  # full | mig | shared
    profile: str = ""
    num: int = 1
    den: int = 1

    @property
    def fraction(self) -> Decimal:
        """Share of a full card as a Decimal (1/7 → 0.1428571429)."""
        return (Decimal(self.num) / Decimal(self.den)).quantize(PRICE_PLACES)


def mig_slices(product: str) -> int:
    """Compute slices of the card a MIG instance lives on."""
    for fragment, slices in MIG_SLICES_BY_PRODUCT:
        if fragment in (product or ""):
            return slices
    return DEFAULT_MIG_SLICES


def mig_share(profile: str, product: str = "") -> tuple[int, int] | None:
    """Share of the card a MIG profile takes, by compute slices: ``1g.10gb`` on an A100 → (1, 7)."""
    match = _MIG_COMPUTE.match(profile or "")
    if not match:
        return None
    slices = mig_slices(product)
    return min(int(match["g"]), slices), slices


def unit_for(*, kind: str, profile: str = "", product: str = "", replicas: int = 1, siblings: int = 1) -> Unit:
    """The pricing unit of a device: a full card; a MIG slice (g / slices of the card, else 1 / ``siblings``);
    a time-shared replica (1 / ``replicas`` of the card, or of the MIG slice it shares)."""
    if kind == "mig":
        num, den = mig_share(profile, product) or (1, max(siblings, 1))
        return Unit("mig", profile, num, den)
    if kind == "shared":
        num, den = mig_share(profile, product) or (1, 1)
        return Unit("shared", profile, num, den * max(replicas, 1))
    return Unit("full", "", 1, 1)


@dataclass(frozen=True)
class RatePeriod:
    """A rate in force from ``start`` (inclusive) to ``end`` (exclusive, None = open)."""

    rate_id: int
    kind: str
    profile: str
    price: Decimal
    currency: str
    start: datetime
    end: datetime | None

    def covers(self, when: datetime) -> bool:
        """Whether the rate is in force at ``when``."""
        return self.start <= when and (self.end is None or when < self.end)


@dataclass(frozen=True)
class Price:
    """The price of one hour of a unit at some instant, and the rate it came from (None: no rate)."""

    rate_id: int | None
    unit_price: Decimal
    currency: str


class RateBook:
    """The rates of one flavor, answering "what does an hour of this unit cost at this instant"."""

    def __init__(self, periods: Iterable[RatePeriod], *, default_currency: str) -> None:
        self.default_currency = default_currency
        self._by_key: dict[tuple[str, str], list[RatePeriod]] = {}
        for period in sorted(periods, key=lambda p: p.start):
            self._by_key.setdefault((period.kind, period.profile), []).append(period)

    def _in_force(self, key: tuple[str, str], when: datetime) -> RatePeriod | None:
        periods = self._by_key.get(key, [])
        i = bisect_right([p.start for p in periods], when) - 1
        if i >= 0 and periods[i].covers(when):
            return periods[i]
        return None

    def price(self, unit: Unit, when: datetime) -> Price:
        """The unit's own rate if one is in force, else its share of the full-card rate, else zero."""
        if unit.kind != "full":
            own = self._in_force((unit.kind, unit.profile), when)
            if own is not None:
                return Price(own.rate_id, own.price.quantize(PRICE_PLACES), own.currency)
        card = self._in_force(("full", ""), when)
        if card is None:
            return Price(None, Decimal(0).quantize(PRICE_PLACES), self.default_currency)
        share = (card.price * unit.num / unit.den).quantize(PRICE_PLACES, rounding=ROUND_HALF_EVEN)
        return Price(card.rate_id, share, card.currency)

    def boundaries(self, unit: Unit) -> list[datetime]:
        """Every instant at which the price of ``unit`` may change."""
        keys = [("full", "")] + ([(unit.kind, unit.profile)] if unit.kind != "full" else [])
        points: set[datetime] = set()
        for key in keys:
            for period in self._by_key.get(key, []):
                points.add(period.start)
                if period.end is not None:
                    points.add(period.end)
        return sorted(points)


def day_start(day: date, tz: tzinfo) -> datetime:
    """Midnight starting ``day`` in the billing time zone, as a UTC instant (so arithmetic is exact across DST)."""
    return datetime.combine(day, time.min, tzinfo=tz).astimezone(UTC)


def day_bounds(day: date, tz: tzinfo) -> tuple[datetime, datetime]:
    """[start, end) of a billing day."""
    return day_start(day, tz), day_start(day + timedelta(days=1), tz)


def local_day(when: datetime, tz: tzinfo) -> date:
    """The billing day an instant falls in."""
    return when.astimezone(tz).date()


def split_interval(
    start: datetime, end: datetime, *, tz: tzinfo, boundaries: Sequence[datetime] = ()
) -> list[tuple[datetime, datetime]]:
    """Cut [start, end) at every billing-day midnight and every given boundary inside it.

    An empty interval (start == end) gives one empty piece, so that every allocation has a record.
    """
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if end <= start:
        return [(start, start)]
    cuts: set[datetime] = {b for b in boundaries if start < b < end}
    midnight = day_start(local_day(start, tz) + timedelta(days=1), tz)
    while midnight < end:
        cuts.add(midnight)
        midnight = day_start(local_day(midnight, tz) + timedelta(days=1), tz)
    points = [start, *sorted(cuts), end]
    return list(itertools.pairwise(points))


def duration_us(start: datetime, end: datetime) -> int:
    """Whole microseconds in [start, end); instants are compared in UTC (wall-clock arithmetic is wrong across DST)."""
    delta = end.astimezone(UTC) - start.astimezone(UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def cost_of(us: int, unit_price: Decimal) -> Decimal:
    """Cost of ``us`` microseconds at ``unit_price`` per hour."""
    return (Decimal(us) * unit_price / US_PER_HOUR).quantize(COST_PLACES, rounding=ROUND_HALF_EVEN)


def hours(us: int | None) -> Decimal:
    """Microseconds as Decimal hours (to the microsecond)."""
    return (Decimal(us or 0) / US_PER_HOUR).quantize(Decimal("0.000001"))


def overlap_us(start: datetime, end: datetime, lo: datetime, hi: datetime) -> int:
    """Microseconds of [start, end) inside [lo, hi)."""
    a, b = max(start, lo), min(end, hi)
    return duration_us(a, b) if b > a else 0
