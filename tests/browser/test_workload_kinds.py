"""Browser test of the workload kinds: one job of each kind submitted from the form, watched until it runs.

Playwright (sync API) driving Debian's /usr/bin/chromium headless; the simulated clock is driven from the test.
Screenshots go to docs/screenshots/ when SAVE_SCREENSHOTS=1 (the submit form of a distributed job, and the page
of a running multi-pod-set job), else to a temp folder.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from clusters.backends.simulated import simulated_cluster_tick_run
from pools.workload_kinds import KINDS, WorkloadKind, kind_spec
from queues.models import Job
from tests.browser.scenarios import PASSWORD, research_pool
from tests.browsing import DB_LOCK

pytestmark = pytest.mark.django_db(transaction=True)

#: Names of the jobs, one per kind (DNS labels).
NAMES = {kind: f"k-{kind}" for kind in KINDS}


def tick(pool, now):
    """One tick of the simulated cluster at ``now`` (no request is served meanwhile)."""
    with DB_LOCK:
        return simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=now)


def login(page: Page) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/classes/$"))


def choose_kind(page: Page, kind: str) -> None:
    """Pick the kind and wait until htmx has swapped in that kind's fields (filling them before would be lost)."""
    with page.expect_response(lambda r: "/submit/" in r.url and r.request.method == "GET"):
        page.select_option("#id_kind", kind)
    expect(page.locator("#queues-job-form-fields:not(.htmx-settling) #id_kind")).to_have_value(kind)


def submit_kind(page: Page, kind: str) -> None:
    """Fill the one submit form for ``kind`` (the kind first: choosing it re-renders the fields) and submit."""
    page.goto("/submit/")
    choose_kind(page, kind)
    spec = kind_spec(kind)
    if spec.kind != WorkloadKind.BATCH:
        expect(page.locator("label[for=id_pod_count]")).to_contain_text(spec.primary_pod_set)
    page.fill("#id_name", NAMES[kind])
    if kind != WorkloadKind.SESSION:  # a session without an image gets the notebook image
        page.fill("#id_image", "registry.example.org/vision/train:1.2")
    page.fill("#id_command", "python serve.py" if spec.runs_until_stopped else "python train.py")
    page.select_option("#id_devices_per_pod", "1")
    page.fill("#id_pod_count", "1")
    if not spec.runs_until_stopped:
        page.fill("#id_sim_runtime", "30s")
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))


def test_one_job_of_each_kind_is_submitted_and_runs(page, live_server, shots):
    pool = research_pool()
    pool.rc.allowed_kinds = list(KINDS)
    pool.rc.save()
    login(page)

    # The form of a distributed job: the kind's own pod sets get their fields.
    page.goto("/submit/")
    choose_kind(page, WorkloadKind.PYTORCHJOB)
    expect(page.locator("label[for=id_pod_count]")).to_contain_text("worker")
    expect(page.locator("#id_pod_set_master_devices")).to_be_visible()
    page.screenshot(path=str(shots / "submit-form-distributed.png"), full_page=True)

    for kind in KINDS:
        submit_kind(page, kind)
        expect(page.locator(".job-head")).to_contain_text(NAMES[kind])
    jobs = {job.kind: job for job in Job.objects.filter(team=pool.team)}
    assert set(jobs) == set(KINDS)
    assert jobs[WorkloadKind.SESSION].image == kind_spec(WorkloadKind.SESSION).default_image
    assert [c["name"] for c in jobs[WorkloadKind.RAYJOB].companion_pod_sets] == ["head"]

    start = timezone.now()
    tick(pool, start + timedelta(seconds=1))
    tick(pool, start + timedelta(seconds=2))
    assert set(Job.objects.filter(team=pool.team).values_list("state", flat=True)) == {Job.State.RUNNING}

    # A multi-pod-set job's page: every pod set with its devices and the flavor it was admitted on.
    page.goto(f"/jobs/{jobs[WorkloadKind.PYTORCHJOB].pk}/")
    expect(page.locator(".job-head [data-state]")).to_have_attribute("data-state", "running")
    pod_sets = page.get_by_role("table", name="Pod sets, admitted together")
    expect(pod_sets).to_contain_text("master")
    expect(pod_sets).to_contain_text("worker")
    expect(pod_sets).to_contain_text("h100")
    page.screenshot(path=str(shots / "job-pod-sets.png"), full_page=True)

    # Batch and distributed jobs end on their own; the session and the services run until stopped.
    tick(pool, start + timedelta(seconds=60))
    states = dict(Job.objects.filter(team=pool.team).values_list("kind", "state"))
    for kind in KINDS:
        wanted = Job.State.RUNNING if kind_spec(kind).runs_until_stopped else Job.State.SUCCEEDED
        assert states[kind] == wanted, (kind, states[kind])

    session = jobs[WorkloadKind.SESSION]
    page.goto(f"/jobs/{session.pk}/")
    expect(page.locator("#queues-job-session-access")).to_contain_text(f"port-forward pod/{session.k8s_name} 8888")
    page.get_by_role("link", name=re.compile(r"^Stop development session")).click()
    page.get_by_role("button", name=re.compile(r"^Yes, stop the development session")).click()
    page.wait_for_url(re.compile(rf"/jobs/{session.pk}/$"))
    session.refresh_from_db()
    assert session.state == Job.State.CANCELLED
    expect(page.locator(".timeline")).to_contain_text("Stopped")
