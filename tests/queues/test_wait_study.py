"""What would have helped: a study replays a cluster's recorded jobs as they ran and once per cause's action.

Hand-worked: Vision has 4 of the node's 8 H100s as quota (no cohort). Two 4-GPU jobs arrive at 10:00 and run 2 h
each; the second waits for Vision's quota until the first ends at 12:00. Replayed as it ran: 4 GPUs × 2 h = 8
GPU-hours of waiting. The attribution puts those 8 hours on "own quota used up"; the action tried is 4 more GPUs of
quota for Vision (its largest waiting job), with which both start at 10:00: 8 GPU-hours saved.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queues import services as job_services
from queues.engine import wait_codes as wc
from queues.models import Cohort, Job, JobEvent, Reservation, TeamQuota, WaitActionStudy
from queues.waiting import rollup
from queues.waiting.study import wait_study_request
from queues.waiting.study_replay import study_results
from tests.browser.scenarios import research_pool
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 10, 10, tzinfo=UTC)
H = timedelta(hours=1)


@pytest.fixture(autouse=True)
def _utc(settings):
    settings.BILLING_TIME_ZONE = "UTC"


def two_quota_jobs(pool, t0: datetime, *, code: str = wc.QUOTA_EXHAUSTED) -> None:
    """The hand-worked history of the module docstring from ``t0`` on (Vision's quota must be 4 of 8 H100s):
    two 4-GPU jobs submitted at ``t0``, 2 h each, the second waiting (for ``code``) until the first ends."""

    def ran(name: str, started, *, waited: bool) -> None:
        job = JobFactory(
            team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc, name=name,
            devices_per_pod=4, submitted_at=t0, state=Job.State.SUCCEEDED, admitted_at=started, started_at=started,
            finished_at=started + 2 * H, priority_class=pool.normal,
        )  # fmt: skip
        job_services.record_event(job, JobEvent.Kind.SUBMITTED, "Submitted.", at=t0)
        if waited:
            JobEvent.objects.create(
                job=job, at=t0 + timedelta(seconds=5), kind=JobEvent.Kind.WAIT_REASON, message="quota",
                details={"code": code},
            )  # fmt: skip
        job_services.record_event(job, JobEvent.Kind.ADMITTED, "Admitted.", at=started)
        job_services.record_event(job, JobEvent.Kind.SUCCEEDED, "Done.", at=started + 2 * H)

    ran("first", t0, waited=False)
    ran("second", t0 + 2 * H, waited=True)


@pytest.fixture
def history():
    pool = research_pool(racks={"rack-a": [8]}, nominal="4")
    two_quota_jobs(pool, T0)
    rollup.wait_attribution_sync(now=T0 + 5 * H)
    return pool


def test_more_quota_would_have_saved_the_waiting(history):
    results = study_results(cluster=history.cluster, start=T0 - H, end=T0 + 6 * H)
    assert results["jobs"] == 2
    assert results["baseline_hours"] == pytest.approx(8.0)
    quota = results["causes"]["quota"]
    assert quota["hours"] == pytest.approx(8.0)
    assert quota["action"] == "4 more GPU(s) of nominal quota for Vision"
    assert quota["saved_hours"] == pytest.approx(8.0)
    assert set(results["causes"]) == {"quota"}


def test_a_study_runs_in_the_worker_and_keeps_its_results(history, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        study = wait_study_request(cluster=history.cluster, days=1, now=T0 + 6 * H)
    study.refresh_from_db()
    assert study.state == WaitActionStudy.State.DONE, study.error
    assert study.results["causes"]["quota"]["saved_hours"] == pytest.approx(8.0)


def test_without_the_reservation_the_waiting_it_caused_is_saved():
    """Hand-worked: one node of 8 H100s; Vision's quota is all 8, Speech's none, in one cohort. Speech reserved 4
    GPUs from 10:00 to 14:00 (held from 10:00 less the lead), so Vision's quota in force is 4: its two 4-GPU jobs of
    10:00 run one after the other, the second waiting 2 h for capacity reserved for Speech: 8 GPU-hours, attributed
    to the reservation. Replayed without the reservation both start at 10:00: all 8 saved."""
    pool = research_pool(racks={"rack-a": [8]}, nominal="8", other_nominal="0")
    org = Cohort.objects.create(name="org")
    TeamQuota.objects.filter(pk__in=[pool.quota.pk, TeamQuota.objects.get(team=pool.other_team).pk]).update(cohort=org)
    Reservation.objects.create(
        team=pool.other_team, cluster=pool.cluster, resource_class=pool.rc, flavor=pool.flavor,
        resource_name="nvidia.com/gpu", count=4, starts_at=T0, ends_at=T0 + 4 * H, purpose="evaluation run",
        state=Reservation.State.APPROVED, decision=Reservation.Decision.AUTO, decided_at=T0 - 24 * H,
        requested_at=T0 - 24 * H,
    )  # fmt: skip
    two_quota_jobs(pool, T0, code=wc.CAPACITY_RESERVED)
    rollup.wait_attribution_sync(now=T0 + 5 * H)
    results = study_results(cluster=pool.cluster, start=T0 - H, end=T0 + 6 * H)
    assert results["baseline_hours"] == pytest.approx(8.0)
    reserved = results["causes"]["reservation"]
    assert reserved["hours"] == pytest.approx(8.0)
    assert reserved["action"] == "Without the window's 1 reservation (for Speech)"
    assert reserved["saved_hours"] == pytest.approx(8.0)
    assert set(results["causes"]) == {"reservation"}
