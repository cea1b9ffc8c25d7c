"""Cost of reservations: reserved device-hours are charged to the reserving team whether used or not (the used part as
usage, the unused part as the unused reservation), on the cost report, its CSV and JSON; the day after a window its
leads hear what went unused, once."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing import selectors, services
from billing.models import Notification
from billing.reporting import report_csv, report_json
from notify.models import Event as NotifyEvent
from pools.models import Allocation
from queues.models import Reservation
from tests.browser.scenarios import occupy
from tests.reservations.world import approved, reservation_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    world = reservation_world()
    services.rate_set(flavor=world.pool.flavor, price_per_hour="2.00", effective_from=datetime(2026, 1, 1, tzinfo=UTC))
    return world


def day_at(days_ago: int, hour: int) -> datetime:
    """``hour`` o'clock (local time) ``days_ago`` days before today."""
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days_ago) + timedelta(hours=hour)


def ran(world, *, node: int, count: int, team, start: datetime, end: datetime) -> None:
    """A job of ``team`` held ``count`` GPUs of a node over [start, end)."""
    job = occupy(world.pool, node=world.pool.nodes[node], count=count, team=team, started=start, name=f"j{node}")
    Allocation.objects.filter(job=job).update(ended_at=end)


@pytest.fixture
def used_half(world):
    """Speech reserved 8 for 09:00–12:00 two days ago (24 device-hours) and used 12 of them: 4 GPUs 09:00–11:00 and
    4 more 08:00–10:00 (the hour before the window is usage, not reservation); Vision's job on the same hardware in
    the window is not Speech's use."""
    start, end = day_at(2, 9), day_at(2, 12)
    row = approved(world, count=8, start=start, end=end)
    ran(world, node=0, count=4, team=world.speech, start=start, end=start + timedelta(hours=2))
    ran(world, node=1, count=4, team=world.speech, start=start - timedelta(hours=1), end=start + timedelta(hours=1))
    ran(world, node=2, count=4, team=world.vision, start=start, end=end)
    return row


def test_the_unused_part_is_charged_and_the_report_shows_used_and_unused(world, used_half):
    day = timezone.localdate() - timedelta(days=2)
    report = selectors.cost_report(teams=[world.speech], start=day, end=day)
    [line] = report.reservations.lines
    assert line.reservation == used_half
    assert line.use.reserved_hours == Decimal(24)
    assert line.use.used_hours == Decimal(12)
    assert line.use.unused_hours == Decimal(12)
    assert line.use.unused_cost == {"EUR": Decimal("24.00000000")}
    assert report.charge["EUR"] == report.totals.cost.get("EUR", Decimal(0)) + Decimal(24) + report.net_idle_cost.get(
        "EUR", Decimal(0)
    )
    # Vision's report carries none of it.
    assert not selectors.cost_report(teams=[world.vision], start=day, end=day).reservations.lines


def test_csv_and_json_carry_the_reservation_and_each_period_adds_up_to_the_charge(world, used_half):
    day = timezone.localdate() - timedelta(days=2)
    report = selectors.cost_report(teams=[world.speech], start=day - timedelta(days=1), end=day + timedelta(days=1))
    rows = list(csv.DictReader(io.StringIO(report_csv(report))))
    [line] = [r for r in rows if r["section"] == "reservation"]
    assert line["key"] == str(used_half.pk)
    assert line["label"].startswith("Speech: 8 × ")
    assert (line["reservation_hours"], line["reservation_used_hours"], line["reservation_unused_hours"]) == (
        "24.000",
        "12.000",
        "12.000",
    )
    assert line["reservation_unused_cost_EUR"] == line["charge_EUR"] == "24.00"
    periods = [r for r in rows if r["section"] == "day"]
    assert [r["reservation_unused_hours"] for r in periods] == ["0.000", "12.000", "0.000"]
    total = next(r for r in rows if r["section"] == "total")
    assert sum(Decimal(r["charge_EUR"]) for r in periods) == Decimal(total["charge_EUR"])
    assert total["reservation_unused_cost_EUR"] == "24.00"
    data = report_json(report)
    assert data["total"]["reservationUnusedCost"] == {"EUR": "24.00"}
    assert data["reservations"][0]["usedHours"] == "12.000"


def test_a_window_cancelled_half_way_is_charged_to_the_cancellation_and_one_cancelled_before_not_at_all(world):
    start = day_at(2, 9)
    halfway = approved(world, count=4, start=start, end=start + timedelta(hours=4))
    Reservation.objects.filter(pk=halfway.pk).update(
        state=Reservation.State.CANCELLED, cancelled_at=start + timedelta(hours=1)
    )
    early = approved(world, count=8, start=start, end=start + timedelta(hours=4))
    Reservation.objects.filter(pk=early.pk).update(
        state=Reservation.State.CANCELLED, cancelled_at=start - timedelta(hours=1)
    )
    report = selectors.cost_report(teams=[world.speech], start=start.date(), end=start.date())
    assert [(line.reservation.pk, line.use.reserved_hours) for line in report.reservations.lines] == [
        (halfway.pk, Decimal(4))
    ]


def test_an_open_window_is_charged_up_to_now_only(world):
    now = timezone.now()
    start = now - timedelta(hours=1)
    approved(world, count=2, start=start, end=now + timedelta(hours=5))
    # from the window's first day (just after midnight it began yesterday) to today
    report = selectors.cost_report(teams=[world.speech], start=timezone.localdate(start), end=timezone.localdate())
    assert Decimal(2) - report.reservations.total.reserved_hours < Decimal("0.01")


def test_the_cost_page_lists_the_reservation(world, used_half):
    day = timezone.localdate() - timedelta(days=2)
    client = Client()
    client.force_login(world.frank)
    page = client.get(reverse("billing:cost"), {"team": "speech", "start": f"{day}", "end": f"{day}"})
    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="billing-reservations"' in body
    assert f'data-reservation="{used_half.pk}"' in body
    assert 'data-part="reservation"' in body


def test_the_leads_hear_of_the_unused_part_the_next_day_once(world, used_half, settings):
    settings.BILLING_TIME_ZONE = "UTC"
    same_day = used_half.ends_at + timedelta(hours=1)
    if timezone.localtime(same_day, UTC).date() == timezone.localtime(used_half.ends_at, UTC).date():
        assert services.reservation_unused_notices(now=same_day) == []
    next_day = used_half.ends_at + timedelta(days=1)
    [notice] = services.reservation_unused_notices(now=next_day)
    assert notice.reservation == used_half
    assert notice.unused_hours == Decimal(12)
    note = Notification.objects.get(kind=Notification.Kind.RESERVATION_UNUSED)
    assert note.team == world.speech
    assert "12.0 of 24.0 device-hours were not used" in note.message
    assert "the unused part costs 24.00 EUR" in note.message
    [event] = NotifyEvent.objects.filter(kind="reservation_unused")
    assert event.recipient == world.frank
    assert services.reservation_unused_notices(now=next_day + timedelta(hours=1)) == []
    assert Notification.objects.filter(kind=Notification.Kind.RESERVATION_UNUSED).count() == 1


def test_a_reservation_used_in_full_is_not_reported(world):
    start, end = day_at(2, 9), day_at(2, 11)
    approved(world, count=4, start=start, end=end)
    ran(world, node=0, count=4, team=world.speech, start=start - timedelta(minutes=5), end=end)
    assert services.reservation_unused_notices(now=end + timedelta(days=1)) == []
    assert not Notification.objects.filter(kind=Notification.Kind.RESERVATION_UNUSED).exists()
