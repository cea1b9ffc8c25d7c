"""The services the cluster sync calls: references, unrecognised waits, one reason for many jobs, banked time."""

from __future__ import annotations

import pytest
from django.utils import timezone

from queues import job_sync, services
from queues.models import Job, JobEvent
from tests.queues.test_job_services import setup, spec  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


def _submit(setup, name: str) -> Job:  # noqa: F811
    user, team, rc, _ = setup
    return services.job_submit(owner=user, team=team, spec=spec(rc, name=name))


def test_jobs_set_cluster_refs_writes_only_what_is_given(setup):  # noqa: F811
    a, b = _submit(setup, "a"), _submit(setup, "b")
    job_sync.jobs_set_cluster_refs([(a, "uid-a", ""), (b, "", "wl-b")])
    job_sync.job_set_cluster_refs(a, workload_name="wl-a")
    rows = dict(Job.objects.filter(pk__in=[a.pk, b.pk]).values_list("pk", "k8s_uid"))
    assert rows == {a.pk: "uid-a", b.pk: ""}
    assert Job.objects.get(pk=a.pk).workload_name == "wl-a"
    assert Job.objects.get(pk=b.pk).workload_name == "wl-b"


def test_job_set_unrecognised_wait_clears_the_code_and_notes_it_once(setup):  # noqa: F811
    job = _submit(setup, "odd")
    now = timezone.now()
    services.job_set_wait_reason(job, code="quota_exhausted", message="no quota", now=now)
    assert job_sync.job_set_unrecognised_wait(job, text="the moon is wrong", details={"x": 1}, now=now)
    assert not job_sync.job_set_unrecognised_wait(job, text="the moon is wrong", details={"x": 1}, now=now)
    job.refresh_from_db()
    assert (job.wait_reason, job.wait_message, job.kueue_message) == ("", "the moon is wrong", "the moon is wrong")
    assert job.wait_details == {"x": 1, "unrecognised": True}
    notes = job.events.filter(kind=JobEvent.Kind.NOTE)
    assert [n.details for n in notes] == [{"unrecognised": True, "kueueMessage": "the moon is wrong"}]


def test_jobs_set_wait_reason_writes_one_event_per_change_and_is_idempotent(setup):  # noqa: F811
    jobs = [_submit(setup, f"j{i}") for i in range(3)]
    now = timezone.now()
    ids = [j.pk for j in jobs]
    kwargs = {"code": "cluster_unreachable", "message": "gone", "details": {"asOf": None}, "now": now}
    assert job_sync.jobs_set_wait_reason(job_ids=ids, **kwargs) == 3
    assert job_sync.jobs_set_wait_reason(job_ids=ids, **kwargs) == 0
    assert set(Job.objects.filter(pk__in=ids).values_list("wait_reason", flat=True)) == {"cluster_unreachable"}
    assert JobEvent.objects.filter(job_id__in=ids, kind=JobEvent.Kind.WAIT_REASON).count() == 3


def test_job_set_run_seconds_banked(setup):  # noqa: F811
    job = _submit(setup, "banked")
    job_sync.job_set_run_seconds_banked(job, seconds=120)
    assert Job.objects.get(pk=job.pk).run_seconds_banked == 120
