"""Budgets: threshold notifications (each once per period) and the optional demotion at 100 %."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Sum

from billing.models import Budget, Notification, TeamDemotion, UsageRecord
from billing.pricing import duration_us, local_day
from billing.services.common import billing_tz, default_currency, require_aware
from kernel.errors import ValidationFailed
from notify.record import budget_threshold_record
from queues.models import Membership, PriorityClass, Team
from queues.services import team_priority_override_set

log = logging.getLogger(__name__)

DEFAULT_THRESHOLDS = (50, 80, 100)
ADJECTIVE: dict[str, str] = {Budget.Period.MONTH: "monthly", Budget.Period.QUARTER: "quarterly"}


def period_bounds(period: str, day: date) -> tuple[date, date]:
    """[first day, first day of the next period) of the month or quarter containing ``day``."""
    if period == Budget.Period.QUARTER:
        first_month = 3 * ((day.month - 1) // 3) + 1
        start = date(day.year, first_month, 1)
        months = 3
    else:
        start = date(day.year, day.month, 1)
        months = 1
    year, month = divmod(start.month - 1 + months, 12)
    return start, date(start.year + year, month + 1, 1)


def budget_spent(budget: Budget, *, start: date, end: date, until: datetime | None = None) -> Decimal:
    """Usage cost (owned + borrowed) of the budget's team in its currency over the days [start, end), from the
    records; with ``until``, only the device time before that instant (a record straddling it pro rata)."""
    records = UsageRecord.objects.filter(team_id=budget.team_id, currency=budget.currency, day__gte=start, day__lt=end)
    if until is None:
        return Decimal(records.aggregate(total=Sum("cost"))["total"] or 0)
    total = Decimal(records.filter(end__lte=until).aggregate(total=Sum("cost"))["total"] or 0)
    for begin, finish, cost in records.filter(start__lt=until, end__gt=until).values_list("start", "end", "cost"):
        total += cost * Decimal(duration_us(begin, until)) / Decimal(duration_us(begin, finish))
    return total


def _thresholds(budget: Budget) -> list[int]:
    values = budget.thresholds or list(DEFAULT_THRESHOLDS)
    return sorted({int(t) for t in values if 0 < int(t) <= 1000})


def lead_ids(team: Team) -> list[int]:
    """Users who lead the team."""
    return sorted(Membership.objects.filter(team=team, role=Membership.Role.LEAD).values_list("user_id", flat=True))


def lead_emails(team: Team) -> list[str]:
    """Addresses of the team's leads (those who have one)."""
    return sorted(
        e
        for e in Membership.objects.filter(team=team, role=Membership.Role.LEAD).values_list("user__email", flat=True)
        if e
    )


@dataclass
class BudgetCheck:
    """Outcome of checking one budget."""

    budget: Budget
    period_start: date
    spent: Decimal
    notified: list[int]


def budget_check(*, now: datetime, mail: bool = True) -> list[BudgetCheck]:
    """Check every active budget for the period containing ``now``; notify each threshold crossed once.

    ``mail=False`` records the notifications without mailing anyone (a replay of past checks, as the demo does).
    """
    require_aware(now, "now")
    budgets = Budget.objects.filter(active=True).select_related("team")
    return [budget_check_one(budget=b, now=now, mail=mail) for b in budgets]


@transaction.atomic
def budget_check_one(*, budget: Budget, now: datetime, mail: bool = True) -> BudgetCheck:
    """Check one budget; a threshold already notified in this period is not notified again."""
    start, end = period_bounds(budget.period, local_day(now, billing_tz()))
    spent = budget_spent(budget, start=start, end=end, until=now)
    percent = spent * 100 / budget.amount
    notified = []
    for threshold in _thresholds(budget):
        if percent < threshold:
            break
        if _notify_threshold(budget=budget, period_start=start, threshold=threshold, spent=spent, now=now, mail=mail):
            notified.append(threshold)
            if threshold >= 100 and budget.action_at_limit == Budget.Action.DEMOTE:
                team_demote(
                    team=budget.team,
                    now=now,
                    budget=budget,
                    period_start=start,
                    reason=f"The {ADJECTIVE[budget.period]} budget of {budget.amount} {budget.currency} is used up "
                    f"({spent:.2f} {budget.currency} spent since {start:%Y-%m-%d}).",
                )
    return BudgetCheck(budget=budget, period_start=start, spent=spent, notified=notified)


def _notify_threshold(
    *, budget: Budget, period_start: date, threshold: int, spent: Decimal, now: datetime, mail: bool
) -> bool:
    """Record the threshold notification and tell the leads through the lifecycle outbox (by mail and webhook, as
    each prefers; ``notify``), in this transaction; False when it already existed."""
    team = budget.team
    recipients = lead_emails(team) if mail else []
    message = (
        f"Team {team.name} has used {threshold} % of its {ADJECTIVE[budget.period]} budget: "
        f"{spent:.2f} of {budget.amount:.2f} {budget.currency} since {period_start:%Y-%m-%d}."
    )
    try:
        with transaction.atomic():
            notification, created = Notification.objects.get_or_create(
                kind=Notification.Kind.BUDGET_THRESHOLD,
                budget=budget,
                period_start=period_start,
                threshold=threshold,
                defaults={
                    "team": team,
                    "spent": spent.quantize(Decimal("0.01")),
                    "message": message,
                    "created_at": now,
                    "emailed_to": recipients,
                },
            )
    except IntegrityError:  # a concurrent worker notified it first
        return False
    if created and mail:
        budget_threshold_record(
            notification_id=notification.pk, team=team, lead_ids=lead_ids(team), message=message, at=now,
            threshold=threshold,
        )  # fmt: skip
    return created


def demotion_priority_class() -> PriorityClass | None:
    """The priority class a demoted team submits at: the lowest-valued class that may not preempt."""
    return PriorityClass.objects.filter(may_preempt=False).order_by("value", "name").first()


@transaction.atomic
def team_demote(
    *, team: Team, now: datetime, reason: str, budget: Budget | None = None, period_start: date | None = None
) -> TeamDemotion | None:
    """Make the team's future submissions use the lowest non-preempting priority class; idempotent.

    Running jobs are not touched. Returns the active demotion, or None (with a notification) when no
    priority class may serve (none has ``may_preempt=False``).
    """
    require_aware(now, "now")
    Team.objects.select_for_update().get(pk=team.pk)
    active = TeamDemotion.objects.filter(team=team, lifted_at__isnull=True).first()
    if active is not None:
        return active
    priority_class = demotion_priority_class()
    if priority_class is None:
        Notification.objects.create(
            team=team,
            kind=Notification.Kind.DEMOTION_FAILED,
            budget=budget,
            period_start=period_start,
            message=f"{reason} The team could not be demoted: no priority class has “may preempt” switched off.",
            created_at=now,
        )
        return None
    demotion = TeamDemotion.objects.create(
        team=team, priority_class=priority_class, budget=budget, period_start=period_start, reason=reason,
        started_at=now,
    )  # fmt: skip
    team_priority_override_set(team=team, priority_class=priority_class)
    Notification.objects.create(
        team=team,
        kind=Notification.Kind.DEMOTED,
        budget=budget,
        period_start=period_start,
        message=f"{reason} New jobs of {team.name} now run at priority {priority_class.name} "
        f"({priority_class.value}): they cannot preempt and are the first to be preempted. Running jobs keep going.",
        created_at=now,
    )
    return demotion


@transaction.atomic
def team_demotion_lift(*, team: Team, now: datetime, user: User | None = None, reason: str = "") -> TeamDemotion:
    """Undo a team's demotion: its next submissions use their own priority class again."""
    require_aware(now, "now")
    Team.objects.select_for_update().get(pk=team.pk)
    demotion = TeamDemotion.objects.filter(team=team, lifted_at__isnull=True).first()
    if demotion is None:
        raise ValidationFailed({"team": [f"team {team.slug} is not demoted"]})
    demotion.lifted_at = now
    demotion.lifted_by = user
    demotion.lift_reason = reason
    demotion.save(update_fields=["lifted_at", "lifted_by", "lift_reason"])
    team_priority_override_set(team=team, priority_class=None)
    who = f" by {user.get_username()}" if user is not None else ""
    Notification.objects.create(
        team=team,
        kind=Notification.Kind.DEMOTION_LIFTED,
        budget=demotion.budget,
        period_start=demotion.period_start,
        message=f"Demotion lifted{who}: new jobs use their own priority class again.{' ' + reason if reason else ''}",
        created_at=now,
    )
    return demotion


@transaction.atomic
def budget_set(
    *,
    team: Team,
    amount: Decimal | str | int,
    currency: str = "",
    period: str = Budget.Period.MONTH,
    thresholds: list[int] | None = None,
    action_at_limit: str = Budget.Action.NONE,
    active: bool = True,
) -> Budget:
    """Create or change the team's budget for a period kind (one per team, period and currency)."""
    errors: dict[str, list[str]] = {}
    try:
        value = Decimal(str(amount))
        if value <= 0:
            errors["amount"] = ["a budget must be more than zero"]
    except ArithmeticError:
        errors["amount"] = [f"{amount!r} is not a number"]
        value = Decimal(0)
    if period not in Budget.Period.values:
        errors["period"] = [f"{period!r} is not one of {', '.join(Budget.Period.values)}"]
    if action_at_limit not in Budget.Action.values:
        errors["action_at_limit"] = [f"{action_at_limit!r} is not a known action"]
    values = list(thresholds if thresholds is not None else DEFAULT_THRESHOLDS)
    if not values or any(not isinstance(t, int) or not 0 < t <= 1000 for t in values):
        errors["thresholds"] = ["give whole percentages between 1 and 1000, e.g. [50, 80, 100]"]
    if errors:
        raise ValidationFailed(errors)
    budget, _ = Budget.objects.update_or_create(
        team=team,
        period=period,
        currency=(currency or default_currency()).upper(),
        defaults={
            "amount": value,
            "thresholds": sorted(set(values)),
            "action_at_limit": action_at_limit,
            "active": active,
        },
    )
    return budget
