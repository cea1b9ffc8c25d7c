"""The demo's billing: rates of the demo flavors (one price change mid-month), the month of history metered and
rolled up through the product's own services, and a budget per team sized on its spending, checked as the
beat would have checked it over the month — so the cost pages have numbers, alerts and one demotion.

Idempotent: rates and budgets that exist are left alone; metering and rollups converge on the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal

from django.db.models import Sum

from billing import services
from billing.models import Budget, Rate, UsageRecord
from billing.pricing import local_day
from billing.services.common import billing_tz
from pools.models import ResourceFlavor
from queues.models import Team

#: flavor → [(days before now the price starts, EUR per full-card hour)]: H100 got dearer ten days ago.
RATES = {
    "h100": [(None, "2.60"), (10, "2.90")],
    "a100-mig": [(None, "1.75")],
    "l4-shared": [(None, "0.70")],
    "mi300x": [(None, "2.30")],
}
#: A100 MIG profiles priced on their own (others are priced as their share of the card rate).
MIG_RATES = {"a100-mig": [("1g.10gb", "0.30")]}
#: team → (monthly budget as a share of the team's spending rate over the history, action at 100 %): one team
#: on track, one that will cross 80 %, one over budget and demoted — whatever day of the month the demo starts.
BUDGETS = {
    "vision": (Decimal("1.15"), Budget.Action.NONE),
    "nlp": (Decimal("1.6"), Budget.Action.NONE),
    "speech": (Decimal("0.7"), Budget.Action.DEMOTE),
}
#: How often the demo's past budget checks run (the beat runs them every 15 minutes).
CHECK_EVERY = timedelta(hours=3)


def _round_up(amount: Decimal) -> Decimal:
    """A budget figure a person would pick: up to two significant digits, at least 100."""
    amount = max(amount, Decimal(100))
    step = Decimal(10) ** (len(str(int(amount))) - 2)
    return (amount / step).to_integral_value(rounding=ROUND_CEILING) * step


@dataclass
class BillingDemoReport:
    """What the demo's billing seed did."""

    rates: int
    budgets: int
    records: int
    days: int


def billing_demo_seed(*, now: datetime, days: int) -> BillingDemoReport:
    """Price the demo flavors, give each demo team a budget, meter the history and roll up its days."""
    start = now - timedelta(days=days + 1)
    rates = 0
    for name, prices in RATES.items():
        flavor = ResourceFlavor.objects.filter(name=name).first()
        if flavor is None or Rate.objects.filter(flavor=flavor).exists():
            continue
        for days_ago, price in prices:
            # A change inside the history even when it is short (``--days 3``).
            since = start if days_ago is None else max(now - timedelta(days=days_ago), start + (now - start) / 2)
            since = since.replace(minute=0, second=0, microsecond=0)
            services.rate_set(flavor=flavor, price_per_hour=price, effective_from=since, note="demo price list")
            rates += 1
        for profile, price in MIG_RATES.get(name, []):
            services.rate_set(
                flavor=flavor, kind=Rate.Kind.MIG, mig_profile=profile, price_per_hour=price, effective_from=start
            )
            rates += 1
    metering = services.metering_sync(now=now, full=True)
    tz = billing_tz()
    rolled = services.usage_rollup_range(start=local_day(start, tz), end=local_day(now, tz), now=now)
    budgets = 0
    for slug, (share, action) in BUDGETS.items():
        team = Team.objects.filter(slug=slug).first()
        if team is None or Budget.objects.filter(team=team).exists():
            continue
        spent = UsageRecord.objects.filter(team=team, start__gte=start).aggregate(t=Sum("cost"))["t"] or Decimal(0)
        amount = _round_up(spent * share * 30 / max(days, 1))
        services.budget_set(team=team, amount=amount, action_at_limit=action)
        budgets += 1
    if budgets:
        # The checks the beat would have run over the month: alerts appear at the time the spend crossed them.
        # Nobody is mailed about this made-up past (development prints mails on the console).
        at = start + CHECK_EVERY
        while at < now:
            services.budget_check(now=at, mail=False)
            at += CHECK_EVERY
    services.budget_check(now=now, mail=False)
    return BillingDemoReport(rates=rates, budgets=budgets, records=metering.created, days=len(rolled))
