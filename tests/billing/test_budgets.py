"""Budgets: thresholds notified once per period, the leads told through the lifecycle outbox, reversible demotion
at 100 %."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail

from billing import selectors, services
from billing.models import Budget, Notification, TeamDemotion
from kernel.errors import ValidationFailed
from notify import tasks as notify_tasks
from notify.models import Event as NotifyEvent
from tests.billing.conftest import T0, H, run_job
from tests.factories import PriorityClassFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def spent_60(world):
    """Vision spent 60 EUR in March 2026 (30 device-hours at 2 EUR)."""
    run_job(world, devices=3, start=T0, end=T0 + 10 * H)
    services.metering_sync(now=T0 + 11 * H)
    return world


def test_period_bounds_month_and_quarter():
    assert services.period_bounds("month", date(2026, 12, 15)) == (date(2026, 12, 1), date(2027, 1, 1))
    assert services.period_bounds("quarter", date(2026, 5, 31)) == (date(2026, 4, 1), date(2026, 7, 1))
    assert services.period_bounds("quarter", date(2026, 11, 1)) == (date(2026, 10, 1), date(2027, 1, 1))


def test_budget_check_notifies_each_threshold_once_and_mails_the_leads(spent_60, settings):
    settings.NOTIFY_BATCH_SECONDS, settings.NOTIFY_STALE_SECONDS = 0, 10**9  # the check's clock is March 2026
    world = spent_60
    services.budget_set(team=world.team, amount="100", thresholds=[50, 80, 100])
    [check] = services.budget_check(now=T0 + 12 * H)
    assert check.spent == Decimal("60")
    assert check.notified == [50]
    # the leads are told through the lifecycle outbox, recorded in the check's transaction
    [event] = NotifyEvent.objects.filter(kind="budget")
    assert event.recipient.email == "lead@example.org"
    NotifyEvent.objects.exclude(kind="budget").delete()  # the metered job's own lifecycle (its owner's)
    notify_tasks.deliver_pending()
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["lead@example.org"]
    assert "50 %" in mail.outbox[0].subject
    assert services.budget_check(now=T0 + 13 * H)[0].notified == []
    notify_tasks.deliver_pending()
    assert len(mail.outbox) == 1
    assert Notification.objects.filter(kind="budget_threshold").count() == 1
    assert NotifyEvent.objects.filter(kind="budget").count() == 1


def test_budget_check_without_mail_records_the_notification_for_nobody(spent_60, django_capture_on_commit_callbacks):
    world = spent_60
    services.budget_set(team=world.team, amount="100", thresholds=[50])
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        [check] = services.budget_check(now=T0 + 12 * H, mail=False)
    assert check.notified == [50]
    assert callbacks == []
    assert mail.outbox == []
    assert not NotifyEvent.objects.filter(kind="budget").exists()
    assert Notification.objects.get(kind="budget_threshold").emailed_to == []


def test_budget_check_notifies_again_in_the_next_period(spent_60, django_capture_on_commit_callbacks):
    world = spent_60
    services.budget_set(team=world.team, amount="100", thresholds=[50])
    services.budget_check(now=T0 + 12 * H)
    april = datetime(2026, 4, 2, tzinfo=UTC)
    run_job(world, devices=3, start=april, end=april + 10 * H)
    services.metering_sync(now=april + 11 * H)
    with django_capture_on_commit_callbacks(execute=True):
        [check] = services.budget_check(now=april + 12 * H)
    assert check.notified == [50]
    assert list(Notification.objects.values_list("period_start", flat=True).order_by("period_start")) == [
        date(2026, 3, 1),
        date(2026, 4, 1),
    ]


def test_budget_at_100_percent_demotes_the_team_reversibly(spent_60):
    world = spent_60
    PriorityClassFactory(name="batch-low", value=10, may_preempt=False)
    PriorityClassFactory(name="scavenger", value=1, may_preempt=False)
    PriorityClassFactory(name="urgent", value=1000, may_preempt=True)
    services.budget_set(team=world.team, amount="50", action_at_limit=Budget.Action.DEMOTE)
    [check] = services.budget_check(now=T0 + 12 * H)
    assert check.notified == [50, 80, 100]
    demotion = TeamDemotion.objects.get(team=world.team)
    assert demotion.priority_class.name == "scavenger"
    assert _override(world.team).name == "scavenger"
    assert _override(world.other) is None
    services.budget_check(now=T0 + 13 * H)
    assert TeamDemotion.objects.count() == 1
    services.team_demotion_lift(team=world.team, now=T0 + 14 * H, user=world.lead, reason="budget raised")
    assert _override(world.team) is None
    assert Notification.objects.filter(kind=Notification.Kind.DEMOTION_LIFTED).exists()
    with pytest.raises(ValidationFailed):
        services.team_demotion_lift(team=world.team, now=T0 + 15 * H)
    services.budget_check(now=T0 + 16 * H)  # the 100 % of this period was already acted upon
    assert _override(world.team) is None


def test_demotion_without_a_non_preempting_class_is_reported_not_applied(spent_60):
    world = spent_60
    services.budget_set(team=world.team, amount="50", action_at_limit=Budget.Action.DEMOTE)
    services.budget_check(now=T0 + 12 * H)
    assert not TeamDemotion.objects.exists()
    assert Notification.objects.filter(kind=Notification.Kind.DEMOTION_FAILED).exists()


def test_budget_counts_only_its_currency_and_period(spent_60):
    world = spent_60
    budget = services.budget_set(team=world.team, amount="1000", currency="USD")
    assert services.budget_spent(budget, start=date(2026, 3, 1), end=date(2026, 4, 1)) == 0
    eur = services.budget_set(team=world.team, amount="1000")
    assert services.budget_spent(eur, start=date(2026, 3, 1), end=date(2026, 4, 1)) == Decimal("60")
    assert services.budget_spent(eur, start=date(2026, 4, 1), end=date(2026, 5, 1)) == 0


def test_budget_set_validates(world):
    with pytest.raises(ValidationFailed) as exc:
        services.budget_set(team=world.team, amount="0", thresholds=[0], period="week")
    assert set(exc.value.errors) == {"amount", "thresholds", "period"}


def test_budget_statuses_for_the_page(spent_60):
    world = spent_60
    services.budget_set(team=world.team, amount="80")
    today = date(2026, 3, 10)
    [status] = selectors.budget_statuses(teams=[world.team], start=today, end=today, today=today)
    assert status.percent == Decimal("75.0")
    assert status.level == "warning"
    assert (status.label, status.closed) == ("March 2026", False)


def test_budgets_follow_the_viewed_months_and_compare_each_with_the_one_before(spent_60):
    """Issue 32: the page showed this month's budget whatever month it viewed ("were we over budget last month?")."""
    world = spent_60  # 60 EUR in March 2026
    run_job(world, devices=2, start=T0 + timedelta(days=30), end=T0 + timedelta(days=30, hours=25))  # April: 100
    services.metering_sync(now=T0 + timedelta(days=32))
    services.budget_set(team=world.team, amount="80")
    today = date(2026, 5, 20)
    march, april = selectors.budget_statuses(
        teams=[world.team], start=date(2026, 3, 1), end=date(2026, 4, 30), today=today
    )
    assert (march.label, march.spent, march.closed, march.previous) == ("March 2026", Decimal("60"), True, 0)
    assert (april.label, april.spent, april.level) == ("April 2026", Decimal("100"), "over")
    assert april.change == Decimal("40")
    # Viewing May (still running) shows May so far; a range ending in the future stops at today.
    [may] = selectors.budget_statuses(teams=[world.team], start=date(2026, 5, 1), end=date(2026, 6, 30), today=today)
    assert (may.label, may.spent, may.closed, may.previous) == ("May 2026", 0, False, Decimal("100"))


def test_a_demoted_team_submits_at_the_demotion_class(spent_60):
    from queues import services as job_services

    world = spent_60
    scavenger = PriorityClassFactory(name="scavenger", value=1, may_preempt=False)
    urgent = PriorityClassFactory(name="urgent", value=1000, may_preempt=True)
    spec = job_services.JobSpec(name="train", image="registry.example/train:1", resource_class=world.rc)
    before = job_services.job_submit(owner=world.alice, team=world.team, spec=spec, notify_backend=False)
    assert before.priority_class != scavenger
    services.budget_set(team=world.team, amount="50", action_at_limit=Budget.Action.DEMOTE)
    services.budget_check(now=T0 + 12 * H)
    spec.priority_class = urgent
    demoted = job_services.job_submit(owner=world.alice, team=world.team, spec=spec, notify_backend=False)
    assert (demoted.priority_class, demoted.priority) == (scavenger, 1)
    other = job_services.job_submit(owner=world.carol, team=world.other, spec=spec, notify_backend=False)
    assert other.priority_class == urgent
    services.team_demotion_lift(team=world.team, now=T0 + 14 * H, user=world.lead)
    again = job_services.job_submit(owner=world.alice, team=world.team, spec=spec, notify_backend=False)
    assert again.priority_class == urgent


def _override(team):
    """The priority class the team's new jobs are forced to (queues.Team.priority_override), read afresh."""
    team.refresh_from_db()
    return team.priority_override
