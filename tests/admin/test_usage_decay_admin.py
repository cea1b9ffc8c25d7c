"""The admin of fairness that remembers (a cohort's usage half-life) and of internal settlement."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import CohortSettlement
from queues.models import Cohort
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, pool):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def _cohort_post(**fields) -> dict:
    return {
        "name": "research",
        "parent": "",
        "fair_weight": "1",
        "shortfall_policy": "warn",
        "lines-TOTAL_FORMS": "0",
        "lines-INITIAL_FORMS": "0",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "1000",
        "_save": "Save",
        **fields,
    }


def test_a_half_life_out_of_bounds_is_a_field_error(admin_client, pool):
    url = reverse("admin:queues_cohort_change", args=[pool.cohort.pk])
    response = admin_client.post(url, _cohort_post(usage_half_life="100 00:00:00"))
    assert response.status_code == 200
    assert "Choose from 1 hour to 90 days" in response.content.decode()
    assert Cohort.objects.get(pk=pool.cohort.pk).usage_half_life is None


def test_switching_it_on_is_previewed_first(admin_client, pool, django_capture_on_commit_callbacks):
    url = reverse("admin:queues_cohort_change", args=[pool.cohort.pk])
    with django_capture_on_commit_callbacks(execute=True):  # no broker in tests: the replay runs eagerly
        response = admin_client.post(url, _cohort_post(usage_half_life="3 12:00:00"))
    preview = admin_client.get(response["Location"]).content.decode()
    assert "Cohort research: fairness that remembers off → half-life 3.5 days over 7 days" in preview
    assert Cohort.objects.get(pk=pool.cohort.pk).usage_half_life is None  # not saved before it is applied


def test_settlement_admin_checks_the_month_and_the_cohort(admin_client, pool):
    url = reverse("admin:billing_cohortsettlement_add")
    child = Cohort.objects.create(name="child", parent=pool.cohort)
    bad = admin_client.post(url, {"cohort": child.pk, "effective_from": "2026-03-15", "share_percent": "150"})
    text = bad.content.decode()
    assert "Choose the first day of a month (e.g. 2026-03-01)" in text
    assert "Choose a root cohort" in text
    assert "choose from 0 to 100 %" in text.lower()
    ok = admin_client.post(url, {"cohort": pool.cohort.pk, "effective_from": "2026-03-01", "share_percent": "60"})
    assert ok.status_code == 302
    row = CohortSettlement.objects.get()
    assert (row.effective_from, row.share_percent) == (date(2026, 3, 1), Decimal("60.00"))
