"""axe-core over every page of the portal, for each role, and over the policy admin's forms: no serious or critical
violation (issue 32: the team-quota form had 58 nodes in violation, the pool and health device grids 192, the cost
charts nested interactive controls).

Playwright drives Debian's /usr/bin/chromium headless against a live server holding a day of the demo; axe-core is
vendored (tests/fixtures/axe/, see tests/accessibility.py) and never loaded by the pages themselves.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page

from billing.demo import billing_demo_seed
from pools.models import Cluster, HealthPolicy, RepairTicket, ResourceClass, ResourceFlavor
from portal.demo import DEMO_PASSWORD, demo_seed
from queues.models import Cohort, Job, PriorityClass, Reservation, ReservationPolicy, Team, TeamQuota
from queues.reservations.rules import reservation_policy
from queues.reservations.services import reservation_request
from queues.selectors import classes_for_team, team_cluster
from tests.accessibility import axe_violations, violations_text
from tests.browsing import DB_LOCK

pytestmark = pytest.mark.django_db(transaction=True)


def _sign_in(page: Page, username: str) -> None:
    login = "/admin/login/" if username == "admin" else "/accounts/login/"
    page.goto(login)
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("[type=submit]")
    page.wait_for_load_state("load")


def _reservation() -> Reservation:
    """A reservation of Computer Vision's lead, tomorrow 09:00–17:00, through the service (the demo has none); an
    admin is left to decide it (automatic approval off), so its page shows the decision and the preview."""
    policy = reservation_policy()
    policy.auto_approve = False
    policy.save()
    team = Team.objects.get(slug="vision")
    cluster = team_cluster(team)
    starts = (timezone.localtime() + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    return reservation_request(
        team=team,
        user=team.memberships.get(user__username="carol").user,
        resource_class=classes_for_team(team, cluster).order_by("pk").first(),
        count=1,
        starts_at=starts,
        ends_at=starts + timedelta(hours=8),
        purpose="evaluation run (axe check)",
    )


def _pages(role: str) -> list[str]:
    """Every page kind the role reaches, with real ids from the demo."""
    jobs = {s: Job.objects.filter(state=s).order_by("pk").values_list("pk", flat=True).first() for s in Job.State}
    reservation = _reservation()
    calendar = f"/reservations/calendar/{reservation.resource_class.slug}/"
    waiting = ["/waiting/", "/waiting/jobs/"]
    ticket = RepairTicket.objects.order_by("pk").first()
    last_month = (timezone.now().date().replace(day=1) - timedelta(days=1)).replace(day=1)
    common = ["/classes/", "/jobs/", "/pool/", "/notifications/", "/tokens/", f"/health/tickets/{ticket.pk}/"]
    job_pages = [f"/jobs/{pk}/" for pk in jobs.values() if pk]
    pages = {
        "alice": [*common, *job_pages, "/submit/", "/cost/mine/", "/jobs/?state=pending&mine=1", "/reservations/"],
        "carol": [
            "/cost/",
            f"/cost/?start={last_month}&end={last_month.replace(day=28)}&bucket=day",
            "/cost/ledger/",
            "/submit/",
            "/reservations/",
            f"/reservations/{reservation.pk}/",
            calendar,
            *waiting,
        ],
        "oscar": [
            "/jobs/?team=",
            "/health/",
            "/health/tickets/",
            "/health/capacity/",
            "/status/",
            *job_pages[:2],
            *waiting,
        ],
        "admin": [
            "/reservations/",
            f"/reservations/{reservation.pk}/",
            calendar,
            *waiting,
            "/admin/policy/guarantees/",
            "/health/",
            "/health/tickets/",
            "/health/capacity/",
            "/admin/",
            "/admin/policy/dashboard/",
            "/admin/policy/audit/",
            "/admin/policy/previews/",
        ],
    }[role]
    if role == "admin":
        models = {
            "queues/teamquota": TeamQuota.objects.order_by("pk").first(),
            "queues/cohort": Cohort.objects.order_by("pk").first(),
            "queues/team": Team.objects.order_by("pk").first(),
            "queues/priorityclass": PriorityClass.objects.order_by("pk").first(),
            "pools/cluster": Cluster.objects.order_by("pk").first(),
            "pools/resourceclass": ResourceClass.objects.order_by("pk").first(),
            "pools/resourceflavor": ResourceFlavor.objects.order_by("pk").first(),
            "pools/repairticket": ticket,
            "pools/healthpolicy": HealthPolicy.objects.order_by("pk").first(),
            "queues/reservation": reservation,
            "queues/reservationpolicy": ReservationPolicy.objects.order_by("pk").first(),
        }
        for path, obj in models.items():
            pages += [f"/admin/{path}/", f"/admin/{path}/{obj.pk}/change/", f"/admin/{path}/add/"]
    return pages


@pytest.mark.parametrize("role", ["alice", "carol", "oscar", "admin"])
def test_no_serious_or_critical_violation_on_any_page(page, role):
    with DB_LOCK:
        now = timezone.now()
        demo_seed(now=now, days=1)
        billing_demo_seed(now=now, days=1)
        pages = _pages(role)
    found: dict[str, list[dict]] = {}
    if role == "alice":
        page.goto("/accounts/login/")  # signed out: the sign-in page
        found["/accounts/login/ (signed out)"] = axe_violations(page)
    _sign_in(page, role)
    for url in pages:
        page.goto(url)
        page.wait_for_load_state("networkidle")
        found[url] = axe_violations(page)
    if role == "alice":  # the submit form with the check's answer shown
        page.goto("/submit/")
        page.fill("input[name=name]", "axe-check")
        page.fill("input[name=image]", "registry.example.org/t:1")
        page.click("button[value=check]")
        page.wait_for_selector("#queues-job-feasibility .verdict")
        found["/submit/ (checked)"] = axe_violations(page)
    if role == "admin":  # a what-if preview of a quota change (replayed at once: no broker in the tests)
        quota = TeamQuota.objects.order_by("pk").first()
        page.goto(f"/admin/queues/teamquota/{quota.pk}/change/")
        page.locator("input[name$='-nominal']").first.fill("3")
        page.click("input[name=_save]")
        page.wait_for_url("**/admin/policy/previews/*/")
        page.wait_for_selector("[data-status=done]")
        found["/admin/policy/previews/<id>/"] = axe_violations(page)
    bad = {url: v for url, v in found.items() if v}
    assert not bad, "axe-core found serious or critical violations:\n" + violations_text(bad)
