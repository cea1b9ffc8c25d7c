"""What issue 32 found in the browser, each as a person meets it: the submit form's running total, keeping typed
fields across a team switch, the feasibility answer in view, the job list at 1366 px, the top bar at 390 px.

Playwright drives Debian's /usr/bin/chromium headless against the live server.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.scenarios import PASSWORD, occupy, research_pool
from tests.browser.test_researcher_pages import login
from tests.browsing import DB_LOCK
from tests.factories import MembershipFactory, QuotaLineFactory, TeamFactory, TeamQuotaFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _errors(page: Page) -> list[str]:
    found: list[str] = []
    page.on("console", lambda m: found.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: found.append(str(e)))
    return found


def test_the_total_of_a_pytorchjob_follows_its_fields(page):
    with DB_LOCK:
        pool = research_pool(racks={"rack-a": [8, 8, 8]})
        pool.rc.allowed_counts = [1, 2, 4, 8]
        pool.rc.allowed_kinds = ["batch", "pytorchjob"]
        pool.rc.save(update_fields=["allowed_counts", "allowed_kinds"])
    errors = _errors(page)
    login(page, "alice")
    page.goto("/submit/")
    total = page.locator("#queues-job-total [data-total]")
    expect(total).to_have_text("1 GPU in all: main 1 pod × 1")
    page.select_option("#id_kind", "pytorchjob")
    expect(page.locator("#id_pod_set_master_devices")).to_be_visible()
    page.select_option("#id_devices_per_pod", "8")
    page.fill("#id_pod_count", "2")
    expect(total).to_have_text("24 GPUs in all: master 1 pod × 8 + worker 2 pods × 8")  # the master counts too
    page.select_option("#id_pod_set_master_devices", "0")
    expect(total).to_have_text("16 GPUs in all: master 1 pod × 0 + worker 2 pods × 8")
    assert errors == []


def test_switching_team_keeps_what_was_typed_and_arrow_keys_do_not_switch(page):
    with DB_LOCK:
        pool = research_pool()
        other = TeamFactory(slug="nlp", name="NLP")
        MembershipFactory(team=other, user=pool.user)
        QuotaLineFactory(team_quota=TeamQuotaFactory(team=other, cluster=pool.cluster), flavor=pool.flavor)
    errors = _errors(page)
    login(page, "alice")
    page.goto("/submit/")
    page.fill("#id_name", "kept-name")
    page.fill("#id_image", "registry.example.org/t:7")
    page.fill("#id_command", "python train.py")
    page.focus("#queues-team-select")
    page.keyboard.press("ArrowUp")  # choosing (NLP comes first) is not switching: the page stays (WCAG 3.2.2)
    page.wait_for_timeout(500)
    assert page.input_value("#queues-team-select") == "nlp"
    assert page.url.endswith("/submit/")
    assert page.input_value("#id_name") == "kept-name"
    with page.expect_navigation():
        page.click(".team-switch button")
    expect(page.locator(".q-head")).to_contain_text("As team NLP")
    assert page.input_value("#id_name") == "kept-name"
    assert page.input_value("#id_image") == "registry.example.org/t:7"
    assert page.input_value("#id_command") == "python train.py"
    assert errors == []


def test_the_feasibility_answer_comes_into_view(page):
    with DB_LOCK:
        research_pool()
    errors = _errors(page)
    page.set_viewport_size({"width": 390, "height": 800})  # the answer sits below the form on a phone
    login(page, "alice")
    page.goto("/submit/")
    page.fill("#id_name", "seen")
    page.fill("#id_image", "registry.example.org/t:1")
    page.click("button[value=check]")
    answer = page.locator("#queues-job-feasibility .verdict")
    expect(answer).to_be_visible()
    expect(answer).to_be_in_viewport()
    assert errors == []


def test_the_job_list_fits_1366_px_with_every_column(page):
    with DB_LOCK:
        pool = research_pool(racks={"rack-a": [4]})
        occupy(pool, node=pool.nodes[0], count=4, name="a-very-long-job-name-that-people-really-use-x")
        pool.user.is_staff = True
        pool.user.save(update_fields=["is_staff"])
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto("/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("load")
    page.goto("/jobs/?team=")
    header = page.locator(".jobs-table thead th").last
    expect(header).to_contain_text("Why it waits")
    box = header.bounding_box()
    table = page.locator("#queues-job-list-table").bounding_box()
    assert box["x"] + box["width"] <= table["x"] + table["width"] + 1, (box, table)
    scroller = page.evaluate(
        "() => { const s = document.querySelector('.table-scroll'); return [s.scrollWidth, s.clientWidth]; }"
    )
    assert scroller[0] <= scroller[1], scroller


def test_the_top_bar_wraps_at_390_px_and_no_page_is_wider(page):
    with DB_LOCK:
        pool = research_pool(racks={"rack-a": [4]})
        job = occupy(pool, node=pool.nodes[0], count=2, name="a-job-with-a-rather-long-name-for-a-phone")
    page.set_viewport_size({"width": 390, "height": 800})
    login(page, "alice")
    for path in ("/classes/", "/jobs/", "/submit/", "/pool/", "/tokens/", "/notifications/", f"/jobs/{job.pk}/"):
        page.goto(path)
        page.wait_for_load_state("networkidle")
        width = page.evaluate("() => document.documentElement.scrollWidth")
        wide = page.evaluate(
            "() => [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 390).slice(0, 8).map(e => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right) + ' ' + (e.textContent || '').trim().slice(0, 60))"
        )
        assert width <= 390, (path, width, wide)  # wide tables scroll inside their panel; the page does not
        for name in ("Notifications", "API tokens", "Sign out"):
            box = page.get_by_role("banner").get_by_text(name, exact=True).bounding_box()
            assert box["x"] >= 0, (path, name, box)
            assert box["x"] + box["width"] <= 390, (path, name, box)
