"""Pure pricing rules: slice shares, rate books, splitting intervals at midnights and rate changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from billing.pricing import RateBook, RatePeriod, Unit, cost_of, duration_us, split_interval, unit_for

JAN = datetime(2026, 1, 1, tzinfo=UTC)


def book(*periods: RatePeriod) -> RateBook:
    return RateBook(periods, default_currency="EUR")


def period(rate_id, price, start, end=None, kind="full", profile="", currency="EUR") -> RatePeriod:
    return RatePeriod(rate_id, kind, profile, Decimal(price), currency, start, end)


def test_unit_for_mig_slice_is_its_compute_share_of_the_card():
    assert unit_for(kind="mig", profile="1g.10gb", product="NVIDIA A100-SXM4-80GB MIG 1g.10gb") == Unit(
        "mig", "1g.10gb", 1, 7
    )
    assert unit_for(kind="mig", profile="3g.40gb", product="NVIDIA H100 80GB HBM3").fraction == Decimal("0.4285714286")
    assert unit_for(kind="mig", profile="1g.6gb", product="NVIDIA A30") == Unit("mig", "1g.6gb", 1, 4)


def test_unit_for_shared_replica_is_one_over_replicas():
    assert unit_for(kind="shared", replicas=4) == Unit("shared", "", 1, 4)
    assert unit_for(kind="shared", profile="1g.10gb", replicas=2) == Unit("shared", "1g.10gb", 1, 14)
    assert unit_for(kind="full") == Unit("full", "", 1, 1)


def test_unit_for_mig_without_compute_profile_falls_back_to_siblings():
    assert unit_for(kind="mig", profile="neuroncore", siblings=2) == Unit("mig", "neuroncore", 1, 2)


def test_rate_book_prices_a_slice_as_its_share_unless_it_has_its_own_rate():
    slice_ = Unit("mig", "1g.10gb", 1, 7)
    rates = book(period(1, "7.00", JAN))
    assert rates.price(slice_, JAN).unit_price == Decimal("1.0000000000")
    assert rates.price(slice_, JAN).rate_id == 1
    own = book(period(1, "7.00", JAN), period(2, "1.50", JAN, kind="mig", profile="1g.10gb"))
    assert own.price(slice_, JAN).unit_price == Decimal("1.5")
    assert own.price(slice_, JAN).rate_id == 2


def test_rate_book_without_rate_prices_zero_in_default_currency():
    price = book().price(Unit("full"), JAN)
    assert price.unit_price == 0
    assert price.rate_id is None
    assert price.currency == "EUR"


def test_rate_book_uses_the_rate_in_force_and_end_is_exclusive():
    change = JAN + timedelta(days=10)
    rates = book(period(1, "2.00", JAN, change), period(2, "3.00", change))
    assert rates.price(Unit("full"), change - timedelta(microseconds=1)).unit_price == 2
    assert rates.price(Unit("full"), change).unit_price == 3
    assert rates.price(Unit("full"), JAN - timedelta(seconds=1)).rate_id is None
    assert rates.boundaries(Unit("full")) == [JAN, change]


def test_split_interval_cuts_at_midnights_and_boundaries():
    start = datetime(2026, 3, 1, 22, 0, tzinfo=UTC)
    end = datetime(2026, 3, 3, 1, 0, tzinfo=UTC)
    change = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    pieces = split_interval(start, end, tz=UTC, boundaries=[change, JAN])
    assert [(s.isoformat(), e.isoformat()) for s, e in pieces] == [
        ("2026-03-01T22:00:00+00:00", "2026-03-02T00:00:00+00:00"),
        ("2026-03-02T00:00:00+00:00", "2026-03-02T12:00:00+00:00"),
        ("2026-03-02T12:00:00+00:00", "2026-03-03T00:00:00+00:00"),
        ("2026-03-03T00:00:00+00:00", "2026-03-03T01:00:00+00:00"),
    ]
    assert sum(duration_us(s, e) for s, e in pieces) == duration_us(start, end)


def test_split_interval_follows_local_midnight_across_dst():
    berlin = ZoneInfo("Europe/Berlin")
    start = datetime(2026, 3, 28, 12, 0, tzinfo=berlin)  # the night of 28→29 March has 23 hours
    end = datetime(2026, 3, 30, 12, 0, tzinfo=berlin)
    pieces = split_interval(start, end, tz=berlin)
    assert [s.astimezone(berlin).hour for s, _ in pieces] == [12, 0, 0]
    assert duration_us(*pieces[1]) == 23 * 3600 * 10**6


def test_split_interval_of_an_empty_interval_is_one_empty_piece():
    assert split_interval(JAN, JAN, tz=UTC) == [(JAN, JAN)]


def test_cost_of_is_exact_to_the_microsecond():
    assert cost_of(3600 * 10**6, Decimal("2.00")) == Decimal("2.00")
    assert cost_of(1, Decimal("3600")) == Decimal("0.00000100")
