"""The waiting page: who sees what, page vs fragment, drill-down, CSV with the report's numbers, query caps, the
admins' studies panel."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from queues.models import Membership, WaitActionStudy
from queues.waiting import rollup
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.queues.test_wait_attribution import SUN_20, WEEK_2, _three_changes, pool  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db

URL = reverse("queues:waiting")
CSV_URL = reverse("queues:waiting_csv")
JOBS_URL = reverse("queues:waiting_jobs")
RANGE = {"team": "vision", "start": "2026-03-02", "end": "2026-03-09"}
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _utc(settings):
    settings.BILLING_TIME_ZONE = "UTC"


@pytest.fixture
def waited(pool):  # noqa: F811 - pytest's fixture by name
    job = _three_changes(pool)
    rollup.wait_attribution_sync(now=SUN_20 + timedelta(hours=31))
    lead = UserFactory(username="carol")
    MembershipFactory(team=pool["team"], user=lead, role=Membership.Role.LEAD)
    return {**pool, "job": job, "lead": lead}


def login(client, user):
    client.force_login(user)
    return client


def test_waiting_requires_login(client):
    response = client.get(URL)
    assert response.status_code == 302


def test_the_lead_sees_the_report_with_local_plotly(client, waited):
    response = login(client, waited["lead"]).get(URL, RANGE)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Computer Vision waited" in html
    assert "/static/vendor/plotly-basic/plotly-basic.min.js" in html
    assert 'id="queues-fig-waiting"' in html
    assert f"week={WEEK_2.isoformat()}&amp;cause=fragmentation" in html
    assert "What would have helped" not in html  # admins only


def test_fragment_for_htmx(client, waited):
    response = login(client, waited["lead"]).get(URL, RANGE, **HTMX)
    html = response.content.decode()
    assert html.startswith('<section id="queues-waiting-report"')
    assert "HX-Request" in response["Vary"]


def test_a_member_who_leads_nothing_sees_nothing(client, waited):
    member = UserFactory(username="alice")
    MembershipFactory(team=waited["team"], user=member)
    html = login(client, member).get(URL).content.decode()
    assert "You do not lead a team" in html


def test_another_teams_waiting_is_a_404(client, waited):
    TeamFactory(slug="nlp", name="NLP")
    response = login(client, waited["lead"]).get(URL, {"team": "nlp"})
    assert response.status_code == 404


def test_bad_weeks_are_field_errors(client, waited):
    response = login(client, waited["lead"]).get(URL, {"start": "2026-03-09", "end": "2026-03-02"}, **HTMX)
    assert "must not be before" in response.content.decode()
    response = login(client, waited["lead"]).get(URL, {"start": "2020-01-06", "end": "2026-03-09"}, **HTMX)
    assert "at most 104 weeks" in response.content.decode()


def test_drill_down_lists_the_jobs(client, waited):
    query = {**RANGE, "week": WEEK_2.isoformat(), "cause": "fragmentation"}
    response = login(client, waited["lead"]).get(JOBS_URL, query)
    html = response.content.decode()
    assert response.status_code == 200
    assert reverse("queues:job_detail", args=[waited["job"].pk]) in html
    assert "1 job, 24.0 GPU-hours in all" in html
    bad = login(client, waited["lead"]).get(JOBS_URL, {**RANGE, "week": WEEK_2.isoformat(), "cause": "weather"})
    assert "Select a valid choice" in bad.content.decode()


def test_csv_has_the_reports_numbers(client, waited):
    response = login(client, waited["lead"]).get(CSV_URL, RANGE)
    assert response.status_code == 200
    assert 'filename="waiting-vision-2026-03-02-2026-03-09.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    cells = {(r["week"], r["cause"]): Decimal(r["gpu_hours"]) for r in rows}
    assert cells == {
        ("2026-03-02", "quota"): 16,
        ("2026-03-09", "quota"): 56,
        ("2026-03-09", "fragmentation"): 24,
        ("2026-03-09", "health"): 24,
    }
    assert {r["class"] for r in rows} == {"H100 80GB"}


def test_query_counts_are_bounded(client, waited, django_assert_max_num_queries):
    login(client, waited["lead"])
    # session and user, the visible teams, classes, the weekly sums, the open spans, class names, and the top bar's
    # constant reads (lead and member checks, the user's and groups' permissions)
    with django_assert_max_num_queries(11):
        client.get(URL, {**RANGE, "start": "2025-03-10"})
    with django_assert_max_num_queries(11):
        client.get(JOBS_URL, {**RANGE, "week": WEEK_2.isoformat(), "cause": "quota"})


def test_staff_see_and_run_studies(client, waited, django_capture_on_commit_callbacks):
    staff = UserFactory(username="root", is_staff=True)
    html = login(client, staff).get(URL, RANGE).content.decode()
    assert "What would have helped" in html
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("queues:waiting_study"), {"cluster": waited["cluster"].pk, "days": "3"})
    assert response.status_code == 200
    assert len(callbacks) == 1  # the replay is queued after commit
    study = WaitActionStudy.objects.get()
    assert study.window_end - study.window_start == timedelta(days=3)
    bad = client.post(reverse("queues:waiting_study"), {"cluster": waited["cluster"].pk, "days": "90"})
    assert bad.status_code == 400
    assert "choose between 1 and 28 days" in bad.content.decode()
    polled = client.get(reverse("queues:waiting_study_status"))
    assert polled.status_code == 200  # still queued: keep polling
    WaitActionStudy.objects.update(state=WaitActionStudy.State.DONE, finished_at=datetime(2026, 3, 12, tzinfo=UTC))
    assert client.get(reverse("queues:waiting_study_status")).status_code == 286


def test_leads_cannot_run_studies(client, waited):
    response = login(client, waited["lead"]).post(reverse("queues:waiting_study"), {"cluster": waited["cluster"].pk})
    assert response.status_code == 404


def test_api_has_the_reports_numbers(client, waited):
    body = login(client, waited["lead"]).get("/api/waiting/", RANGE).json()
    assert body["teams"] == ["vision"]
    assert body["total"] == {
        "gpuHours": {"quota": "72.000", "fragmentation": "24.000", "health": "24.000"},
        "total": "120.000",
    }
    assert [w["week"] for w in body["weeks"]] == ["2026-03-02", "2026-03-09"]
    assert body["weeks"][1]["gpuHours"]["quota"] == "56.000"
    jobs = client.get("/api/waiting/jobs/", {**RANGE, "week": "2026-03-11", "cause": "health"}).json()
    assert jobs["week"] == "2026-03-09"
    assert [(r["job"], r["gpuHours"], r["waitHours"]) for r in jobs["results"]] == [
        (waited["job"].pk, "24.000", "6.000")
    ]
    assert client.get("/api/waiting/", {"team": "nope"}).status_code == 404
    assert client.get("/api/waiting/", {"start": "2026-03-09", "end": "2026-03-02"}).status_code == 400


def test_api_refuses_members_who_lead_nothing(client, waited):
    member = UserFactory(username="alice")
    MembershipFactory(team=waited["team"], user=member)
    assert login(client, member).get("/api/waiting/").status_code == 403
