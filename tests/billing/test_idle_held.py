"""Idle GPU-hours held: device time running jobs held while their cards were idle (DCGM), per person and team.

Worked by hand: alice holds cards A and B from 08:00 to 11:00 (6 device-hours). Samples every 10 minutes
(18 per card in [08:00, 11:00)): A is at 1 % throughout (18 of 18 idle: 3 h), B at 80 % until 10:00 and at 0 %
after (6 of 18 idle: 1 h) — alice held 4 idle GPU-hours. Bob's card has no samples (unknown, not idle): 0.
Carol (team nlp) holds five cards 08:00–09:00; one of them is at 2 % (6 of 6 idle: 1 h), the others are not scraped.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from billing import selectors, services
from billing.models import UsageDaily, UsageTeamDaily, UsageTeamMonthly
from billing.pricing import US_PER_HOUR
from pools.gpu_usage import utilisation_record
from tests.billing.conftest import T0, H, run_job

pytestmark = pytest.mark.django_db

TEN_MINUTES = timedelta(minutes=10)


def sample(card_id: int, percents: list[float]) -> None:
    for i, percent in enumerate(percents):
        utilisation_record([(card_id, percent)], now=T0 + i * TEN_MINUTES)


@pytest.fixture
def idle(world, settings):
    settings.NOTIFY_IDLE_PERCENT = 5.0
    card_a, card_b, bobs, *carols = world.devices
    run_job(world, devices=[card_a, card_b], start=T0, end=T0 + 3 * H)
    sample(card_a.pk, [1.0] * 18)
    sample(card_b.pk, [80.0] * 12 + [0.0] * 6)
    run_job(world, owner=world.bob, devices=[bobs], start=T0 + H, end=T0 + 2 * H)
    run_job(world, team=world.other, owner=world.carol, devices=carols, start=T0, end=T0 + H, borrowing=True)
    sample(carols[0].pk, [2.0] * 6)
    end = T0 + timedelta(days=1)
    services.metering_sync(now=end)
    services.usage_rollup(day=T0.date(), now=end)
    return world


def test_rollup_holds_idle_gpu_hours_per_user_team_and_month(idle):
    assert UsageDaily.objects.get(user=idle.alice).idle_held_us == 4 * US_PER_HOUR
    assert UsageDaily.objects.get(user=idle.bob).idle_held_us == 0
    assert UsageDaily.objects.get(user=idle.carol).idle_held_us == 1 * US_PER_HOUR
    team = dict(UsageTeamDaily.objects.values_list("team__slug", "idle_held_us"))
    assert team == {"vision": 4 * US_PER_HOUR, "nlp": 1 * US_PER_HOUR}
    assert UsageTeamMonthly.objects.get(team=idle.team).idle_held_us == 4 * US_PER_HOUR


def test_a_sample_at_the_threshold_is_not_idle(world, settings):
    settings.NOTIFY_IDLE_PERCENT = 5.0
    job = run_job(world, devices=1, start=T0, end=T0 + H)
    sample(job.allocations.get().device_id, [5.0] * 3 + [4.9] * 3)
    services.metering_sync(now=T0 + 2 * H)
    services.usage_rollup(day=T0.date(), now=T0 + 2 * H)
    assert UsageDaily.objects.get(user=world.alice).idle_held_us == US_PER_HOUR // 2


def test_cost_report_gives_idle_held_hours_per_user_and_team(idle):
    day = T0.date()
    report = selectors.cost_report(teams=[idle.team], start=day.replace(day=1), end=day.replace(day=31))
    assert report.totals.idle_held_hours == Decimal(4)
    assert {g.label: g.usage.idle_held_hours for g in report.by_user} == {
        idle.alice.get_full_name(): Decimal(4),
        idle.bob.get_full_name(): Decimal(0),
    }
    everyone = selectors.cost_report(teams=None, start=day.replace(day=1), end=day.replace(day=31), bucket="month")
    assert {g.label: g.usage.idle_held_hours for g in everyone.by_team} == {"Vision": Decimal(4), "NLP": Decimal(1)}


def test_cost_page_and_csv_show_idle_held_hours(client, idle):
    client.force_login(idle.lead)
    query = {"start": "2026-03-01", "end": "2026-03-31"}
    html = client.get(reverse("billing:cost"), query).content.decode()
    assert "Held idle GPU-h" in html
    assert "Held idle: 4.0" in html
    rows = list(csv.DictReader(io.StringIO(client.get(reverse("billing:cost_csv"), query).content.decode())))
    total = next(r for r in rows if r["section"] == "total")
    assert Decimal(total["idle_held_hours"]) == 4
    users = {r["label"]: Decimal(r["idle_held_hours"]) for r in rows if r["section"] == "user"}
    assert users == {idle.alice.get_full_name(): 4, idle.bob.get_full_name(): 0}


def test_my_page_shows_my_idle_held_hours(client, idle, settings):
    client.force_login(idle.alice)
    html = client.get(reverse("billing:usage_mine"), {"months": "24"}).content.decode()
    assert 'data-total="idle-held">4.0' in html
