"""Cost pages: who sees what, page vs fragment, local plotly.js, CSV with the same numbers, query caps."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from billing import reporting, selectors, services
from tests.billing.conftest import T0, H, run_job
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

URL = reverse("billing:cost")
CSV_URL = reverse("billing:cost_csv")
RANGE = {"start": "2026-03-01", "end": "2026-03-31"}
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def usage(world):
    """A day of usage for both teams, metered and rolled up."""
    run_job(world, devices=2, start=T0, end=T0 + 3 * H)
    run_job(world, owner=world.bob, devices=1, start=T0 + H, end=T0 + 2 * H)
    run_job(world, team=world.other, owner=world.carol, devices=6, start=T0, end=T0 + H, borrowing=True)
    end = T0 + timedelta(days=1)
    services.metering_sync(now=end)
    services.usage_rollup(day=T0.date(), now=end)
    return world


def login(client, user):
    client.force_login(user)
    return client


def test_cost_page_requires_login(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert reverse("login") in response["Location"]


def test_cost_page_shows_the_leads_team_with_local_plotly(client, usage):
    response = login(client, usage.lead).get(URL, RANGE)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Vision" in html
    assert usage.alice.get_full_name() in html
    assert usage.bob.get_full_name() in html
    assert usage.carol.get_full_name() not in html
    # The cost charts are scatter and bar traces only: the partial bundle, not the 4.8 MB full one.
    assert "/static/vendor/plotly-basic/plotly-basic.min.js" in html
    assert "/static/vendor/plotly/plotly.min.js" not in html
    assert "billing/cost_charts.js" in html
    assert 'id="billing-fig-hours"' in html
    assert "https://" not in html
    assert "http://" not in html
    assert "Vary" in response
    assert "HX-Request" in response["Vary"]


def test_cost_page_refuses_a_team_the_lead_does_not_lead(client, usage):
    assert login(client, usage.lead).get(URL, {**RANGE, "team": "nlp"}).status_code == 404
    assert client.get(CSV_URL, {**RANGE, "team": "nlp"}).status_code == 404


def test_cost_page_for_a_plain_member_says_there_is_nothing_to_show(client, usage):
    response = login(client, usage.alice).get(URL)
    assert response.status_code == 200
    assert "You do not lead a team" in response.content.decode()
    assert login(client, usage.alice).get(URL, {"team": "vision"}).status_code == 404


def test_cost_page_staff_sees_every_team(client, usage):
    admin = UserFactory(username="admin", is_staff=True)
    response = login(client, admin).get(URL, {**RANGE, "team": "all"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Vision" in html
    assert "NLP" in html
    assert "All teams" in html
    assert login(client, admin).get(URL, {**RANGE, "team": "nlp"}).status_code == 200


def test_cost_page_htmx_returns_the_fragment_only(client, usage):
    response = login(client, usage.lead).get(URL, {**RANGE, "bucket": "week"}, **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith('<section id="billing-cost-report"')
    assert "<html" not in html
    assert "<body" not in html
    assert "Per week" in html


def test_cost_page_bad_filters_are_form_errors(client, usage):
    response = login(client, usage.lead).get(URL, {"start": "2026-03-10", "end": "2026-03-01"})
    assert response.status_code == 200
    assert "must not be before" in response.content.decode()
    assert client.get(CSV_URL, {"start": "yesterday"}).status_code == 400


def test_cost_page_query_count_is_bounded(client, usage, django_assert_max_num_queries):
    login(client, usage.lead)
    # + the jobs panel: totals, ranking, the chosen jobs and their usage; the navigation asks whether the user is in
    # a team (the Submit link) and whether the health pages are theirs to read (their and their groups' permissions);
    # + whether any cohort settles borrowing internally (the settlement's adjustment); + the borrowing panel: the
    # ledger's rows, the reclaims between the teams, their names; + the team's reservations in the range (none here)
    with django_assert_max_num_queries(28):
        client.get(URL, {"start": "2026-01-01", "end": "2026-12-31", "bucket": "month"})


def test_cost_csv_has_the_same_numbers_as_the_report(client, usage):
    response = login(client, usage.lead).get(CSV_URL, RANGE)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "cost-vision-2026-03-01-2026-03-31.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    total = next(r for r in rows if r["section"] == "total")
    report = selectors.cost_report(teams=[usage.team], start=T0.date().replace(day=1), end=T0.date().replace(day=31))
    assert Decimal(total["used_hours"]) == report.totals.used_hours == Decimal(7)
    assert Decimal(total["cost_EUR"]) == Decimal("14.00")
    assert Decimal(total["lent_hours"]) == Decimal(2)
    users = {r["label"]: r for r in rows if r["section"] == "user"}
    assert Decimal(users[usage.alice.get_full_name()]["owned_hours"]) == 6
    assert Decimal(users[usage.bob.get_full_name()]["owned_hours"]) == 1
    assert sum(Decimal(r["used_hours"]) for r in rows if r["section"] == "day") == Decimal(7)


def test_cost_csv_filtered_by_user(client, usage):
    response = login(client, usage.lead).get(CSV_URL, {**RANGE, "user": str(usage.bob.pk)})
    total = next(r for r in csv.DictReader(io.StringIO(response.content.decode())) if r["section"] == "total")
    assert Decimal(total["used_hours"]) == 1


def test_cost_page_lists_the_jobs_and_their_total_equals_the_usage(client, usage):
    login(client, usage.lead)
    response = client.get(URL, RANGE)
    jobs = response.context["jobs"]
    report = response.context["report"]
    assert jobs.count == 2
    assert [r.job.owner for r in jobs.rows] == [usage.alice, usage.bob]  # 6 h, then 1 h
    assert jobs.totals.owned_us + jobs.totals.borrowed_us == report.totals.owned_us + report.totals.borrowed_us
    assert jobs.totals.cost == report.totals.cost
    html = response.content.decode()
    assert f'href="/jobs/{jobs.rows[0].job.pk}/"' in html
    assert 'data-total="cost">14.00 EUR<' in html  # 7 device-hours at 2.00 EUR


def test_cost_page_defaults_to_the_last_30_days_and_offers_usual_ranges(client, usage):
    from django.utils import timezone

    login(client, usage.lead)
    response = client.get(URL)
    query = response.context["query"]
    today = timezone.now().date()
    assert (query.start, query.end) == (today - timedelta(days=29), today)
    labels = [label for label, _, _ in response.context["ranges"]]
    assert labels == ["Last 30 days", "This month", "Last month", "This quarter"]
    assert response.context["ranges"][0][2]  # the default range is the chosen one


def test_cost_page_says_what_the_charge_is_made_of(client, usage):
    html = login(client, usage.lead).get(URL, RANGE).content.decode()
    report = selectors.cost_report(teams=[usage.team], start=T0.date().replace(day=1), end=T0.date().replace(day=31))
    parts = reporting.charge_parts(report, "EUR")
    assert [p.key for p in parts] == ["owned", "borrowed", "idle", "lent"]
    assert sum(p.amount for p in parts) == report.charge["EUR"]
    idle = next(p for p in parts if p.key == "idle")
    assert idle.amount > 0
    assert idle.percent == (idle.amount * 100 / report.charge["EUR"]).quantize(Decimal("0.1"))
    assert "What the charge is made of" in html
    assert f"{idle.percent} %" in html
    assert 'id="billing-hide-idle"' in html


def test_cost_page_says_how_budgets_are_spent(client, usage):
    services.budget_set(team=usage.team, period="month", amount="100", currency="EUR")
    html = login(client, usage.lead).get(URL, RANGE).content.decode()
    assert 'id="billing-budget-basis"' in html
    assert "idle reservation and the lent credit do not count" in html


def test_cost_csv_per_job_rows_add_up_to_the_report(client, usage):
    response = login(client, usage.lead).get(CSV_URL, {**RANGE, "rows": "jobs"})
    assert response.status_code == 200
    assert "cost-jobs-vision-2026-03-01-2026-03-31.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert list(rows[0]) == [
        "job_id", "job", "team", "user", "class", "state", "owned_hours", "borrowed_hours", "gpu_hours", "cost_EUR",
    ]  # fmt: skip
    assert sorted((r["user"], r["class"], r["gpu_hours"]) for r in rows) == [
        ("alice", "h100-train", "6.000"),
        ("bob", "h100-train", "1.000"),
    ]
    assert sum(Decimal(r["cost_EUR"]) for r in rows) == Decimal("14.00")
    assert {r["team"] for r in rows} == {"vision"}


def test_cost_csv_rows_must_be_known(client, usage):
    response = login(client, usage.lead).get(CSV_URL, {**RANGE, "rows": "pods"})
    assert response.status_code == 400
    assert "rows: must be empty or 'jobs'" in response.content.decode()
