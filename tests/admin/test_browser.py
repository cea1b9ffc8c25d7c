"""Browser test of the policy admin: change a quota → what-if preview → apply → audit entry → cluster follows.

Playwright (sync API) drives Debian's /usr/bin/chromium headless against a live server holding the demo
(two days of history replayed through the simulated cluster). Screenshots of the preview and the dashboard
go to docs/screenshots/ when SAVE_SCREENSHOTS=1, else to a temp folder.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest
from django.core.handlers.wsgi import WSGIHandler

from queues.demo import DEMO_PASSWORD, demo_seed
from queues.models import PolicyPush, QuotaLine, TeamQuota

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
_db_lock = threading.RLock()


@pytest.fixture
def page(live_server, monkeypatch, tmp_path):
    """A browser page on the live server; requests serialised (one in-memory SQLite connection)."""
    original = WSGIHandler.__call__

    def locked(self, environ, start_response):
        with _db_lock:
            return original(self, environ, start_response)

    monkeypatch.setattr(WSGIHandler, "__call__", locked)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, base_url=live_server.url)
        page = context.new_page()
        page.set_default_timeout(20_000)
        yield page
        context.close()
        browser.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    if os.environ.get("SAVE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path


def test_change_quota_preview_apply_audit(page, shots):
    demo_seed(days=2)
    quota = TeamQuota.objects.get(cluster_queue_name="vision")
    line = QuotaLine.objects.get(team_quota=quota, resource_name="nvidia.com/gpu")
    assert line.nominal == "16"

    page.goto("/admin/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(r"/admin/$"))

    page.goto(f"/admin/queues/teamquota/{quota.pk}/change/")
    nominal = page.locator("input[name$='-nominal']").nth(
        list(
            QuotaLine.objects.filter(team_quota=quota).order_by("flavor_order", "flavor__name", "resource_name")
        ).index(line)
    )
    expect(nominal).to_have_value("16")
    nominal.fill("8")
    page.click("input[name=_save]")

    # The preview: nothing saved yet, the change spelled out, a chart per cluster and a table.
    expect(page.locator("#whatif-preview")).to_contain_text("Nothing is saved yet")
    expect(page.locator(".whatif-changes")).to_contain_text("ClusterQueue vision: h100/nvidia.com/gpu nominal 16 → 8")
    expect(page.locator("[data-plotly-figure][data-drawn]")).to_have_count(1)
    expect(page.locator("#whatif-table-1 tbody tr")).to_have_count(3)
    expect(page.locator("#whatif-table-1")).to_contain_text("Computer Vision (vision)")
    page.screenshot(path=str(shots / "admin-whatif-preview.png"), full_page=True)
    line.refresh_from_db()
    assert line.nominal == "16"
    assert not PolicyPush.objects.exists()

    page.click("input[name=_whatif_apply]")
    page.wait_for_url(re.compile(r"/admin/queues/teamquota/$"))
    expect(page.locator(".messagelist")).to_contain_text("Pushing the change to 1 cluster(s)")
    line.refresh_from_db()
    assert line.nominal == "8"

    # The cluster followed: the simulated cluster was rescheduled under the new policy.
    push = PolicyPush.objects.get()
    assert push.state == PolicyPush.State.SUCCEEDED, push.error
    page.goto(f"/admin/queues/teamquota/{quota.pk}/change/")
    expect(page.locator(".field-cluster_follows")).to_contain_text("yes: last change")

    # The audit log: who, what, before → after.
    page.goto("/admin/policy/audit/?model=queues.QuotaLine")
    first = page.locator("#policy-audit-table tbody tr").first
    expect(first).to_contain_text("admin")
    expect(first).to_contain_text("changed")
    expect(first).to_contain_text("nominal: 16 → 8")
    with page.expect_download() as download:
        page.click("#policy-audit-csv")
    assert "nominal,16,8" in Path(download.value.path()).read_text()

    page.goto("/admin/policy/dashboard/")
    expect(page.locator("[data-plotly-figure][data-drawn]")).to_have_count(4)
    page.screenshot(path=str(shots / "admin-policy-dashboard.png"), full_page=True)
