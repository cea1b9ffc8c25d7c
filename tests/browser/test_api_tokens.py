"""Browser test of the API token screen: create (the key shown once), use it on the API, revoke."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_researcher_creates_sees_and_revokes_a_token(page, shots):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    user = UserFactory(username="alice")
    MembershipFactory(team=TeamFactory(slug="vision", name="Vision"), user=user)
    page.goto("/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)

    page.get_by_role("link", name="API tokens").click()
    expect(page.locator("h1")).to_have_text("API tokens")
    expect(page.locator(".empty").first).to_contain_text("no API tokens yet")
    page.fill("#id_name", "CI pipeline")
    page.fill("#id_expires_in_days", "30")
    page.get_by_role("button", name="Create token").click()
    key = page.locator("#api-token-key").inner_text()
    assert key.startswith("gpp_")
    expect(page.locator("#api-token-issued")).to_contain_text("it is not shown again")
    page.screenshot(path=str(shots / "api-token-created.png"), full_page=True)
    api = page.request.get("/api/jobs/", headers={"Authorization": f"Token {key}"})
    assert api.status == 200

    page.goto("/tokens/")
    expect(page.locator("#api-token-issued")).to_have_count(0)
    assert key not in page.content()
    row = page.locator("#api-token-list tbody tr", has_text="CI pipeline")
    expect(row).to_contain_text("active")
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator(".messages")).to_contain_text("is revoked")
    expect(page.locator("#api-token-list tbody tr", has_text="CI pipeline")).to_contain_text("revoked")
    assert page.request.get("/api/jobs/", headers={"Authorization": f"Token {key}"}).status == 401
    assert errors == []
