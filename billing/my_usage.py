"""A researcher's own usage: their GPU-hours, cost and lost hours per month and per class, from the rollups.

The numbers come from :func:`billing.selectors.cost_report` filtered to the researcher (the same sums the lead's
cost page shows for them); reserved-but-idle hours are the team's (quota is reserved per team, not per person),
so the page labels them as the team's. :class:`BillingJobCost` is billing's side of
:class:`queues.ports.JobCostPort`: the job page's "GPU-hours and cost so far", from the usage records.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Max, Q, Sum

from billing import selectors
from billing.models import UsageRecord
from billing.pricing import hours
from queues.models import Membership, Team
from queues.ports import JobCost

#: How many months the page may cover, and by default.
MAX_MONTHS = 24
DEFAULT_MONTHS = 6


def months_param(raw: str | None) -> tuple[int, str]:
    """The ``months`` query parameter as a number and an error message ("" when valid); the default when empty."""
    if raw in (None, ""):
        return DEFAULT_MONTHS, ""
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_MONTHS:
        return DEFAULT_MONTHS, f"months: give a whole number from 1 to {MAX_MONTHS} (got {raw[:20]!r})"
    return int(raw), ""


def months_back(today: date, months: int) -> date:
    """First day of the month ``months - 1`` months before ``today``'s (so the range holds ``months`` months)."""
    year, month = today.year, today.month - (months - 1)
    while month < 1:
        month += 12
        year -= 1
    return date(year, month, 1)


@dataclass
class ResearcherUsage:
    """What the researcher's usage page shows."""

    teams: list[Team]
    months: int
    report: selectors.CostReport

    @property
    def periods(self) -> list[selectors.PeriodRow]:
        """Months, newest first."""
        return list(reversed(self.report.periods))


def researcher_usage(*, user: AbstractBaseUser, today: date, months: int = DEFAULT_MONTHS) -> ResearcherUsage:
    """The user's usage over the last ``months`` months (this one included) in every team they belong to."""
    if not 1 <= months <= MAX_MONTHS:
        raise ValueError(f"months must be between 1 and {MAX_MONTHS}")
    teams = list(Team.objects.filter(memberships__user=user).order_by("name", "pk").distinct())
    report = selectors.cost_report(teams=teams, start=months_back(today, months), end=today, bucket="month", user=user)
    return ResearcherUsage(teams=teams, months=months, report=report)


def leads_or_staff(user: AbstractBaseUser) -> bool:
    """Whether the cost page has something to show the user (a lead of some team, or staff)."""
    if not user.is_authenticated:
        return False
    if user.is_staff or user.is_superuser:
        return True
    return Membership.objects.filter(user=user, role=Membership.Role.LEAD).exists()


class BillingJobCost:
    """Implements :class:`queues.ports.JobCostPort` with :func:`billing.selectors.job_usage` (metered records)."""

    def job_cost(self, *, job_id: int) -> JobCost:
        """Device-hours and cost the metering recorded for the job, and up to when it metered."""
        usage = selectors.job_usage([job_id]).get(job_id, selectors.JobUsage(job_id=job_id))
        marks = UsageRecord.objects.filter(job_id=job_id).aggregate(
            until=Max("end"), open=Count("pk", filter=Q(open=True))
        )
        by_pod = (
            UsageRecord.objects.filter(job_id=job_id)
            .values("allocation__pod_index")
            .annotate(us=Sum("duration_us"))
            .order_by()
        )
        return JobCost(
            device_hours=usage.device_hours,
            borrowed_hours=hours(usage.borrowed_us),
            cost=dict(usage.cost),
            metered_until=marks["until"],
            still_open=bool(marks["open"]),
            device_hours_by_pod={row["allocation__pod_index"]: hours(row["us"] or 0) for row in by_pod},
        )
