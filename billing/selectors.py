"""Reads of billing: who may see which team's costs, cost reports from the daily rollups, budget burn.

Reports aggregate the rollups in SQL (a fixed number of queries whatever the range); money is kept per
currency (``{"EUR": Decimal(...)}``) because rates name their currency.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import TruncMonth
from django.utils import timezone

from billing.models import (
    Budget,
    CapacityDaily,
    CapacityTeamMonthly,
    CohortSettlement,
    LedgerDaily,
    LedgerMonthly,
    Notification,
    TeamDemotion,
    UsageDaily,
    UsageRecord,
    UsageTeamDaily,
    UsageTeamMonthly,
)
from billing.pricing import hours
from billing.reservation_cost import ReservationCharges, reservation_charges
from billing.services.budgets import period_bounds
from pools.models import ResourceClass, ResourceFlavor
from queues.models import Job, Team
from queues.waiting.selectors import lead_teams_visible_to

BUCKETS = ("day", "week", "month")
Money = dict[str, Decimal]


#: Money is stored with 8 decimal places; SQLite sums decimals as floats, so sums are brought back to them.
_MONEY_PLACES = Decimal("1e-8")


def _add(money: Money, currency: str, amount: Decimal | None) -> None:
    if amount:
        money[currency] = money.get(currency, Decimal(0)) + Decimal(amount).quantize(_MONEY_PLACES)


def money_sum(*parts: Money, sign: Iterable[int] | None = None) -> Money:
    """Per-currency sum of several amounts (``sign`` gives +1 / -1 per part)."""
    out: Money = {}
    for part, s in zip(parts, sign or [1] * len(parts), strict=True):
        for currency, amount in part.items():
            out[currency] = out.get(currency, Decimal(0)) + s * amount
    return out


def teams_visible_to(user: AbstractBaseUser) -> QuerySet[Team]:
    """Teams whose costs the user may see: every team for staff, else the teams the user leads (the same rule as
    their waiting: ``queues.waiting.selectors.lead_teams_visible_to``)."""
    return lead_teams_visible_to(user)


@dataclass
class Usage:
    """Device time (µs), cost per currency and lost hours of some slice of a report."""

    owned_us: int = 0
    borrowed_us: int = 0
    owned_cost: Money = field(default_factory=dict)
    borrowed_cost: Money = field(default_factory=dict)
    lost_preemption_hours: Decimal = Decimal(0)
    lost_hardware_hours: Decimal = Decimal(0)
    #: Of the device time used, what running jobs held while their GPUs were idle (DCGM; rollups only).
    idle_held_us: int = 0

    def add(self, row: Mapping) -> None:
        """Accumulate one aggregated row of ``UsageDaily`` (lost hours are optional: records have none)."""
        self.owned_us += row["owned_us"] or 0
        self.borrowed_us += row["borrowed_us"] or 0
        _add(self.owned_cost, row["currency"], row["owned_cost"])
        _add(self.borrowed_cost, row["currency"], row["borrowed_cost"])
        self.lost_preemption_hours += Decimal(row.get("lost_preemption_hours") or 0)
        self.lost_hardware_hours += Decimal(row.get("lost_hardware_hours") or 0)
        self.idle_held_us += row.get("idle_held_us") or 0

    @property
    def owned_hours(self) -> Decimal:
        """Device-hours within nominal quota."""
        return hours(self.owned_us)

    @property
    def borrowed_hours(self) -> Decimal:
        """Device-hours borrowed from the cohort."""
        return hours(self.borrowed_us)

    @property
    def used_hours(self) -> Decimal:
        """All device-hours used."""
        return hours(self.owned_us + self.borrowed_us)

    @property
    def idle_held_hours(self) -> Decimal:
        """Device-hours running jobs held while their GPUs were idle (part of the hours used)."""
        return hours(self.idle_held_us)

    @property
    def lost_hours(self) -> Decimal:
        """Device-hours of work lost (preemption and hardware)."""
        return self.lost_preemption_hours + self.lost_hardware_hours

    @property
    def cost(self) -> Money:
        """Usage cost per currency."""
        return money_sum(self.owned_cost, self.borrowed_cost)


@dataclass
class Capacity:
    """Reserved nominal quota, its idle part and the part lent to other teams (µs), with their prices."""

    reserved_us: int = 0
    idle_us: int = 0
    lent_us: int = 0
    unbacked_us: int = 0
    idle_cost: Money = field(default_factory=dict)
    lent_credit: Money = field(default_factory=dict)

    def add(self, row: Mapping) -> None:
        """Accumulate one aggregated row of ``CapacityDaily``."""
        self.reserved_us += row["reserved_us"] or 0
        self.idle_us += row["idle_us"] or 0
        self.lent_us += row["lent_us"] or 0
        self.unbacked_us += row.get("unbacked_us") or 0
        _add(self.idle_cost, row["currency"], row["idle_cost"])
        _add(self.lent_credit, row["currency"], row["lent_credit"])

    @property
    def reserved_hours(self) -> Decimal:
        """Device-hours of nominal quota."""
        return hours(self.reserved_us)

    @property
    def idle_hours(self) -> Decimal:
        """Reserved device-hours the team did not use."""
        return hours(self.idle_us)

    @property
    def lent_hours(self) -> Decimal:
        """Idle device-hours other teams used by borrowing (credited)."""
        return hours(self.lent_us)

    @property
    def unbacked_hours(self) -> Decimal:
        """Device-hours of guaranteed quota healthy devices did not back (repairs): not reserved, not charged."""
        return hours(self.unbacked_us)


@dataclass
class GroupRow:
    """One line of a breakdown (a user, a class, a flavor)."""

    key: str
    label: str
    usage: Usage = field(default_factory=Usage)


@dataclass
class PeriodRow:
    """One day, week or month of a report."""

    period: date
    usage: Usage = field(default_factory=Usage)
    capacity: Capacity = field(default_factory=Capacity)
    #: Internal settlement's change to the charge in the period (``settlement_adjustments``).
    settlement: Money = field(default_factory=dict)

    @property
    def charge(self) -> Money:
        """What the team pays for the period: usage + idle reservation − lent credit + settlement adjustment."""
        return money_sum(
            self.usage.cost, self.capacity.idle_cost, self.capacity.lent_credit, self.settlement, sign=[1, 1, -1, 1]
        )


@dataclass
class CostReport:
    """A team's (or several teams') costs over an inclusive date range, from the daily rollups."""

    teams: list[Team]
    start: date
    end: date
    bucket: str
    user: AbstractBaseUser | None
    resource_class: ResourceClass | None
    totals: Usage
    capacity: Capacity
    periods: list[PeriodRow]
    by_user: list[GroupRow]
    by_class: list[GroupRow]
    by_flavor: list[GroupRow]
    #: Per team (the all-teams view has this instead of a per-user breakdown).
    by_team: list[GroupRow] = field(default_factory=list)
    #: Every team (then ``teams`` is empty: the report is not limited to a list).
    all_teams: bool = False
    #: Internal settlement's change to the charge (cohorts that settle borrowing between teams; zero-sum over a
    #: cohort, so it is empty for every team together). Per team, like the reserved capacity.
    settlement: Money = field(default_factory=dict)
    #: The teams' reservations (booked windows): reserved, used and the unused part's price, per period and in all.
    reservations: ReservationCharges = field(default_factory=ReservationCharges)

    @property
    def filtered(self) -> bool:
        """Whether a user or class filter applies (reserved capacity is per team, so it is not filtered)."""
        return self.user is not None or self.resource_class is not None

    @property
    def currencies(self) -> list[str]:
        """Every currency the report's amounts use."""
        found = set(self.totals.cost) | set(self.capacity.idle_cost) | set(self.capacity.lent_credit)
        return sorted(found | set(self.settlement) | set(self.reservations.total.unused_cost))

    @property
    def net_idle_cost(self) -> Money:
        """Cost of reserved capacity that nobody used: idle cost less the credit for lent hours."""
        return money_sum(self.capacity.idle_cost, self.capacity.lent_credit, sign=[1, -1])

    @property
    def charge(self) -> Money:
        """What the team pays: usage cost (owned + borrowed), the net idle quota cost, the unused part of its
        reservations (booked windows are charged whether used or not) and the internal settlement's adjustment where
        its cohort settles borrowing between teams."""
        return money_sum(self.totals.cost, self.net_idle_cost, self.reservations.total.unused_cost, self.settlement)


def bucket_start(day: date, bucket: str) -> date:
    """First day of the day / week (Monday) / month containing ``day``."""
    if bucket == "week":
        return day - timedelta(days=day.weekday())
    if bucket == "month":
        return day.replace(day=1)
    return day


def _buckets(start: date, end: date, bucket: str) -> list[date]:
    """Every bucket of the range, so that charts show empty periods as zero."""
    out = []
    current = bucket_start(start, bucket)
    while current <= end:
        out.append(current)
        if bucket == "month":
            current = (current.replace(day=28) + timedelta(days=4)).replace(day=1)
        else:
            current += timedelta(days=7 if bucket == "week" else 1)
    return out


USAGE_SUMS = {
    "owned_us": Sum("owned_us"),
    "borrowed_us": Sum("borrowed_us"),
    "owned_cost": Sum("owned_cost"),
    "borrowed_cost": Sum("borrowed_cost"),
    "lost_preemption_hours": Sum("lost_preemption_hours"),
    "lost_hardware_hours": Sum("lost_hardware_hours"),
    "idle_held_us": Sum("idle_held_us"),
}
CAPACITY_SUMS = {
    "reserved_us": Sum("reserved_us"),
    "idle_us": Sum("idle_us"),
    "lent_us": Sum("lent_us"),
    "unbacked_us": Sum("unbacked_us"),
    "idle_cost": Sum("idle_cost"),
    "lent_credit": Sum("lent_credit"),
}


def _group_names(rows: list[Mapping]) -> dict[str, dict]:
    """Display names of the users, classes and flavors of grouped rows (one query each)."""
    user_ids = {r["user_id"] for r in rows if "user_id" in r}
    users = get_user_model().objects.filter(pk__in=user_ids).only("username", "first_name", "last_name")
    classes = ResourceClass.objects.filter(pk__in={r["resource_class_id"] for r in rows}).values_list("pk", "name")
    flavors = ResourceFlavor.objects.filter(pk__in={r["flavor_id"] for r in rows if r["flavor_id"]})
    teams = Team.objects.filter(pk__in={r["team_id"] for r in rows}).values_list("pk", "name")
    return {
        "team": dict(teams) if rows else {},
        "user": {u.pk: u.get_full_name() or u.get_username() for u in users} if user_ids else {},
        "class": dict(classes) if rows else {},
        "flavor": {f.pk: f.label for f in flavors.only("name", "display_name")} if rows else {},
    }


def whole_months(start: date, end: date) -> tuple[date, date] | None:
    """(first, last) day of the whole calendar months inside [start, end], or None when there are none."""
    first = start if start.day == 1 else (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    after_end = end + timedelta(days=1)
    last = end if after_end.day == 1 else end.replace(day=1) - timedelta(days=1)
    return (first, last) if first <= last else None


@dataclass
class _Split:
    """A report's range cut into whole months (read from the monthly rollups) and the days around them."""

    months: tuple[date, date] | None
    start: date
    end: date

    def days(self) -> Q:
        """The days of the range outside the whole months."""
        if self.months is None:
            return Q(day__gte=self.start, day__lte=self.end)
        first, last = self.months
        return Q(day__gte=self.start, day__lt=first) | Q(day__gt=last, day__lte=self.end)

    @property
    def has_days(self) -> bool:
        """Whether any day of the range lies outside the whole months."""
        return self.months is None or self.months != (self.start, self.end)


def cost_report(
    *,
    teams: Iterable[Team] | None,
    start: date,
    end: date,
    bucket: str = "day",
    user: AbstractBaseUser | None = None,
    resource_class: ResourceClass | None = None,
) -> CostReport:
    """Usage, cost, idle reserved and lost hours over [start, end] (inclusive days), in at most 10 queries.

    ``teams=None`` means every team (staff): that view breaks down per team instead of per user. SQL sums per
    day and per (team, user, class, flavor); days are bucketed into weeks or months here, which is cheaper than
    truncating dates row by row in SQL. Whole calendar months are read from the monthly rollups wherever the
    report does not need days or users (the per-team breakdown; the series and capacity per month); the days
    around them from the daily rollups. The monthly rows are exact sums of the daily ones, so the report is
    the same either way (``monthly=False`` in ``_cost_report`` reads only the daily rollups).
    """
    return _cost_report(
        teams=teams, start=start, end=end, bucket=bucket, user=user, resource_class=resource_class, monthly=True
    )


def _cost_report(
    *,
    teams: Iterable[Team] | None,
    start: date,
    end: date,
    bucket: str,
    user: AbstractBaseUser | None,
    resource_class: ResourceClass | None,
    monthly: bool,
) -> CostReport:
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}")
    all_teams = teams is None
    teams = [] if all_teams else list(teams)
    # Without a user filter the team-level rollup has the same sums in a fraction of the rows.
    series_model = UsageDaily if user is not None else UsageTeamDaily
    breakdown_model = UsageTeamDaily if all_teams and user is None else UsageDaily
    months = whole_months(start, end) if monthly else None
    split = _Split(months=months, start=start, end=end)
    nothing = _Split(months=None, start=start, end=end)

    def scoped(rows: QuerySet, *, filtered: bool) -> QuerySet:
        """Rows in the report's teams and, when ``filtered``, its user and class filters."""
        if not all_teams:
            rows = rows.filter(team__in=teams)
        if filtered and user is not None:
            rows = rows.filter(user=user)
        if filtered and resource_class is not None:
            rows = rows.filter(resource_class=resource_class)
        return rows

    def read(daily_model, monthly_model, fields: tuple, sums: dict, *, use_months: bool, filtered: bool = True):
        """Aggregated rows of the daily model, or of the monthly one over the whole months and the daily one
        around them (``day`` then stands for the month's first day)."""
        part = split if use_months and split.months is not None else nothing
        out = []
        if part.months is not None:
            first, last = part.months
            month_fields = tuple("month" if f == "day" else f for f in fields)
            rows = scoped(monthly_model.objects.filter(month__gte=first, month__lte=last), filtered=filtered)
            for row in rows.values(*month_fields).annotate(**sums).order_by():
                if "month" in row:
                    row["day"] = row.pop("month")
                out.append(row)
        if part.has_days:
            rows = scoped(daily_model.objects.filter(part.days()), filtered=filtered)
            out += list(rows.values(*fields).annotate(**sums).order_by())
        return out

    per_month = bucket == "month" and user is None
    periods = {p: PeriodRow(period=p) for p in _buckets(start, end, bucket)}
    totals = Usage()
    for row in read(series_model, UsageTeamMonthly, ("day", "currency"), USAGE_SUMS, use_months=per_month):
        p = bucket_start(row["day"], bucket)
        periods.setdefault(p, PeriodRow(period=p)).usage.add(row)
        totals.add(row)
    # Group by ids only (cheap), then name the few groups: joining before grouping costs a join per row.
    dimensions = {"team": "team_id", "class": "resource_class_id", "flavor": "flavor_id"}
    if breakdown_model is UsageDaily:
        dimensions["user"] = "user_id"
    fields = (*dimensions.values(), "currency")
    grouped = read(breakdown_model, UsageTeamMonthly, fields, USAGE_SUMS, use_months=breakdown_model is UsageTeamDaily)
    names = _group_names(grouped)
    by: dict[str, dict[str, GroupRow]] = {"user": {}, "team": {}, "class": {}, "flavor": {}}
    for row in grouped:
        for kind, field_name in dimensions.items():
            key = str(row[field_name])
            label = names[kind].get(row[field_name], "unknown")
            by[kind].setdefault(key, GroupRow(key=key, label=label)).usage.add(row)
    capacity = Capacity()
    # Reserved capacity is per team: the user and class filters do not apply to it.
    cap_rows = read(
        CapacityDaily,
        CapacityTeamMonthly,
        ("day", "currency"),
        CAPACITY_SUMS,
        use_months=bucket == "month",
        filtered=False,
    )
    for row in cap_rows:
        p = bucket_start(row["day"], bucket)
        periods.setdefault(p, PeriodRow(period=p)).capacity.add(row)
        capacity.add(row)

    settlement: Money = {}
    if not all_teams:  # zero-sum over a cohort: every team together has none
        per_period, settlement = settlement_adjustments(teams=teams, start=start, end=end, bucket=bucket)
        for p, money in per_period.items():
            periods.setdefault(p, PeriodRow(period=p)).settlement = money

    def ranked(groups: dict[str, GroupRow]) -> list[GroupRow]:
        return sorted(groups.values(), key=lambda g: (-(g.usage.owned_us + g.usage.borrowed_us), g.label, g.key))

    return CostReport(
        teams=teams,
        start=start,
        end=end,
        bucket=bucket,
        user=user,
        resource_class=resource_class,
        totals=totals,
        capacity=capacity,
        periods=[periods[p] for p in sorted(periods)],
        by_user=ranked(by["user"]),
        by_class=ranked(by["class"]),
        by_flavor=ranked(by["flavor"]),
        by_team=ranked(by["team"]),
        all_teams=all_teams,
        settlement=settlement,
        # Like reserved quota, a reservation is the team's: the user and class filters do not apply to it.
        reservations=reservation_charges(
            teams=None if all_teams else teams, start=start, end=end, periods=sorted(periods), now=timezone.now()
        ),
    )


def settlement_shares(cohort_ids: Iterable[int], months: Iterable[date]) -> dict[tuple[int, date], Decimal]:
    """The settlement share (0–1) in force per (root cohort, month first day); absent where settlement is off."""
    periods: dict[int, list[tuple[date, Decimal | None]]] = {}
    for cohort_id, since, percent in CohortSettlement.objects.filter(cohort_id__in=set(cohort_ids)).values_list(
        "cohort_id", "effective_from", "share_percent"
    ):
        periods.setdefault(cohort_id, []).append((since, percent))
    out: dict[tuple[int, date], Decimal] = {}
    for cohort_id, rows in periods.items():
        rows.sort()
        for month in months:
            in_force = [percent for since, percent in rows if since <= month]
            if in_force and in_force[-1] is not None:
                out[(cohort_id, month)] = in_force[-1] / 100
    return out


def ledger_rows_in(*, teams: Iterable[Team] | None, start: date, end: date, use_months: bool) -> list[dict]:
    """Ledger rows (lender or borrower among ``teams``; None: every team) over [start, end]: whole months from the
    monthly rows when ``use_months`` (``day`` is then the month's first day), the other days from the daily rows;
    summed per (cohort, day, lender, borrower, flavor, resource, currency)."""
    involved = Q()
    if teams is not None:
        team_ids = [t.pk for t in teams]
        involved = Q(lender_id__in=team_ids) | Q(borrower_id__in=team_ids)
    fields = ("cohort_id", "lender_id", "borrower_id", "flavor_id", "resource_name", "currency")
    months = whole_months(start, end) if use_months else None
    split = _Split(months=months, start=start, end=end)
    out: list[dict] = []
    if months is not None:
        rows = LedgerMonthly.objects.filter(involved, month__gte=months[0], month__lte=months[1])
        for row in rows.values("month", *fields).annotate(us=Sum("lent_us"), amount=Sum("value")).order_by():
            row["day"] = row.pop("month")
            out.append(row)
    if split.has_days:
        rows = LedgerDaily.objects.filter(involved).filter(split.days())
        out += list(rows.values("day", *fields).annotate(us=Sum("lent_us"), amount=Sum("value")).order_by())
    for row in out:
        row["amount"] = Decimal(row["amount"] or 0).quantize(_MONEY_PLACES)
    return out


def settlement_adjustments(
    *, teams: Iterable[Team], start: date, end: date, bucket: str = "day"
) -> tuple[dict[date, Money], Money]:
    """What internal settlement changes in the teams' charge over [start, end]: per period of ``bucket`` and in all.

    Each ledger row of a settling cohort is worth ``value`` at the rate; the borrower pays the lender ``share`` of
    it instead of the platform charging the borrower and crediting the lender all of it, so the lender's charge
    rises by ``(1 − share) × value`` and the borrower's falls by as much (exact, zero-sum; rounded only when shown).
    """
    teams = list(teams)
    team_ids = {t.pk for t in teams}
    settling = set(CohortSettlement.objects.filter(share_percent__isnull=False).values_list("cohort_id", flat=True))
    if not settling:  # the usual case: one small query, no ledger read
        return {}, {}
    rows = [
        r
        for r in ledger_rows_in(teams=teams, start=start, end=end, use_months=bucket == "month")
        if r["cohort_id"] in settling
    ]
    if not rows:
        return {}, {}
    shares = settlement_shares({r["cohort_id"] for r in rows}, {r["day"].replace(day=1) for r in rows})
    per_period: dict[date, Money] = {}
    total: Money = {}
    for row in rows:
        share = shares.get((row["cohort_id"], row["day"].replace(day=1)))
        if share is None:
            continue
        change = (1 - share) * row["amount"]
        sign = (row["lender_id"] in team_ids) - (row["borrower_id"] in team_ids)
        if not sign or not change:
            continue
        period = per_period.setdefault(bucket_start(row["day"], bucket), {})
        period[row["currency"]] = period.get(row["currency"], Decimal(0)) + sign * change
        total[row["currency"]] = total.get(row["currency"], Decimal(0)) + sign * change
    return per_period, total


def usage_us(*, teams: Iterable[Team], start: date, end: date, rollups: bool = False) -> int:
    """Device time (µs) the teams used over [start, end] (inclusive days), from the records or the rollups."""
    if rollups:
        total = UsageDaily.objects.filter(team__in=list(teams), day__gte=start, day__lte=end).aggregate(
            t=Sum("owned_us", default=0) + Sum("borrowed_us", default=0)
        )["t"]
    else:
        total = UsageRecord.objects.filter(team__in=list(teams), day__gte=start, day__lte=end).aggregate(
            t=Sum("duration_us", default=0)
        )["t"]
    return int(total or 0)


@dataclass
class JobUsage:
    """Device time and cost of one job (over all its allocations), per currency."""

    job_id: int
    duration_us: int = 0
    borrowed_us: int = 0
    cost: Money = field(default_factory=dict)

    @property
    def device_hours(self) -> Decimal:
        """Device-hours the job held."""
        return hours(self.duration_us)


def job_usage(job_ids: Iterable[int]) -> dict[int, JobUsage]:
    """Metered device time and cost per job (for job lists and job pages), in one query."""
    out: dict[int, JobUsage] = {}
    rows = (
        UsageRecord.objects.filter(job_id__in=list(job_ids))
        .values("job_id", "currency")
        .annotate(us=Sum("duration_us"), borrowed=Sum("duration_us", filter=Q(borrowed=True)), cost=Sum("cost"))
        .order_by()
    )
    for row in rows:
        usage = out.setdefault(row["job_id"], JobUsage(job_id=row["job_id"]))
        usage.duration_us += row["us"] or 0
        usage.borrowed_us += row["borrowed"] or 0
        _add(usage.cost, row["currency"], row["cost"])
    return out


@dataclass
class BudgetStatus:
    """Burn of one budget in one of its periods (a month or a quarter)."""

    budget: Budget
    period_start: date
    period_end: date  # exclusive
    spent: Decimal
    #: Whether the period has ended by the day the page is read (else: spent so far).
    closed: bool = True
    #: Spent in the period before, when the page shows it (for the comparison), else None.
    previous: Decimal | None = None

    @property
    def percent(self) -> Decimal:
        """Share of the budget spent, in percent."""
        return (self.spent * 100 / self.budget.amount).quantize(Decimal("0.1"))

    @property
    def level(self) -> str:
        """``ok`` | ``warning`` (past the first threshold) | ``over`` (at or past 100 %)."""
        if self.percent >= 100:
            return "over"
        thresholds = sorted(self.budget.thresholds or [50])
        return "warning" if self.percent >= thresholds[0] else "ok"

    @property
    def label(self) -> str:
        """The period in words: "November 2026", "Q4 2026"."""
        if self.budget.period == Budget.Period.QUARTER:
            return f"Q{(self.period_start.month - 1) // 3 + 1} {self.period_start.year}"
        return f"{self.period_start:%B %Y}"

    @property
    def change(self) -> Decimal | None:
        """Spent minus what the period before spent (None without the period before)."""
        return None if self.previous is None else self.spent - self.previous


def _periods(period: str, start: date, end: date) -> list[tuple[date, date]]:
    """The budget periods (months or quarters) that overlap the days [start, end], oldest first."""
    out = []
    first, nxt = period_bounds(period, start)
    while first <= end:
        out.append((first, nxt))
        first, nxt = nxt, period_bounds(period, nxt)[1]
    return out


def budget_statuses(*, teams: Iterable[Team] | None, start: date, end: date, today: date) -> list[BudgetStatus]:
    """Burn of the teams' active budgets in every period that overlaps the days [start, end] (the range a page
    shows: last month's budget for last month), each with what the period before spent; one query in all.

    Periods after ``today`` are left out; the one containing it counts what was metered so far.
    """
    budgets = Budget.objects.filter(active=True).select_related("team").order_by("team__name", "period")
    if teams is not None:
        budgets = budgets.filter(team__in=list(teams))
    budgets = list(budgets)
    end = min(end, today)
    plans = {b.pk: _periods(b.period, start, end) for b in budgets}
    if not budgets or not any(plans.values()):
        return []
    first = min(period_bounds(b.period, plans[b.pk][0][0] - timedelta(days=1))[0] for b in budgets if plans[b.pk])
    last = max(plans[b.pk][-1][1] for b in budgets if plans[b.pk])
    months: dict[tuple[int, str, date], Decimal] = {}
    rows = (
        UsageRecord.objects.filter(team_id__in={b.team_id for b in budgets}, day__gte=first, day__lt=last)
        .annotate(month=TruncMonth("day"))
        .values("team_id", "currency", "month")
        .annotate(total=Sum("cost"))
        .order_by()
    )
    for r in rows:
        month = r["month"].date() if isinstance(r["month"], datetime) else r["month"]
        months[(r["team_id"], r["currency"], month)] = Decimal(r["total"] or 0)

    def spent(budget: Budget, lo: date, hi: date) -> Decimal:
        return sum(
            (
                v
                for (team, currency, month), v in months.items()
                if (team, currency) == (budget.team_id, budget.currency) and lo <= month < hi
            ),
            Decimal(0),
        )

    out = []
    for budget in budgets:
        for lo, hi in plans[budget.pk]:
            before = period_bounds(budget.period, lo - timedelta(days=1))
            out.append(
                BudgetStatus(
                    budget=budget,
                    period_start=lo,
                    period_end=hi,
                    spent=spent(budget, lo, hi),
                    closed=hi <= today,
                    previous=spent(budget, *before),
                )
            )
    return out


def notifications_for(*, teams: Iterable[Team] | None, limit: int = 10) -> list[Notification]:
    """The teams' latest billing notifications."""
    notifications = Notification.objects.select_related("team")
    if teams is not None:
        notifications = notifications.filter(team__in=list(teams))
    return list(notifications[:limit])


def active_demotions(*, teams: Iterable[Team] | None) -> list[TeamDemotion]:
    """Demotions in force for the teams."""
    demotions = TeamDemotion.objects.filter(lifted_at__isnull=True).select_related("team", "priority_class")
    if teams is not None:
        demotions = demotions.filter(team__in=list(teams))
    return list(demotions)


@dataclass
class JobRow:
    """One job's metered usage within a report's range (its allocations' device time clipped to the days)."""

    job: Job
    usage: Usage = field(default_factory=Usage)


@dataclass
class ReportJobs:
    """The jobs behind a report: the largest ones and the sums over all of them (equal to the report's usage)."""

    rows: list[JobRow]
    count: int
    totals: Usage


def report_jobs(
    *,
    teams: Iterable[Team] | None,
    start: date,
    end: date,
    user: AbstractBaseUser | None = None,
    resource_class: ResourceClass | None = None,
    limit: int | None = 25,
) -> ReportJobs:
    """Usage per job over [start, end] (inclusive days) from the usage records, largest first, in 4 queries.

    The sums over every job equal the report's usage totals: the rollups are sums of the same records.
    """
    records = UsageRecord.objects.filter(day__gte=start, day__lte=end)
    if teams is not None:
        records = records.filter(team__in=list(teams))
    if user is not None:
        records = records.filter(user=user)
    if resource_class is not None:
        records = records.filter(resource_class=resource_class)
    sums = {
        "owned_us": Sum("duration_us", filter=Q(borrowed=False), default=0),
        "borrowed_us": Sum("duration_us", filter=Q(borrowed=True), default=0),
        "owned_cost": Sum("cost", filter=Q(borrowed=False), default=Decimal(0)),
        "borrowed_cost": Sum("cost", filter=Q(borrowed=True), default=Decimal(0)),
    }
    # Totals and the number of jobs in one scan, the ranking in another; Python only sees the chosen jobs.
    totals = Usage()
    count = 0
    by_currency = list(records.values("currency").annotate(**sums, jobs=Count("job_id", distinct=True)).order_by())
    for row in by_currency:
        totals.add(row)
        count += row["jobs"]
    if len(by_currency) > 1:  # a job billed in two currencies counts once
        count = records.aggregate(n=Count("job_id", distinct=True))["n"]
    ranked = records.values("job_id").annotate(us=Sum("duration_us")).order_by("-us", "job_id").values_list("job_id")
    chosen = [pk for (pk,) in (ranked if limit is None else ranked[:limit])]
    per_job: dict[int, Usage] = {pk: Usage() for pk in chosen}
    for row in records.filter(job_id__in=chosen).values("job_id", "currency").annotate(**sums).order_by():
        per_job[row["job_id"]].add(row)
    jobs = Job.objects.select_related("owner", "team", "resource_class").in_bulk(chosen)
    return ReportJobs(rows=[JobRow(job=jobs[pk], usage=per_job[pk]) for pk in chosen], count=count, totals=totals)
