"""The health pages in a real browser (Playwright driving /usr/bin/chromium headless): a researcher follows the
``health_blocked`` wait to the repair ticket; staff see the device on the health map, the ticket in the queue,
and the capacity the class lost."""

from __future__ import annotations

import re

import pytest

from pools.health.ingest import health_ingest_scrape
from pools.models import Device, HealthState, RepairTicket
from queues.models import Job, WaitReason
from tests.browsing import DB_LOCK
from tests.health.conftest import submit, tick
from tests.health.scrapes import exposition, gpu

pytestmark = pytest.mark.django_db(transaction=True)

from playwright.sync_api import expect  # noqa: E402

PASSWORD = "health-pages-1"


def _login(page, user):
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    page.goto("/accounts/login/")
    page.fill("input[name=username]", user.get_username())
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")


def _xid79_blocks_a_job(pool):
    """A 4-GPU job runs on one node; XID 79 on the other node's GPU 2; a second 4-GPU job waits for health."""
    with DB_LOCK:
        first = submit(pool, "first", at=0, devices=4)
        tick(pool, 1)
        tick(pool, 2)
        first.refresh_from_db()
        busy = first.allocations.first().device.node
        other = next(n for n in pool.nodes if n.pk != busy.pk)
        device = Device.objects.get(node=other, index=2)
        text = exposition([gpu(device, DCGM_FI_DEV_XID_ERRORS=79)], xid_msg="GPU has fallen off the bus")
        health_ingest_scrape(text=text, now=pool.at(3))
        waiting = submit(pool, "waits-for-health", at=4, devices=4)
        tick(pool, 5)
        waiting.refresh_from_db()
        device.refresh_from_db()
    assert waiting.state == Job.State.PENDING
    assert waiting.wait_reason == WaitReason.HEALTH_BLOCKED
    assert device.health == HealthState.QUARANTINED
    return waiting, device, RepairTicket.objects.get()


def test_researcher_follows_the_health_wait_to_the_ticket(page, pool):
    job, device, ticket = _xid79_blocks_a_job(pool)
    _login(page, pool.user)
    page.goto(f"/jobs/{job.pk}/")
    box = page.locator(f"#queues-job-wait-{job.pk}")
    expect(box).to_contain_text("health_blocked")
    expect(box.locator(f"#health-wait-{job.pk}")).to_contain_text(f"{device.node.name}/{device.key}")
    box.get_by_role("link", name=f"ticket #{ticket.pk}").click()
    expect(page).to_have_url(re.compile(rf"/health/tickets/{ticket.pk}/$"))
    expect(page.locator("h1")).to_contain_text(f"Repair ticket #{ticket.pk}")
    expect(page.locator("body")).to_contain_text("XID 79")
    expect(page.locator("body")).not_to_contain_text("Device health transitions")  # evidence is for staff


def test_staff_see_map_queue_and_capacity(page, pool):
    _, device, ticket = _xid79_blocks_a_job(pool)
    _login(page, pool.admin)
    page.goto("/health/?problems=1")
    grid = page.locator("#health-map-grid")
    expect(grid).to_contain_text(device.node.name)
    expect(grid.locator("dl.kpis")).to_contain_text("quarantined")
    expect(grid.get_by_role("link", name=f"#{ticket.pk}")).to_be_visible()
    page.goto("/health/tickets/")
    row = page.locator("tr", has=page.get_by_role("link", name=f"#{ticket.pk}", exact=True))
    expect(row).to_contain_text("In repair")
    expect(row).to_contain_text("24.0 h")  # its age: the fixture's clock started a day ago
    page.goto("/health/capacity/")
    expect(page.locator("body")).to_contain_text("Effective capacity")
    class_row = page.locator("tr", has_text=pool.rc.name).first
    expect(class_row.locator("td")).to_have_text(["8", "1", "7"])  # devices, out for health, effective
