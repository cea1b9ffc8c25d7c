"""Browser test of the policy admin: change a quota → what-if preview runs → result → apply → audit → cluster follows.

Playwright (sync API) drives Debian's /usr/bin/chromium headless against a live server holding the demo
(two days of history replayed through the simulated cluster). Screenshots of the preview and the dashboard
go to docs/screenshots/ when SAVE_SCREENSHOTS=1, else to a temp folder.
"""

from __future__ import annotations

import re
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from portal.demo import DEMO_PASSWORD, demo_seed
from queues.models import PolicyPreview, PolicyPush, QuotaLine, TeamQuota
from queues.policy import previews
from queues.tasks import policy_preview
from tests.browsing import DB_LOCK

pytestmark = pytest.mark.django_db(transaction=True)


def test_change_quota_preview_apply_audit(page, shots, monkeypatch):
    # As with a broker: the request only enqueues the replay; the test plays the worker below.
    enqueued = []
    monkeypatch.setattr(previews, "_enqueue", enqueued.append)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.set_default_timeout(20_000)
    demo_seed(days=2)
    quota = TeamQuota.objects.get(cluster_queue_name="vision")
    line = QuotaLine.objects.get(team_quota=quota, resource_name="nvidia.com/gpu")
    assert line.nominal == "16"
    seeded_pushes = set(PolicyPush.objects.values_list("pk", flat=True))  # the set-up's (the validation queue)

    page.goto("/admin/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(r"/admin/$"))

    page.goto(f"/admin/queues/teamquota/{quota.pk}/change/")
    # The team-quota form fits a 1,400 px window: no horizontal scroll, every input inside the viewport.
    widths = page.evaluate(
        """() => ({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth,
                 right: Math.max(...[...document.querySelectorAll('#content-main input, #content-main select')]
                                 .filter(e => e.type !== 'hidden').map(e => e.getBoundingClientRect().right))})"""
    )
    page.screenshot(path=str(shots / "admin-teamquota-1400.png"), full_page=True)
    assert widths["scroll"] <= widths["client"], widths
    assert widths["right"] <= widths["client"], widths
    nominal = page.locator("input[name$='-nominal']").nth(
        list(
            QuotaLine.objects.filter(team_quota=quota).order_by("flavor_order", "flavor__name", "resource_name")
        ).index(line)
    )
    expect(nominal).to_have_value("16")
    nominal.fill("8")
    page.click("input[name=_save]")

    # The preview page: nothing saved yet, the change spelled out, the replay queued for a worker.
    page.wait_for_url(re.compile(r"/admin/policy/previews/\d+/$"))
    expect(page.locator("#whatif-preview")).to_contain_text("Nothing is saved yet")
    expect(page.locator(".whatif-changes")).to_contain_text("ClusterQueue vision: h100/nvidia.com/gpu nominal 16 → 8")
    expect(page.locator("[data-status=queued]")).to_contain_text("Queued")
    expect(page.locator("input[name=_whatif_apply]")).to_have_count(0)
    (preview_id,) = enqueued
    with DB_LOCK:
        policy_preview(preview_id)  # the worker
        assert PolicyPreview.objects.get(pk=preview_id).status == PolicyPreview.Status.DONE

    # The page, polling, shows the result: a chart per cluster and a table.
    expect(page.locator("[data-status=done]")).to_contain_text("Replayed in")
    expect(page.locator("[data-plotly-figure][data-drawn]")).to_have_count(1)
    # the three teams' queues and the platform's validation queue (part of the set-up: repair burn-ins run there)
    expect(page.locator("#whatif-table-1 tbody tr")).to_have_count(4)
    expect(page.locator("#whatif-table-1")).to_contain_text("Platform validation (platform-validation)")
    expect(page.locator("#whatif-table-1")).to_contain_text("Computer Vision (vision)")
    # Panels that are zero for every team under both policies are not drawn; a line names them.
    zero = previews.preview_display(PolicyPreview.objects.get(pk=preview_id))["results"][0]["zero_metrics"]
    if zero:
        expect(page.locator("#whatif-zero-1")).to_contain_text(zero[0])
    else:
        expect(page.locator("#whatif-zero-1")).to_have_count(0)
    # Vision's quota was halved: its utilisation rising is not coloured as an improvement unless it did more work.
    vision = page.locator("#whatif-table-1 tbody tr", has_text="(vision)")
    verdict = vision.locator("[data-verdict]")
    if verdict.count():
        expect(verdict).to_have_attribute("title", re.compile("^Quota cut"))
        result = PolicyPreview.objects.get(pk=preview_id)
        rows = previews.preview_display(result)["results"][0]["rows"]
        row = next(r for r in rows if r["cluster_queue"] == "vision")
        if row["proposed"].used_device_hours <= row["current"].used_device_hours:
            expect(verdict).not_to_have_attribute("data-verdict", "better")
    # The replay is of the window as it happened: the page says so and from when the change took effect.
    expect(page.locator("#whatif-history-1")).to_contain_text("Replayed as it happened")
    expect(page.locator("#whatif-history-1")).to_contain_text("Your change takes effect from the window's start")
    expect(page.locator("#whatif-apply-at")).to_have_value("")
    # The demo's policy was written when it was seeded, inside the window: counted by kind, the list folded.
    expect(page.locator("#whatif-created-1 summary")).to_contain_text(re.compile(r"QuotaLine ×\d+"))
    expect(page.locator("#whatif-created-1 p")).not_to_be_visible()
    # The admin asks again with the change taking effect six hours ago: a new replay, the page names that time.
    chosen = (timezone.now() - timedelta(hours=6)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M")
    page.fill("#whatif-apply-at", chosen)
    page.click("input[name=_whatif_rerun]")
    page.wait_for_url(re.compile(rf"/admin/policy/previews/(?!{preview_id}/)\d+/$"))
    assert len(enqueued) == 2
    with DB_LOCK:
        policy_preview(enqueued[-1])  # the worker
    expect(page.locator("[data-status=done]")).to_contain_text("Replayed in")
    when = chosen.replace("T", " ")
    expect(page.locator("#whatif-history-1")).to_contain_text(f"Your change takes effect at {when} UTC")
    expect(page.locator("#whatif-apply-at")).to_have_value(chosen)
    assert PolicyPreview.objects.get(pk=enqueued[-1]).apply_at.strftime("%Y-%m-%dT%H:%M") == chosen
    page.screenshot(path=str(shots / "admin-whatif-preview.png"), full_page=True)
    line.refresh_from_db()
    assert line.nominal == "16"
    assert not PolicyPush.objects.exclude(pk__in=seeded_pushes).exists()

    page.click("input[name=_whatif_apply]")
    page.wait_for_url(re.compile(r"/admin/queues/teamquota/$"))
    expect(page.locator(".messagelist")).to_contain_text("Pushing the change to 1 cluster(s)")
    line.refresh_from_db()
    assert line.nominal == "8"

    # The cluster followed: the simulated cluster was rescheduled under the new policy.
    push = PolicyPush.objects.exclude(pk__in=seeded_pushes).get()
    assert push.state == PolicyPush.State.SUCCEEDED, push.error
    page.goto(f"/admin/queues/teamquota/{quota.pk}/change/")
    # The team-quota form fits a 1,400 px window: no horizontal scroll, every input inside the viewport.
    widths = page.evaluate(
        """() => ({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth,
                 right: Math.max(...[...document.querySelectorAll('#content-main input, #content-main select')]
                                 .filter(e => e.type !== 'hidden').map(e => e.getBoundingClientRect().right))})"""
    )
    page.screenshot(path=str(shots / "admin-teamquota-1400.png"), full_page=True)
    assert widths["scroll"] <= widths["client"], widths
    assert widths["right"] <= widths["client"], widths
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
