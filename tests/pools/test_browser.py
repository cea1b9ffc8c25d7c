"""Browser test of the pool page: Playwright (sync API) driving Debian's /usr/bin/chromium headless.

A signed-in user filters the pool by flavor and sees the figures, the tables and the node list narrow together,
with the summary saying over how many nodes. Screenshots go to docs/screenshots/ when SAVE_SCREENSHOTS=1, else to
a temp folder.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.factories import PASSWORD, UserFactory
from tests.pools.test_overview import pool  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def kpi(page: Page, name: str):
    return page.locator(".kpi", has=page.locator("dt", has_text=re.compile(f"^{re.escape(name)}$", re.I))).locator("dd")


def test_pool_page_figures_narrow_with_the_flavor_filter(page, pool, shots):  # noqa: F811
    UserFactory(username="ada")
    page.goto("/accounts/login/?next=/pool/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/pool/")
    scope = page.locator("#pools-summary-scope")
    expect(scope).to_have_text("Figures over all 3 nodes.")
    expect(kpi(page, "Devices")).to_have_text("19")
    expect(page.locator("#pools-pool-nodes tbody tr")).to_have_count(3)

    page.select_option("#id_flavor", "h100")
    page.get_by_role("button", name="Apply").click()
    expect(scope).to_have_text("Figures over 2 of 3 nodes: those matching the filters.")
    expect(kpi(page, "Devices")).to_have_text("12")
    expect(kpi(page, "Available")).to_have_text("5")
    expect(page.locator("#pools-pool-nodes tbody tr")).to_have_count(2)
    flavors = page.locator(".panel", has=page.locator("h2", has_text="By hardware flavor")).locator("tbody tr")
    expect(flavors).to_have_count(1)
    assert "flavor=h100" in page.url
    page.screenshot(path=str(shots / "pool-overview-filtered-test.png"), full_page=True)
