"""The demo's billing: prices, a metered and rolled-up history that adds up to the jobs, budgets that alert."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from billing import selectors, services
from billing.demo import billing_demo_seed
from billing.models import Budget, Notification, Rate, UsageRecord
from billing.pricing import local_day
from billing.services.common import billing_tz
from pools.models import Allocation
from portal.demo import demo_seed
from queues.models import Team
from tests.billing.conftest import allocation_us

pytestmark = pytest.mark.django_db


def test_billing_demo_seed_prices_meters_and_budgets_the_history_idempotently():
    now = timezone.now()
    demo_seed(now=now, days=3, seed=3)
    first = billing_demo_seed(now=now, days=3)
    assert first.rates == Rate.objects.count() > 0
    assert first.budgets == Budget.objects.count() == 3
    assert first.records == UsageRecord.objects.count() > 0
    tz = billing_tz()
    start, end = local_day(now - timedelta(days=4), tz), local_day(now, tz)
    lo = min(a.started_at for a in Allocation.objects.all())
    for team in Team.objects.all():
        report = selectors.cost_report(teams=[team], start=start, end=end)
        truth = allocation_us(Allocation.objects.filter(job__team=team), lo - timedelta(days=1), now)
        assert report.totals.owned_us + report.totals.borrowed_us == truth
        assert report.capacity.reserved_us > 0
        jobs = selectors.report_jobs(teams=[team], start=start, end=end, limit=None)
        assert jobs.totals.cost == report.totals.cost
    # Budgets are sized on each team's monthly spending rate; the replayed checks notified what was crossed.
    for budget in Budget.objects.all():
        spent = UsageRecord.objects.filter(team=budget.team).aggregate(t=Sum("cost"))["t"]
        share = {"vision": Decimal("1.15"), "nlp": Decimal("1.6"), "speech": Decimal("0.7")}[budget.team.slug]
        assert spent * share * 10 <= budget.amount < spent * share * 10 * Decimal("1.1") + 100
        for period_start, period_end in {
            services.period_bounds("month", local_day(a.started_at, tz)) for a in Allocation.objects.all()
        }:
            used = services.budget_spent(budget, start=period_start, end=period_end, until=now) / budget.amount * 100
            notified = Notification.objects.filter(budget=budget, period_start=period_start, kind="budget_threshold")
            assert sorted(notified.values_list("threshold", flat=True)) == [t for t in (50, 80, 100) if used >= t]
    notified = Notification.objects.count()
    second = billing_demo_seed(now=now, days=3)
    assert (second.rates, second.budgets, second.records) == (0, 0, 0)
    assert Notification.objects.count() == notified
