"""A waiting job's timeline and estimate keep up with its header (issue 32).

The timeline kept the figures its wait reason had when it began while the header showed new ones; an estimate of
"p50 in 12 h" became "no estimate within 14 days" minutes later with no word of what changed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from pools.state_version import bump
from queues import diagnosis, diagnosis_store, services
from queues import selectors as sel
from queues.diagnosis_pages import page_digest, page_of
from queues.diagnosis_store import _moved_much
from queues.models import DiagnosisPage, Job, WaitReason
from queues.services import JobSpec
from tests.browser.scenarios import occupy, research_pool

pytestmark = pytest.mark.django_db
NOW = timezone.now().replace(microsecond=0)
H = timedelta(hours=1)
M = timedelta(minutes=1)


def _waiting(pool, devices: int) -> Job:
    spec = JobSpec(name="train", image="registry.example.org/t:1", resource_class=pool.rc, devices_per_pod=devices)
    job = services.job_submit(owner=pool.user, team=pool.team, spec=spec)
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk)
    job.refresh_from_db()
    return job


def test_the_ongoing_reason_in_the_timeline_has_todays_figures(client):
    pool = research_pool(racks={"rack-a": [4, 4]}, nominal="4")
    first = occupy(pool, node=pool.nodes[0], count=2, name="one")
    occupy(pool, node=pool.nodes[0], count=2, name="two")
    job = _waiting(pool, 4)
    assert job.wait_reason == WaitReason.QUOTA_EXHAUSTED
    began = job.wait_message
    assert "uses 4 of its 4" in began
    services.job_finish(first, state=Job.State.SUCCEEDED, now=timezone.now(), message="done")
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk)
    job.refresh_from_db()
    assert job.wait_reason == WaitReason.QUOTA_EXHAUSTED  # the same reason, other figures
    assert "uses 2 of its 4" in job.wait_message
    [entry] = [e for e in sel.job_timeline(job) if e.code]
    assert (entry.message, entry.first_message, entry.ongoing) == (job.wait_message, began, True)
    client.force_login(pool.user)
    html = client.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert html.count("uses 2 of its 4") == 2  # the header and the timeline say the same
    assert "(figures as of now)" in html
    api = client.get(f"/api/jobs/{job.pk}/timeline/").json()
    assert [e["first_message"] for e in api if e["code"]] == [began]


@pytest.mark.parametrize(
    ("old", "new", "much"),
    [
        ((False, NOW + 12 * H), (False, None), True),  # lost
        ((False, None), (False, NOW + H), True),  # found
        ((False, NOW + 12 * H), (False, NOW + 13 * H), False),  # an hour on twelve: noise
        ((False, NOW + 12 * H), (False, NOW + 20 * H), True),  # eight hours on twelve
        ((False, NOW + 20 * M), (False, NOW + 40 * M), False),  # twenty minutes: under half an hour
        ((True, None), (False, NOW + 10 * M), False),  # starts now → in ten minutes
        ((True, None), (False, NOW + 5 * H), True),
        ((True, None), (True, None), False),
    ],
)
def test_what_counts_as_an_estimate_that_moved(old, new, much):
    assert _moved_much(old, new, now=NOW) is much


def test_an_estimate_that_vanished_says_what_changed(client):
    pool = research_pool(racks={"rack-a": [4]}, nominal="4", other_nominal="4")
    occupy(pool, node=pool.nodes[0], count=2, runtime=1800, name="ends-soon")
    job = _waiting(pool, 4)
    first = diagnosis.job_diagnosis(job)
    assert first.eta.p50 is not None  # the blocker ends within the hour
    assert first.eta_change is None
    # A development session takes the rest of the node: it runs until stopped, so nothing frees room for good.
    services.job_finish(
        Job.objects.get(name="ends-soon"), state=Job.State.SUCCEEDED, now=timezone.now(), message="done"
    )
    session = occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, name="notebook")
    Job.objects.filter(pk=session.pk).update(kind="session")
    services.record_event(session, "admitted", "Admitted.", at=timezone.now())
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk)
    job.refresh_from_db()
    later = diagnosis.job_diagnosis(job)
    assert later.eta.p50 is None
    change = later.eta_change
    assert change is not None
    assert change["p50"] == first.eta.p50
    assert any("run until stopped" in c for c in change["causes"]), change["causes"]
    client.force_login(pool.user)
    html = client.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert f'id="queues-job-eta-change-{job.pk}"' in html
    assert "The estimate changed" in html
    assert client.get(f"/api/jobs/{job.pk}/wait-reason/").json()["eta_change"]["causes"] == change["causes"]


def test_the_estimate_before_is_kept_on_the_page_outside_its_digest(django_capture_on_commit_callbacks):
    """On issue 40's pages: the estimate before a big move is kept per job in its page's JSON, read in the poll's
    one query; a refresh that changes nothing rewrites no page, and one that rewrites the page for another job
    carries it."""
    pool = research_pool(racks={"rack-a": [4]}, nominal="4", other_nominal="4")
    blocker = occupy(pool, node=pool.nodes[0], count=2, runtime=1800, name="ends-soon")
    job = _waiting(pool, 4)
    now = timezone.now()
    first = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    was = diagnosis_store.stored_job_diagnosis(job, version=first.version, now=now)
    assert was is not None
    assert was.eta.p50 is not None
    assert was.eta_before is None
    with django_capture_on_commit_callbacks(execute=True):
        services.job_finish(blocker, state=Job.State.SUCCEEDED, now=now, message="done")
        session = occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, name="notebook")
        Job.objects.filter(pk=session.pk).update(kind="session")
    second = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now + M)
    moved = diagnosis_store.stored_job_diagnosis(job, version=second.version, now=now + M)
    assert moved.eta.p50 is None
    before = moved.eta_before
    assert before is not None
    assert (before["p50"], before["code"]) == (was.eta.p50.isoformat(), was.verdict.code)
    row = DiagnosisPage.objects.get(cluster=pool.cluster, page=page_of(job.pk))
    assert row.data.startswith('{"b":')
    assert row.digest != page_digest(row.data)  # the digest is the entries'
    bump(cluster_ids=[pool.cluster.pk])
    third = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now + 2 * M)
    assert third.written == 0
    with django_capture_on_commit_callbacks(execute=True):  # another job on the same page: the page is rewritten
        other = services.job_submit(
            owner=pool.user,
            team=pool.team,
            spec=JobSpec(name="later", image="registry.example.org/t:1", resource_class=pool.rc, devices_per_pod=1),
        )
    assert page_of(other.pk) == page_of(job.pk)
    fourth = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now + 3 * M)
    assert fourth.written == 1
    carried = diagnosis_store.stored_job_diagnosis(job, version=fourth.version, now=now + 3 * M)
    assert carried.eta_before == before  # its estimate did not move again: the one before stays
    assert diagnosis_store.stored_job_diagnosis(other, version=fourth.version, now=now + 3 * M).eta_before is None
