"""Browser test of a platform admin's view: the staff navigation, every team's jobs with a team filter (HTMX), and
another team's job page with its wait reason. Playwright driving Debian's /usr/bin/chromium headless.
Screenshots go to docs/screenshots/ when SAVE_SCREENSHOTS=1, else to a temp folder.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from queues import services
from queues.services import JobSpec
from tests.browser.scenarios import PASSWORD, research_pool
from tests.browsing import DB_LOCK
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def sign_in(page: Page, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/pool/$"))


def test_admin_sees_every_teams_jobs_and_the_health_pages(page, live_server, shots):
    with DB_LOCK:
        pool = research_pool()
        UserFactory(username="root", is_staff=True, is_superuser=True)
        for owner, team, name in [(pool.user, pool.team, "vision-train"), (pool.other_user, pool.other_team, "asr")]:
            services.job_submit(
                owner=owner,
                team=team,
                spec=JobSpec(name=name, image="python:3.11", resource_class=pool.rc, devices_per_pod=4, pod_count=4),
            )  # the first takes every GPU; the second waits
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sign_in(page, "root")

    nav = page.get_by_role("navigation", name="Main")
    for label, url in [("Health", "/health/"), ("Repair queue", "/health/tickets/"), ("Capacity", "/health/capacity/")]:
        expect(nav.get_by_role("link", name=label, exact=True)).to_have_attribute("href", url)
    expect(nav.get_by_role("link", name="Submit")).to_have_count(0)  # not in a team: no page that refuses them

    nav.get_by_role("link", name="Jobs").click()
    page.wait_for_url(re.compile(r"/jobs/$"))
    expect(page.locator("#queues-job-list-scope")).to_have_text("Jobs of every team.")
    table = page.locator("#queues-job-list-table")
    expect(table.get_by_role("link", name="vision-train")).to_be_visible()
    expect(table.get_by_role("link", name="asr")).to_be_visible()

    page.select_option("#id_team", "speech")  # the filter form swaps the table through HTMX
    expect(table.get_by_role("link", name="vision-train")).to_have_count(0)
    expect(table.get_by_role("link", name="asr")).to_be_visible()
    expect(page).to_have_url(re.compile(r"[?&]team=speech"))
    expect(page.locator("#queues-job-list-scope")).to_have_text("Jobs of team Speech.")
    page.screenshot(path=str(shots / "admin-jobs-team-filter.png"), full_page=True)

    table.get_by_role("link", name="asr").click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    expect(page.locator("[data-code]")).to_be_visible()  # the wait reason the team sees
    expect(page.get_by_role("link", name="Cancel job…")).to_be_visible()  # an admin may act

    for label, heading in [
        ("Health", "Health map"),
        ("Repair queue", "Repair tickets"),
        ("Capacity", "Effective capacity"),
    ]:
        page.get_by_role("navigation", name="Main").get_by_role("link", name=label, exact=True).click()
        expect(page.locator("h1")).to_contain_text(heading)
    assert errors == []
