"""Borrowing statements: per team and month (or any range of days), who it lent to and borrowed from, the value
at the rate, the reclaims it suffered and made, and what internal settlement changes in its charge.

Read from the ledger rollups (``LedgerMonthly`` for whole months, ``LedgerDaily`` around them), the usage and
capacity rollups the cost report reads, and ``ReclaimRecord``; a fixed number of queries per statement. The
figures add up with the cost report: the lent lines sum to its lent hours and credit, the borrowed lines (with
the cohort pool's remainder) to its borrowed hours and cost, and ``charge`` is its charge.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal

from django.db.models import Count, Q

from billing.models import ReclaimRecord
from billing.pricing import hours
from billing.selectors import (
    CostReport,
    Money,
    cost_report,
    ledger_rows_in,
    money_sum,
    settlement_shares,
)
from queues.models import Cohort, Team


@dataclass
class Counterpart:
    """One line of a statement: the other team (None: the cohort's shared pool, no team's guaranteed quota), the
    device time (µs), its value at the rate, and what settlement moves for it (None when the cohort does not
    settle)."""

    team: Team | None
    us: int = 0
    value: Money = field(default_factory=dict)
    settled: Money | None = None

    @property
    def hours(self) -> Decimal:
        """Device-hours."""
        return hours(self.us)


@dataclass
class Statement:
    """A team's borrowing statement over [start, end] (a month on the statements page)."""

    team: Team
    start: date
    end: date
    report: CostReport
    lent: list[Counterpart]
    borrowed: list[Counterpart]
    reclaims_suffered: list[ReclaimRecord]
    reclaims_made: list[ReclaimRecord]
    #: Settlement share (0–1) per month of the range in the team's cohort; empty when it never settles.
    shares: dict[date, Decimal]
    cohort: Cohort | None

    @property
    def lent_us(self) -> int:
        """Device time lent to other teams (= the cost report's lent hours)."""
        return sum(c.us for c in self.lent)

    @property
    def lent_value(self) -> Money:
        """Its value at the rate (= the cost report's lent credit)."""
        return money_sum(*(c.value for c in self.lent))

    @property
    def borrowed_us(self) -> int:
        """Device time borrowed, from teams and from the pool (= the cost report's borrowed hours)."""
        return sum(c.us for c in self.borrowed)

    @property
    def borrowed_value(self) -> Money:
        """Its cost (= the cost report's borrowed usage cost)."""
        return money_sum(*(c.value for c in self.borrowed))

    @property
    def settlement_credit(self) -> Money:
        """What the borrowers pay the team under settlement."""
        return money_sum(*(c.settled for c in self.lent if c.settled is not None))

    @property
    def settlement_charge(self) -> Money:
        """What the team pays its lenders under settlement."""
        return money_sum(*(c.settled for c in self.borrowed if c.settled is not None))

    @property
    def settles(self) -> bool:
        """Whether the team's cohort settles borrowing in any month of the range."""
        return bool(self.shares)

    @property
    def lost_hours(self) -> Decimal:
        """Device-hours of work the team lost to reclaims."""
        return sum((r.lost_device_hours for r in self.reclaims_suffered), Decimal(0))


def month_range(month: date) -> tuple[date, date]:
    """First and last day of the month containing ``month``."""
    first = month.replace(day=1)
    return first, (first.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)


def _root(cohort_id: int | None, parents: dict[int, int | None]) -> int | None:
    seen: set[int] = set()
    while cohort_id is not None and parents.get(cohort_id) is not None and cohort_id not in seen:
        seen.add(cohort_id)
        cohort_id = parents[cohort_id]
    return cohort_id


def team_root_cohort(team: Team) -> Cohort | None:
    """The root of the cohort tree the team's quota belongs to (its first quota with a cohort), if any."""
    cohort_id = team.quotas.filter(cohort__isnull=False).order_by("pk").values_list("cohort_id", flat=True).first()
    if cohort_id is None:
        return None
    parents = dict(Cohort.objects.values_list("pk", "parent_id"))
    return Cohort.objects.get(pk=_root(cohort_id, parents))


def borrowing_statement(*, team: Team, start: date, end: date) -> Statement:
    """The team's statement over [start, end] (inclusive days): lent to whom, borrowed from whom, reclaims, and
    settlement, with the cost report of the same range (its charge includes the settlement)."""
    report = cost_report(teams=[team], start=start, end=end, bucket="month")
    rows = ledger_rows_in(teams=[team], start=start, end=end, use_months=True)
    cohort = team_root_cohort(team)
    months = set()
    month = start.replace(day=1)
    while month <= end:
        months.add(month)
        month = (month.replace(day=28) + timedelta(days=4)).replace(day=1)
    cohort_ids = {r["cohort_id"] for r in rows} | ({cohort.pk} if cohort else set())
    shares = settlement_shares(cohort_ids, months)
    lent: dict[int, Counterpart] = {}
    borrowed: dict[int | None, Counterpart] = {}
    names = Team.objects.in_bulk({r["lender_id"] for r in rows} | {r["borrower_id"] for r in rows})
    for r in rows:
        share = shares.get((r["cohort_id"], r["day"].replace(day=1)))
        mine_lent = r["lender_id"] == team.pk
        other = r["borrower_id"] if mine_lent else r["lender_id"]
        book = lent if mine_lent else borrowed
        line = book.setdefault(other, Counterpart(team=names.get(other)))
        line.us += r["us"] or 0
        line.value[r["currency"]] = line.value.get(r["currency"], Decimal(0)) + r["amount"]
        if share is not None:
            line.settled = line.settled or {}
            line.settled[r["currency"]] = line.settled.get(r["currency"], Decimal(0)) + share * r["amount"]
    pool_us = report.totals.borrowed_us - sum(c.us for c in borrowed.values())
    pool_value = money_sum(
        report.totals.borrowed_cost, *(c.value for c in borrowed.values()), sign=[1] + [-1] * len(borrowed)
    )
    pool_value = {cur: v for cur, v in pool_value.items() if v}
    if pool_us or pool_value:
        borrowed[None] = Counterpart(team=None, us=pool_us, value=pool_value)
    reclaims = ReclaimRecord.objects.filter(day__gte=start, day__lte=end).select_related(
        "victim_job", "preemptor_job", "victim_team", "reclaimer_team"
    )
    suffered = list(reclaims.filter(victim_team=team).order_by("at"))
    made = list(reclaims.filter(reclaimer_team=team).order_by("at"))
    order = lambda c: (-c.us, c.team.name if c.team else "~")  # noqa: E731 - the pool line last among equals
    return Statement(
        team=team,
        start=start,
        end=end,
        report=report,
        lent=sorted(lent.values(), key=order),
        borrowed=sorted(borrowed.values(), key=order),
        reclaims_suffered=suffered,
        reclaims_made=made,
        shares={m: s for (c, m), s in shares.items() if cohort is not None and c == cohort.pk},
        cohort=cohort,
    )


@dataclass
class LedgerLine:
    """One (lender, borrower) pair over a range: device time and value (the ledger page and its CSV)."""

    lender: Team
    borrower: Team
    us: int
    value: Money
    reclaims: int = 0

    @property
    def hours(self) -> Decimal:
        """Device-hours."""
        return hours(self.us)


def ledger_lines(*, teams: Sequence[Team] | None, start: date, end: date) -> list[LedgerLine]:
    """Every (lender, borrower) pair with borrowing over [start, end] involving ``teams`` (None: every team), most
    device time first, with the reclaims the lender made of the borrower's jobs."""
    cells: dict[tuple[int, int], list] = defaultdict(lambda: [0, {}])
    for r in ledger_rows_in(teams=teams, start=start, end=end, use_months=True):
        cell = cells[(r["lender_id"], r["borrower_id"])]
        cell[0] += r["us"] or 0
        cell[1][r["currency"]] = cell[1].get(r["currency"], Decimal(0)) + r["amount"]
    reclaims = ReclaimRecord.objects.filter(day__gte=start, day__lte=end, reclaimer_team__isnull=False)
    if teams is not None:
        reclaims = reclaims.filter(Q(victim_team__in=teams) | Q(reclaimer_team__in=teams))
    counts = {
        (r["reclaimer_team_id"], r["victim_team_id"]): r["n"]
        for r in reclaims.values("reclaimer_team_id", "victim_team_id").annotate(n=Count("pk")).order_by()
    }
    for pair in counts:
        cells.setdefault(pair, [0, {}])
    names = Team.objects.in_bulk({k for pair in cells for k in pair})
    lines = [
        LedgerLine(lender=names[a], borrower=names[b], us=us, value=value, reclaims=counts.get((a, b), 0))
        for (a, b), (us, value) in cells.items()
        if a in names and b in names
    ]
    return sorted(lines, key=lambda ln: (-ln.us, ln.lender.name, ln.borrower.name))
