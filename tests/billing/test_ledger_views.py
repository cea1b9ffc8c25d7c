"""Borrowing statements: the page, its CSV and the API have the ledger's numbers and add up with the cost report."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import CohortSettlement
from queues.api.tokens import api_token_create
from tests.billing.test_ledger import MARCH, march  # noqa: F401 - the fixture
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

URL = reverse("billing:ledger")
CSV_URL = reverse("billing:ledger_csv")
HTMX = {"HTTP_HX_REQUEST": "true"}


def login(client, user):
    client.force_login(user)
    return client


def test_the_lenders_statement_page(client, march):  # noqa: F811
    world, _b, _c = march
    html = login(client, world.carol).get(URL, {"team": "nlp", "month": "2026-03"}).content.decode()
    assert "NLP — March 2026" in html
    assert 'id="billing-ledger-lent"' in html
    assert "16.00 EUR" in html
    assert "5,936.00 EUR" in html or "5936.00 EUR" in html


def test_the_borrowers_statement_lists_the_reclaim(client, march):  # noqa: F811
    world, b, _c = march
    html = login(client, world.lead).get(URL, {"team": "vision", "month": "2026-03"}, **HTMX).content.decode()
    assert html.startswith('<section id="billing-ledger-report"')
    assert reverse("queues:job_detail", args=[b.pk]) in html
    assert "InCohortReclamation" in html


def test_other_teams_and_bad_months(client, march):  # noqa: F811
    world, _b, _c = march
    assert login(client, world.carol).get(URL, {"team": "vision"}).status_code == 404
    html = login(client, world.carol).get(URL, {"team": "nlp", "month": "March"}, **HTMX).content.decode()
    assert "is not a month; use YYYY-MM" in html
    outsider = UserFactory(username="dave")
    assert "You do not lead a team" in login(client, outsider).get(URL).content.decode()


def test_statement_csv_adds_up_with_the_cost_report(client, march):  # noqa: F811
    world, _b, _c = march
    CohortSettlement.objects.create(cohort=world.cohort, effective_from=MARCH, share_percent=Decimal("50"))
    response = login(client, world.lead).get(CSV_URL, {"team": "vision", "month": "2026-03"})
    assert response.status_code == 200
    assert 'filename="ledger-vision-2026-03.csv"' in response["Content-Disposition"]
    rows = {(r["section"], r["counterpart"]): r for r in csv.DictReader(io.StringIO(response.content.decode()))}
    assert rows[("borrowed", "nlp")]["hours"] == "8.000"
    assert rows[("borrowed", "nlp")]["value_EUR"] == "16.00"
    assert rows[("borrowed", "nlp")]["settled_EUR"] == "8.00"
    assert rows[("reclaim_suffered", "nlp")]["lost_device_hours"] == "4.000000"
    assert rows[("settlement_adjustment", "")]["value_EUR"] == "-8.00"
    assert rows[("charge", "")]["value_EUR"] == "5960.00"
    cost = login(client, world.lead).get(
        reverse("billing:cost_csv"), {"team": "vision", "start": "2026-03-01", "end": "2026-03-31", "bucket": "month"}
    )
    total = next(r for r in csv.DictReader(io.StringIO(cost.content.decode())) if r["section"] == "total")
    assert total["charge_EUR"] == "5960.00"
    assert total["settlement_EUR"] == "-8.00"


def test_staff_see_the_cohort_ledger(client, march):  # noqa: F811
    _world, _b, _c = march
    staff = UserFactory(username="root", is_staff=True)
    html = login(client, staff).get(URL, {"team": "all", "month": "2026-03"}).content.decode()
    assert 'id="billing-ledger-lines"' in html
    response = login(client, staff).get(CSV_URL, {"team": "all", "month": "2026-03"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["lender"], r["borrower"], r["hours"], r["value_EUR"], r["reclaims"]) for r in rows] == [
        ("nlp", "vision", "8.000", "16.00", "1")
    ]


def test_the_cost_page_shows_who_lent_to_whom(client, march):  # noqa: F811
    world, _b, _c = march
    html = (
        login(client, world.lead)
        .get(reverse("billing:cost"), {"team": "vision", "start": "2026-03-01", "end": "2026-03-31"})
        .content.decode()
    )
    assert 'id="billing-borrowing"' in html
    assert reverse("billing:ledger") + "?team=vision&amp;month=2026-03" in html


def test_statement_api(client, march):  # noqa: F811
    world, _b, _c = march
    body = login(client, world.lead).get("/api/billing/statement/", {"team": "vision", "month": "2026-03"}).json()
    assert body["borrowed"] == [{"team": "nlp", "hours": "8.000", "value": {"EUR": "16.00"}, "settled": None}]
    assert body["totals"]["borrowedCost"] == {"EUR": "16.00"}
    assert body["totals"]["charge"] == {"EUR": "5968.00"}
    assert [r["lostDeviceHours"] for r in body["reclaimsSuffered"]] == ["4.000000"]
    assert client.get("/api/billing/statement/", {"team": "nlp", "month": "2026-03"}).status_code == 404
    assert client.get("/api/billing/statement/", {"team": "vision", "month": "2026-13"}).status_code == 400
    ledger = client.get("/api/billing/ledger/", {"month": "2026-03"}).json()
    assert ledger["lines"] == [
        {"lender": "nlp", "borrower": "vision", "hours": "8.000", "value": {"EUR": "16.00"}, "reclaims": 1}
    ]


def test_a_token_reads_only_its_team(client, march):  # noqa: F811
    world, _b, _c = march
    token = api_token_create(user=world.lead, team=world.team, name="ci").key
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    assert client.get("/api/billing/statement/", {"month": "2026-03"}, **auth).status_code == 200
    member_token = api_token_create(user=world.alice, team=world.team, name="ci").key
    denied = client.get("/api/billing/statement/", {"month": "2026-03"}, HTTP_AUTHORIZATION=f"Token {member_token}")
    assert denied.status_code == 403
