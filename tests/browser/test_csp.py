"""Under the strict Content-Security-Policy the pages still work: htmx swaps, the submit form's re-check, the team
switcher and the plotly.js charts, with no violation reported by Chromium."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_cost_pages import login, usage  # noqa: F401 (fixture)
from tests.factories import MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _watch(page: Page) -> list[str]:
    """Console messages and page errors that report a blocked script, style or eval."""
    found: list[str] = []
    page.on("console", lambda m: found.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: found.append(str(e)) if "unsafe-eval" in str(e) or "CSP" in str(e) else None)
    return found


def test_cost_charts_draw_under_the_policy(page, usage):  # noqa: F811
    violations = _watch(page)
    login(page, "lead")
    page.goto("/cost/")
    expect(page.locator("[data-plotly-figure=billing-fig-hours] .main-svg").first).to_be_visible()
    expect(page.locator("[data-plotly-figure=billing-fig-classes] .main-svg").first).to_be_visible()
    assert violations == []


def test_submit_form_htmx_and_team_switcher_work_under_the_policy(page, usage):  # noqa: F811
    violations = _watch(page)
    MembershipFactory(team=TeamFactory(slug="extra", name="Extra"), user=usage.lead)
    login(page, "lead")
    page.goto("/jobs/")
    page.select_option("#queues-team-select", "extra")
    with page.expect_navigation():  # choosing does not leave the page (WCAG 3.2.2); the Switch button does
        page.click(".team-switch button")
    expect(page.locator("#queues-team-select")).to_have_value("extra")
    page.select_option("#queues-team-select", "vision")
    with page.expect_navigation():
        page.click(".team-switch button")
    page.goto("/submit/")  # its script (static/queues/job_submit.js) and htmx load under the policy
    expect(page.locator("#queues-job-form-fields")).to_be_visible()
    assert page.evaluate("() => typeof window.htmx") == "object"
    assert violations == []
