"""Browser tests of the researcher pages: Playwright (sync API) driving Debian's /usr/bin/chromium headless.

The simulated clock is driven from the test (``simulated_cluster_tick_run(now=...)``) between page checks.
Requests of the live server and the test's own ticks share one in-memory SQLite connection, so both are
serialised by a lock. Screenshots go to docs/screenshots/ when SAVE_SCREENSHOTS=1, else to a temp folder.
"""

from __future__ import annotations

import itertools
import re
import time
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from clusters.backends.simulated import simulated_cluster_tick_run
from queues.models import Job
from queues.page_validators import LIVE_CLOCK_SECONDS
from tests.browser.scenarios import PASSWORD, RACK, add_catalogue_classes, occupy, research_pool
from tests.browsing import DB_LOCK

pytestmark = pytest.mark.django_db(transaction=True)


def tick(pool, now):
    """One tick of the simulated cluster at ``now`` (no request is served meanwhile)."""
    with DB_LOCK:
        return simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=now)


def login(page: Page, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/classes/$"))


def fill_job(page: Page, *, name: str, devices: str, pods: str = "1", runtime: str = "") -> None:
    page.fill("#id_name", name)
    page.fill("#id_image", "registry.example.org/vision/train:1.2")
    page.fill("#id_command", "python train.py")
    page.fill("#id_args", "--epochs 3")
    page.fill("#id_env", "WANDB_MODE=offline")
    page.select_option("#id_devices_per_pod", devices)
    page.fill("#id_pod_count", pods)
    if runtime:
        page.fill("#id_sim_runtime", runtime)


def state_badge(page: Page):
    return page.locator(".job-head [data-state]")


def test_submit_wait_admit_run_finish(page, live_server):
    pool = research_pool(racks={"rack-a": [4]})
    start = timezone.now()
    blocker = occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, started=start, runtime=60)
    login(page, "alice")
    page.goto("/submit/")
    fill_job(page, name="e2e-train", devices="2", runtime="30s")
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="e2e-train")
    # The tick run at submission found every H100 in use by the other team.
    expect(state_badge(page)).to_have_attribute("data-state", "pending")
    expect(page.locator("[data-code]")).to_have_text("class_exhausted")
    expect(page.get_by_text("Likely start (p50)")).to_be_visible()
    expect(page.get_by_text("Place in queue")).to_be_visible()

    end_of_blocker = blocker.state_changed_at + timedelta(seconds=60)
    report = tick(pool, end_of_blocker + timedelta(seconds=1))
    assert blocker.pk in report.finished
    assert job.pk in report.admitted
    # The page polls: it shows the admission without a reload.
    expect(state_badge(page)).to_have_attribute("data-state", "admitted", timeout=12_000)
    tick(pool, end_of_blocker + timedelta(seconds=2))
    expect(state_badge(page)).to_have_attribute("data-state", "running", timeout=12_000)
    tick(pool, end_of_blocker + timedelta(seconds=40))
    expect(state_badge(page)).to_have_attribute("data-state", "succeeded", timeout=12_000)
    timeline = page.locator(".timeline")
    for text in ("Submitted", "Wait reason changed", "Admitted", "Started", "Succeeded"):
        expect(timeline).to_contain_text(text)
    # A final state stops the polling.
    assert page.locator(f"#queues-job-live-{job.pk}").get_attribute("hx-trigger") is None
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED


def test_fragmented_topology_is_explained(page, live_server, shots):
    pool = research_pool()
    occupy(pool, node=pool.nodes[0], count=4, name="vit-a", runtime=1800)
    occupy(pool, node=pool.nodes[2], count=4, name="asr-b", team=pool.other_team, runtime=3600)
    login(page, "alice")
    page.goto("/submit/")
    fill_job(page, name="llm-finetune", devices="4", pods="2", runtime="20m")
    page.select_option("#id_topology_mode", "required")
    page.select_option("#id_topology_level", RACK)
    page.click("button[value=check]")
    box = page.locator("#queues-job-feasibility")
    expect(box).to_contain_text("topology_fragmented")
    expect(box).to_contain_text("Likely start (p50)")
    expect(box).to_contain_text("It would start now if")
    assert not Job.objects.filter(name="llm-finetune").exists()
    page.screenshot(path=str(shots / "submit-form.png"), full_page=True)

    # Applying a suggestion fills the form in and checks again: now it would start.
    page.locator(".apply-suggestion").first.click()
    expect(page.locator("#id_topology_mode")).to_have_value("preferred")
    expect(box).to_contain_text("Yes — it would start now")
    # Changing the request back re-checks it live.
    page.select_option("#id_topology_mode", "required")
    expect(box).to_contain_text("topology_fragmented")
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    expect(page.locator("[data-code]")).to_have_text("topology_fragmented")
    expect(page.locator("#main")).to_contain_text("the largest free block on one node")
    expect(page.locator(".suggestions")).to_contain_text("Prefer one rack")
    page.screenshot(path=str(shots / "job-waiting.png"), full_page=True)


def test_validation_errors_are_shown_by_field(page, live_server):
    research_pool()
    login(page, "alice")
    page.goto("/submit/")
    fill_job(page, name="Bad_Name", devices="8")
    page.fill("#id_image", "not an image!")
    page.click("button[value=submit]")
    expect(page.locator("#id_name_errors")).to_contain_text("DNS-1123")
    expect(page.locator("#id_image_errors")).to_contain_text("not an image reference")
    expect(page.locator("#id_devices_per_pod_errors")).to_contain_text(
        "can never run: asks 8 GPUs per pod, the largest node has 4"
    )
    assert not Job.objects.exists()


def test_another_teams_job_is_not_found(page, live_server):
    pool = research_pool()
    theirs = occupy(pool, node=pool.nodes[0], count=1, team=pool.other_team, name="bobs-job")
    login(page, "alice")
    response = page.goto(f"/jobs/{theirs.pk}/")
    assert response.status == 404
    assert "bobs-job" not in page.content()


def test_catalogue(page, live_server, shots):
    pool = research_pool()
    add_catalogue_classes(pool)
    # Every H100 is busy: the catalogue gives the expected wait of a one-GPU job instead of "starts now".
    occupy(pool, node=pool.nodes[0], count=4, name="vit-a", runtime=1800)
    occupy(pool, node=pool.nodes[1], count=4, name="vit-b", runtime=900)
    occupy(pool, node=pool.nodes[2], count=4, name="asr-a", team=pool.other_team, runtime=3600)
    occupy(pool, node=pool.nodes[3], count=4, name="asr-b", team=pool.other_team, runtime=2400)
    login(page, "alice")
    cards = page.locator("#queues-class-cards .card")
    expect(cards).to_have_count(3)
    h100 = page.locator("#class-h100")
    expect(h100).to_contain_text("0 of 16 available now")
    expect(h100).to_contain_text("using 8 of 16")
    # vit-b started 5 minutes ago for 15: a one-GPU job waits about ten minutes.
    expect(h100.locator(".wait-later")).to_have_text(re.compile(r"~in (9|10) min"))
    expect(page.locator("#class-mig-1g-10gb")).to_contain_text("14 of 14 available now")
    expect(page.locator("#class-mig-1g-10gb")).to_contain_text("Starts now")
    page.screenshot(path=str(shots / "class-catalogue.png"), full_page=True)


def test_team_switcher(page, live_server):
    """A member of two teams works as one at a time: the switcher changes the jobs and quotas shown."""
    from tests.factories import MembershipFactory

    pool = research_pool()
    MembershipFactory(team=pool.other_team, user=pool.user)
    occupy(pool, node=pool.nodes[0], count=2, name="vision-run")
    occupy(pool, node=pool.nodes[2], count=3, team=pool.other_team, name="speech-run")
    login(page, "alice")
    switcher = page.locator("#queues-team-select")
    expect(switcher).to_have_value("speech")  # teams by name: Speech before Vision
    expect(page.locator("#class-h100")).to_contain_text("using 3 of 16")
    page.goto("/jobs/")
    expect(page.locator("#queues-job-list-table")).to_contain_text("speech-run")
    expect(page.locator("#queues-job-list-table")).not_to_contain_text("vision-run")
    page.select_option("#queues-team-select", "vision")  # choosing does not leave the page: Switch does
    with page.expect_navigation():
        page.locator("form.team-switch button[type=submit]").click()
    page.wait_for_url(re.compile(r"/jobs/$"))
    expect(page.locator("#queues-team-select")).to_have_value("vision")
    expect(page.locator("#queues-job-list-table")).to_contain_text("vision-run")
    expect(page.locator("#queues-job-list-table")).not_to_contain_text("speech-run")
    page.goto("/classes/")
    expect(page.locator("#class-h100")).to_contain_text("using 2 of 16")


def test_the_job_page_polls_with_its_etag_and_gets_not_modified_while_nothing_changes(page, live_server):
    """The live fragment's poll as Chromium makes it: the browser's cache sends the fragment's ETag back in
    If-None-Match and the server answers 304 while nothing the fragment shows changed (queues.page_validators);
    the page keeps showing the job as it was, and a change is shown at the next poll."""
    pool = research_pool(racks={"rack-a": [4]})
    occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, runtime=3600)
    login(page, "alice")
    page.goto("/submit/")
    fill_job(page, name="e2e-etag", devices="2", runtime="30s")
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="e2e-etag")
    polls = []
    live = re.compile(rf"/jobs/{job.pk}/$")
    asked_at = {}  # each poll's request: when it left (the server's clock is read between that and the answer)
    page.on("request", lambda r: asked_at.setdefault(r, time.time()))
    page.on(
        "response",
        lambda r: (
            polls.append((r, time.time())) if r.request.headers.get("hx-request") and live.search(r.url) else None
        ),
    )
    page.wait_for_timeout(16_000)  # three polls (every 5 s), nothing changed meanwhile
    sent = [
        (r.request.all_headers().get("if-none-match"), r.all_headers().get("etag"), asked_at[r.request], at)
        for r, at in polls
    ]
    assert len(sent) >= 2, sent
    # After the first, every poll sends the tag it got back, and the tag still holds: the server answered with an
    # empty 304 (it renders only when the tag differs), which Chromium turns into the cached fragment (status 200
    # as the page sees it). The tag moves with the clock only (every LIVE_CLOCK_SECONDS, for "since 3 min"): a poll
    # in the same clock period as the one before gets the same tag back.
    assert sent[0][1], sent
    for (_, before, before_asked, _), (asked, answered, _, answered_at) in itertools.pairwise(sent):
        assert asked == before, sent
        if int(before_asked) // LIVE_CLOCK_SECONDS == int(answered_at) // LIVE_CLOCK_SECONDS:
            assert answered == asked, sent
    assert sum(asked == answered for asked, answered, *_ in sent[1:]) >= 1, sent  # at least one "not modified"
    expect(state_badge(page)).to_have_attribute("data-state", "pending")
    expect(page.locator("[data-code]")).to_have_text("class_exhausted")
    with DB_LOCK:
        Job.objects.filter(pk=job.pk).update(name="e2e-etag-renamed")
    expect(page.locator(".job-head")).to_contain_text("e2e-etag-renamed", timeout=12_000)
