"""Admin goes through the services (rate overlaps are form errors); selectors for other pages."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from billing import selectors, services
from billing.models import Rate, TeamDemotion
from tests.billing.conftest import T0, H, run_job
from tests.factories import PriorityClassFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def rate_form(world, **overrides) -> dict:
    data = {
        "flavor": world.flavor.pk,
        "kind": "full",
        "mig_profile": "",
        "price_per_hour": "3.00",
        "currency": "EUR",
        "effective_from_0": "2026-04-01",
        "effective_from_1": "00:00:00",
        "effective_to_0": "",
        "effective_to_1": "",
        "note": "",
    }
    data.update(overrides)
    return data


def test_admin_rate_add_closes_the_previous_rate(admin_client, world):
    response = admin_client.post(reverse("admin:billing_rate_add"), rate_form(world))
    assert response.status_code == 302
    assert Rate.objects.count() == 2
    assert Rate.objects.get(price_per_hour=Decimal("2.00")).effective_to is not None


def test_admin_rate_overlap_is_a_form_error(admin_client, world):
    services.rate_set(flavor=world.flavor, price_per_hour="3", effective_from=T0, effective_to=T0 + timedelta(days=30))
    response = admin_client.post(reverse("admin:billing_rate_add"), rate_form(world, effective_from_0="2026-03-20"))
    assert response.status_code == 200
    assert "overlaps the rate in force from" in response.content.decode()
    assert Rate.objects.count() == 2


def test_admin_lifts_a_demotion(admin_client, world):
    PriorityClassFactory(name="scavenger", value=1, may_preempt=False)
    demotion = services.team_demote(team=world.team, now=T0, reason="test")
    response = admin_client.post(
        reverse("admin:billing_teamdemotion_changelist"), {"action": "lift", "_selected_action": [demotion.pk]}
    )
    assert response.status_code == 302
    assert TeamDemotion.objects.get().lifted_at is not None


def test_job_usage_sums_a_jobs_records(world):
    job = run_job(world, devices=2, start=T0, end=T0 + 90 * timedelta(minutes=1))
    services.metering_sync(now=T0 + 2 * H)
    usage = selectors.job_usage([job.pk])[job.pk]
    assert usage.device_hours == Decimal(3)
    assert usage.cost == {"EUR": Decimal("6.00")}


def test_budget_notification_is_shown_on_the_cost_page(client, world):
    run_job(world, devices=4, start=T0, end=T0 + 10 * H)
    services.metering_sync(now=T0 + 11 * H)
    services.budget_set(team=world.team, amount="100")
    services.budget_check(now=T0 + 11 * H)
    client.force_login(world.lead)
    html = client.get(reverse("billing:cost"), {"start": "2026-03-01", "end": "2026-03-31"}).content.decode()
    assert "has used 80 % of its monthly budget" in html
    assert "Budgets" in html
