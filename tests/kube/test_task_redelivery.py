"""A worker killed in the middle of a submission or a cancellation: the message comes back, the re-run creates nothing
twice (the tasks acknowledge late, their bodies are idempotent)."""

from __future__ import annotations

import pytest

from clusters import tasks
from clusters.kube_sync.config import kube_config_push
from clusters.models import KubeJobState
from queues import job_sync
from queues.models import Job
from queues.services import JobSpec, job_submit
from tests.kube.cluster import at

pytestmark = pytest.mark.django_db


class WorkerKilled(BaseException):
    """Stands for SIGKILL: nothing after it runs, the open transaction is rolled back."""


@pytest.mark.parametrize("task", [tasks.cluster_job_create, tasks.cluster_job_delete], ids=lambda t: t.name)
def test_job_tasks_acknowledge_after_running_and_come_back_when_the_worker_dies(task):
    assert task.acks_late is True
    assert task.reject_on_worker_lost is True


@pytest.fixture
def pending_job(portal, cluster, api, django_capture_on_commit_callbacks):
    """A pending job whose submission task has not run yet (the worker takes it next)."""
    kube_config_push(cluster=cluster, api=api)
    spec = JobSpec(name="train", image="registry.example.com/a:1", resource_class=portal.rc, devices_per_pod=8)
    with django_capture_on_commit_callbacks(execute=False):
        return job_submit(owner=portal.user, team=portal.team, spec=spec, now=at(0))


def test_submission_killed_after_the_cluster_created_the_job_is_rerun_without_a_second_job(
    pending_job, emulator, monkeypatch
):
    real = job_sync.job_set_cluster_refs

    def killed(*args, **kwargs):
        raise WorkerKilled

    monkeypatch.setattr(job_sync, "job_set_cluster_refs", killed)
    with pytest.raises(WorkerKilled):
        tasks.cluster_job_create.apply(args=[pending_job.pk], throw=True)
    assert len(emulator.all("Job")) == 1  # the cluster has it, the portal does not know yet
    pending_job.refresh_from_db()
    assert not pending_job.k8s_uid

    monkeypatch.setattr(job_sync, "job_set_cluster_refs", real)
    tasks.cluster_job_create.apply(args=[pending_job.pk], throw=True)  # the broker hands the message out again
    tasks.cluster_job_create.apply(args=[pending_job.pk], throw=True)  # and once more: still one Job
    pending_job.refresh_from_db()
    assert len(emulator.all("Job")) == 1
    assert pending_job.k8s_uid == emulator.all("Job")[0]["metadata"]["uid"]
    assert pending_job.state == Job.State.PENDING
    assert KubeJobState.objects.filter(job=pending_job).count() == 1


def test_cancellation_rerun_after_the_delete_went_through_is_harmless(pending_job, portal, emulator):
    tasks.cluster_job_create.apply(args=[pending_job.pk], throw=True)
    Job.objects.filter(pk=pending_job.pk).update(state=Job.State.CANCELLED)
    tasks.cluster_job_delete.apply(args=[pending_job.pk], throw=True)
    assert emulator.all("Job") == []
    tasks.cluster_job_delete.apply(args=[pending_job.pk], throw=True)  # redelivered: the Job is gone already
    assert emulator.all("Job") == []
    assert len(emulator.deletes) == 1  # the second ask found nothing to delete, and that is no error
