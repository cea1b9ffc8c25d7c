"""Monthly team rollups: exact sums of the daily ones, kept by ``usage_rollup``; the report reading them is the
report computed from the daily rollups alone (a rate change mid-month and a still-open allocation included)."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import reporting, selectors, services
from billing.models import CapacityDaily, CapacityTeamMonthly, UsageRecord, UsageTeamDaily, UsageTeamMonthly
from billing.selectors import whole_months
from tests.billing.conftest import H, run_job
from tests.factories import ResourceClassFactory

pytestmark = pytest.mark.django_db

FIRST = date(2026, 2, 24)
LAST = date(2026, 4, 6)
#: Metering and rollups run at noon of the last day: the open job is metered up to then.
NOW = datetime(2026, 4, 6, 12, tzinfo=UTC)
#: The H100 rate goes from 2.00 to 3.50 EUR in the middle of March, in the middle of a day.
RATE_CHANGE = datetime(2026, 3, 15, 12, 30, tzinfo=UTC)


def test_whole_months_of_a_range():
    assert whole_months(date(2026, 1, 1), date(2026, 12, 31)) == (date(2026, 1, 1), date(2026, 12, 31))
    assert whole_months(date(2026, 1, 2), date(2026, 3, 30)) == (date(2026, 2, 1), date(2026, 2, 28))
    assert whole_months(date(2026, 1, 2), date(2026, 2, 27)) is None
    assert whole_months(date(2024, 2, 1), date(2024, 2, 29)) == (date(2024, 2, 1), date(2024, 2, 29))


def _generated_usage(world) -> None:
    """Six weeks of random jobs of both teams and two classes (some borrowing), a rate change mid-month, and a
    job still running at ``NOW``; metered and rolled up day by day as the beat schedule would."""
    rng = random.Random(7)
    mig = ResourceClassFactory(slug="h100-small", name="H100 small", flavors=[world.flavor])
    services.rate_set(flavor=world.flavor, price_per_hour="3.50", effective_from=RATE_CHANGE)
    owners = [(world.team, world.alice), (world.team, world.bob), (world.team, world.lead), (world.other, world.carol)]
    day = FIRST
    while day < LAST:
        start = datetime.combine(day, datetime.min.time(), tzinfo=UTC) + timedelta(minutes=rng.randrange(0, 600))
        for _ in range(rng.randrange(1, 3)):
            team, owner = rng.choice(owners)
            end = start + timedelta(minutes=rng.randrange(30, 20 * 60))  # often past midnight
            run_job(
                world, team=team, owner=owner, devices=rng.randrange(1, 4), start=start, end=end,
                borrowing=rng.random() < 0.3, rc=rng.choice([world.rc, mig]),
            )  # fmt: skip
            start += timedelta(minutes=rng.randrange(0, 120))
        day += timedelta(days=1)
    # The day of the rate change has one job across it, and one job is still running (open records) at NOW.
    run_job(world, owner=world.bob, devices=1, start=RATE_CHANGE - 2 * H, end=RATE_CHANGE + 3 * H)
    run_job(world, team=world.other, owner=world.carol, devices=2, start=NOW - 30 * H, end=None)
    services.metering_sync(now=NOW, full=True)
    services.usage_rollup_range(start=FIRST, end=LAST, now=NOW)


def _exact_daily_sums(model, key: tuple[str, ...], summed: tuple[str, ...]) -> dict:
    """Per (month, key…): the daily rows' sums, added up in Python."""
    out: dict[tuple, list] = defaultdict(lambda: [0] * len(summed))
    for row in model.objects.values("day", *key, *summed):
        sums = out[(row["day"].replace(day=1), *(row[k] for k in key))]
        for i, name in enumerate(summed):
            sums[i] += row[name]
    return dict(out)


def test_monthly_rows_are_the_exact_sums_of_the_daily_rows(world):
    _generated_usage(world)
    assert UsageRecord.objects.filter(open=True).exists()
    assert UsageRecord.objects.filter(unit_price=Decimal("3.5")).exists()
    assert UsageRecord.objects.filter(unit_price=Decimal("2")).exists()
    usage_key = ("team_id", "resource_class_id", "flavor_id", "currency")
    usage_sums = ("owned_us", "borrowed_us", "owned_cost", "borrowed_cost", "lost_preemption_hours")
    monthly = {
        (r["month"], *(r[k] for k in usage_key)): [r[s] for s in usage_sums]
        for r in UsageTeamMonthly.objects.values("month", *usage_key, *usage_sums)
    }
    assert monthly == _exact_daily_sums(UsageTeamDaily, usage_key, usage_sums)
    assert {m for m, *_ in monthly} == {date(2026, 2, 1), date(2026, 3, 1), date(2026, 4, 1)}
    cap_sums = ("reserved_us", "idle_us", "lent_us", "idle_cost", "lent_credit")
    capacity = {
        (r["month"], r["team_id"], r["currency"]): [r[s] for s in cap_sums]
        for r in CapacityTeamMonthly.objects.values("month", "team_id", "currency", *cap_sums)
    }
    assert capacity == _exact_daily_sums(CapacityDaily, ("team_id", "currency"), cap_sums)


def test_rolling_a_day_again_keeps_its_month_in_step(world):
    _generated_usage(world)
    march = UsageTeamMonthly.objects.filter(month=date(2026, 3, 1))
    before = sum(r.owned_us + r.borrowed_us for r in march)
    # A job recorded after the fact on 20 March: metering and the day's rollup again; the month follows.
    run_job(world, owner=world.alice, devices=2, start=datetime(2026, 3, 20, 1, tzinfo=UTC), end=None)
    run_job(world, owner=world.alice, devices=1, start=datetime(2026, 3, 20, 1, tzinfo=UTC), end=None)
    services.metering_sync(now=NOW, full=True)
    services.usage_rollup(day=date(2026, 3, 20), now=NOW)
    after = sum(r.owned_us + r.borrowed_us for r in march.all())
    daily = sum(r.owned_us + r.borrowed_us for r in UsageTeamDaily.objects.filter(day__month=3))
    assert after == daily
    assert after > before


RANGES = [
    (FIRST, LAST),  # a partial month, a whole month, a partial month
    (date(2026, 3, 1), date(2026, 3, 31)),  # one whole month: no daily rows read
    (date(2026, 2, 1), date(2026, 4, 30)),  # whole months only, the last one still running
    (date(2026, 3, 2), date(2026, 3, 30)),  # no whole month
]


@pytest.mark.parametrize("bucket", ["month", "week", "day"])
def test_report_from_monthly_rollups_is_the_computed_report(world, bucket):
    _generated_usage(world)
    scopes = [
        {"teams": None},
        {"teams": [world.team]},
        {"teams": [world.team, world.other]},
        {"teams": None, "resource_class": world.rc},
        {"teams": [world.team], "user": world.bob},
    ]
    for start, end in RANGES:
        for scope in scopes:
            args = {"start": start, "end": end, "bucket": bucket, "user": None, "resource_class": None, **scope}
            computed = selectors._cost_report(**args, monthly=False)
            read = selectors.cost_report(**args)
            assert reporting.report_json(read) == reporting.report_json(computed), (start, end, scope)
            assert reporting.report_csv(read) == reporting.report_csv(computed), (start, end, scope)
            # The device time is integer microseconds: equal to the last one, not only once rounded.
            assert (
                read.totals.owned_us + read.totals.borrowed_us == computed.totals.owned_us + computed.totals.borrowed_us
            )
            assert read.capacity.idle_us == computed.capacity.idle_us
            assert [g.usage.owned_us for g in read.by_team] == [g.usage.owned_us for g in computed.by_team]
    assert computed.totals.owned_us > 0


def test_whole_months_report_reads_no_daily_rows(world):
    _generated_usage(world)
    with CaptureQueriesContext(connection) as captured:
        report = selectors.cost_report(teams=None, start=date(2026, 3, 1), end=date(2026, 3, 31), bucket="month")
    tables = " ".join(q["sql"] for q in captured.captured_queries)
    assert "usageteammonthly" in tables
    assert "capacityteammonthly" in tables
    assert "usageteamdaily" not in tables
    assert "capacitydaily" not in tables
    assert report.totals.used_hours > 0
