"""The drift admin page in a real browser: Playwright driving Debian's /usr/bin/chromium headless.

The live server's requests reach the cluster through the real client over HTTP to the API emulator.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from django.core.handlers.wsgi import WSGIHandler

from pools.kube_sync.config import kube_config_push
from pools.models import KubeConfigObject
from queues.models import QuotaLine
from tests.factories import PASSWORD, UserFactory

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
_lock = threading.RLock()


@pytest.fixture
def page(live_server, monkeypatch):
    """A signed-out browser page on the live server; its requests are serialised with the test's own ORM calls."""
    original = WSGIHandler.__call__

    def locked(self, environ, start_response):
        with _lock:
            return original(self, environ, start_response)

    monkeypatch.setattr(WSGIHandler, "__call__", locked)
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs a loop in this thread
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS)
        context = browser.new_context(viewport={"width": 1360, "height": 1000}, base_url=live_server.url)
        page = context.new_page()
        page.set_default_timeout(15_000)
        yield page
        context.close()
        browser.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def _shot(page, name: str, tmp_path) -> None:
    folder = SCREENSHOTS if os.environ.get("SAVE_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name), full_page=True)


def test_drift_page_reapply_and_adopt_in_the_browser(page, portal, cluster, api, emulator, tmp_path):
    kube_config_push(cluster=cluster, api=api)
    live = emulator.get_obj("ClusterQueue", "vision")
    groups = live["spec"]["resourceGroups"]
    for res in groups[0]["flavors"][0]["resources"]:
        if res["name"] == "nvidia.com/gpu":
            res["nominalQuota"] = "12"
    emulator.edit("ClusterQueue", "vision", spec={"resourceGroups": groups})
    emulator.edit("WorkloadPriorityClass", "normal", value=150)
    UserFactory(username="root", is_staff=True, is_superuser=True)

    page.goto("/admin/login/?next=/admin/pools/kubeconfigobject/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.click("#kube-check")
    expect(page.locator("ul.messagelist")).to_contain_text("Cluster gpu-east: 0 created, 0 updated")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)  # only what needs attention
    expect(page.locator("#result_list")).to_contain_text("ClusterQueue vision")
    expect(page.locator("#result_list")).to_contain_text("Drifted (changed in the cluster)")
    _shot(page, "admin-drift-list.png", tmp_path)

    page.get_by_role("link", name="ClusterQueue vision").click()
    diff = page.locator("table.kube-drift")
    expect(diff).to_contain_text("resources[name=nvidia.com/gpu].nominalQuota")
    cells = diff.locator("tbody tr").first.locator("td")
    expect(cells.nth(2)).to_have_text("16")
    expect(cells.nth(3)).to_have_text("12")
    expect(page.locator("pre.kube-drift-diff")).to_contain_text("+        nominalQuota: '12'")
    _shot(page, "admin-drift-object.png", tmp_path)
    page.click("#kube-adopt")
    expect(page.locator("ul.messagelist")).to_contain_text("adopted the cluster's values")
    with _lock:
        assert QuotaLine.objects.get(team_quota=portal.quota, resource_name="nvidia.com/gpu").nominal == "12"

    page.goto("/admin/pools/kubeconfigobject/")
    page.get_by_role("link", name="WorkloadPriorityClass normal").click()
    page.click("#kube-reapply")
    expect(page.locator("ul.messagelist")).to_contain_text("re-applied the portal's version")
    assert emulator.get_obj("WorkloadPriorityClass", "normal")["value"] == 100
    with _lock:
        assert not KubeConfigObject.objects.exclude(status="in_sync").exists()
    page.goto("/admin/pools/kubeconfigobject/")
    expect(page.locator("#result_list")).to_have_count(0)  # nothing left to look at
