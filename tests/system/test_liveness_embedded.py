"""Liveness you can see in the embedded mode (scripts/embedded.py: runserver, a worker with its beat, SQLite, the
embedded broker): a frozen worker shows in /status.json and on a page open in a browser, and comes back; the
supervisor restarts a worker that dies and the status page lists both. Heartbeats run fast here (2 s, stale after
10 s); test_liveness_production.py holds the default thresholds."""

from __future__ import annotations

import signal
import time

from playwright.sync_api import expect

from tests.system.live_checks import (
    FAST,
    PAUSED,
    WORKER_GONE,
    assert_status_json_for_any_signed_in_user_without_team_data,
    job_list,
    job_list_saying,
    status,
    worker_ok,
)
from tests.system.portals import DEMO_PASSWORD
from tests.system.processes import wait_until


def signed_in_page(browser, portal, username: str):
    """A browser page signed in to ``portal`` through its sign-in form."""
    context = browser.new_context(base_url=portal.base_url, extra_http_headers=portal.headers)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    return page


def test_embedded_worker_frozen_shows_on_status_and_pages_then_comes_back(
    embedded_portal_factory, browser, record_property
):
    """SIGSTOP of the worker: /status.json says so, and a job list left open in a browser turns to "Live data
    paused" by its own polling (no reload), then back to live after SIGCONT."""
    portal = embedded_portal_factory(env=FAST)
    alice = portal.session("alice")
    wait_until(lambda: status(portal, alice)["ok"], timeout=120, what="every component ok")
    assert PAUSED not in job_list(portal, alice)
    page = signed_in_page(browser, portal, "alice")
    page.goto("/jobs/?team=vision")
    table = page.locator("#queues-job-list-table")
    assert table.get_attribute("hx-trigger") == "every 10s"  # the first page polls while the team's jobs move
    expect(page.locator("#queues-job-list-table .live-note")).to_contain_text("refreshes every")

    portal.worker.freeze()
    frozen_at = time.monotonic()
    wait_until(lambda: worker_ok(portal, alice) is False, timeout=120, what="the worker to be down in /status.json")
    seen_after = time.monotonic() - frozen_at
    body = status(portal, alice)
    assert body["ok"] is False
    assert body["components"]["beat"]["ok"] is True  # the embedded beat is a child of the worker: it goes on
    html = wait_until(lambda: job_list_saying(portal, alice, PAUSED), timeout=30, what="the note")
    assert WORKER_GONE in html
    assert "Job states are as of then." in html
    assert "refreshes every" not in html
    paused = page.locator('#queues-job-list-table [data-live="paused"]')
    expect(paused).to_contain_text(WORKER_GONE, timeout=30_000)  # the open page's next poll
    expect(page.locator("#queues-job-list-table .live-note")).not_to_contain_text("refreshes every")

    portal.worker.thaw()
    thawed_at = time.monotonic()
    wait_until(lambda: worker_ok(portal, alice), timeout=120, what="the worker to be back")
    back_after = time.monotonic() - thawed_at
    wait_until(lambda: PAUSED not in job_list(portal, alice), timeout=60, what="the pages to be live again")
    expect(paused).to_have_count(0, timeout=30_000)
    expect(page.locator("#queues-job-list-table .live-note")).to_contain_text("refreshes every")
    page.context.close()
    record_property("sigstop_seen_after_seconds", round(seen_after, 1))
    record_property("sigcont_back_after_seconds", round(back_after, 1))
    assert seen_after < 120
    assert back_after < 120


def test_embedded_worker_that_dies_is_restarted_by_the_supervisor_and_the_restart_logged(embedded_portal_factory):
    portal = embedded_portal_factory(env=FAST)
    oscar = portal.session("oscar")  # the operator: the status page too
    wait_until(lambda: status(portal, oscar)["ok"], timeout=120, what="every component ok")
    first = portal.worker.pid
    portal.worker.signal(signal.SIGKILL)  # the main process only, as the kernel's OOM killer would
    portal.supervisor.wait_for_log(rf"worker \(pid {first}\) exited with signal 9 .* restarting in 1 s", timeout=30)
    portal.supervisor.wait_for_log(r"restarted worker \(pid \d+, restart #1\)", timeout=60)
    wait_until(lambda: portal.worker.pid != first and portal.worker.alive(), timeout=30, what="a new worker")
    portal.worker.wait_for_log(r"celery@\S+ ready\.", start=0)
    second = portal.worker.pid
    page = wait_until(
        lambda: (
            (t := oscar.get(portal.url("/status/"), timeout=30).text) and f'<td class="num">{second}</td>' in t and t
        ),
        timeout=120,
        what="the new worker's heartbeat on the status page",
    )
    assert f'<td class="num">{first}</td>' in page  # the dead worker is listed among the last day's processes
    wait_until(lambda: status(portal, oscar)["ok"], timeout=120, what="every component ok again")


def test_status_json_answers_any_signed_in_user_with_no_team_data(embedded_portal):
    assert_status_json_for_any_signed_in_user_without_team_data(embedded_portal)
