"""The idle-GPU negotiation (queues.idle): warning, withdrawal, one snooze, checkpoint then release, idempotence."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from kernel.errors import Conflict, ValidationFailed
from notify.kinds import Kind
from notify.models import Event
from pools.gpu_usage import utilisation_record
from queues import services, tasks
from queues.idle import cards_idle, idle_negotiations_scan, job_idle_notice, job_idle_snooze
from queues.models import Job, JobEvent, JobIdle
from tests.factories import UserFactory
from tests.queues import idle_world
from tests.queues.idle_world import HOUR

pytestmark = pytest.mark.django_db

world = idle_world.world  # the fixture


def steps(job: Job) -> list[str]:
    return [e.details["step"] for e in job.events.order_by("at", "id") if e.details.get("reason") == "idle_gpus"]


def test_idle_for_the_window_warns_once_with_a_banner_a_timeline_event_and_a_notification(world):
    job = world.running("notebook", devices=2)
    world.samples(job, start=60, end=HOUR + 60, percent=1.0)
    report = idle_negotiations_scan(now=world.at(HOUR + 60))
    assert report.warned == [job.pk]
    again = idle_negotiations_scan(now=world.at(HOUR + 60))  # the same instant: nothing new
    later = idle_negotiations_scan(now=world.at(HOUR + 120))  # a minute on, still within the grace period
    assert (again.warned, later.warned, later.released) == ([], [], [])
    assert steps(job) == ["warning"]
    row = JobIdle.objects.get(job=job)
    assert (row.phase, row.due_at) == (JobIdle.Phase.WARNED, world.at(HOUR + 60 + 1800))
    [note] = Event.objects.filter(kind=Kind.IDLE, job=job)
    assert note.recipient == world.user
    assert "under 5 % busy for 1 hour" in note.message
    notice = job_idle_notice(job, user=world.user)
    assert notice.can_snooze
    assert "released (stopped)" in notice.message
    assert not job_idle_notice(job, user=UserFactory()).can_snooze  # only the owner snoozes


def test_one_busy_card_or_too_few_samples_is_not_idle(world):
    job = world.running("notebook", devices=2)
    busy_card = job.allocations.order_by("device_id").first().device_id
    world.samples(job, start=60, end=HOUR + 60, percent=1.0)
    utilisation_record([(busy_card, 40.0)], now=world.at(HOUR))
    assert idle_negotiations_scan(now=world.at(HOUR + 60)).warned == []
    other = world.running("quiet")
    # idle samples only in the last ten minutes: they do not cover the window
    world.samples(other, start=HOUR - 540, end=HOUR + 60, percent=0.0, every=60)
    assert idle_negotiations_scan(now=world.at(HOUR + 60)).warned == []
    assert not JobIdle.objects.filter(phase=JobIdle.Phase.WARNED).exists()


def test_a_job_running_less_than_the_window_is_not_judged(world):
    job = world.running("notebook")
    world.samples(job, start=60, end=HOUR - 120, percent=0.0)
    assert idle_negotiations_scan(now=world.at(HOUR - 60)).warned == []


def test_no_action_when_the_class_has_no_idle_window(world):
    world.rc.idle_window_seconds = None
    world.rc.save(update_fields=["idle_window_seconds"])
    job = world.running("batch")
    world.samples(job, start=60, end=5 * HOUR, percent=0.0)
    for hours in (1, 2, 3, 5):
        report = idle_negotiations_scan(now=world.at(hours * HOUR + 60))
        assert report == type(report)()
    assert steps(job) == []
    assert not JobIdle.objects.exists()


def test_activity_during_the_grace_period_withdraws_the_warning_and_the_watch_starts_again(world):
    job = world.running("notebook")
    world.samples(job, start=60, end=HOUR + 60, percent=0.0)
    idle_negotiations_scan(now=world.at(HOUR + 60))
    world.samples(job, start=HOUR + 300, end=HOUR + 300, percent=70.0)
    report = idle_negotiations_scan(now=world.at(HOUR + 600))
    assert report.withdrawn == [job.pk]
    assert JobIdle.objects.get(job=job).phase == JobIdle.Phase.ACTIVE
    # past the old due time nothing happens: the job is not released
    world.samples(job, start=HOUR + 900, end=HOUR + 2400, percent=0.0)
    assert idle_negotiations_scan(now=world.at(HOUR + 2400)).released == []
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    assert steps(job) == ["warning", "withdrawn"]
    assert "busy again (70 %" in job.events.get(details__step="withdrawn").message


def test_release_without_a_checkpoint_policy_ends_the_job_and_frees_its_devices_after_commit(
    world, django_capture_on_commit_callbacks, monkeypatch
):
    job = world.running("notebook", devices=2)
    world.samples(job, start=60, end=HOUR + 60 + 1800, percent=2.0)
    idle_negotiations_scan(now=world.at(HOUR + 60))
    told = []

    class Port:
        def job_cancelled(self, *, job_id: int) -> None:
            told.append(job_id)

    monkeypatch.setattr("queues.idle.cluster_port", Port)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = idle_negotiations_scan(now=world.at(HOUR + 60 + 1800))
    assert report.released == [job.pk]
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert not job.allocations.filter(ended_at__isnull=True).exists()
    assert set(job.allocations.values_list("end_reason", flat=True)) == {Job.State.CANCELLED}
    end = job.events.get(kind=JobEvent.Kind.CANCELLED)
    assert end.message.startswith("Released for idle GPUs without a checkpoint (it has no checkpoint policy)")
    assert "2 GPUs were idle" in end.message
    assert told == []  # the cluster is told only after commit
    for callback in callbacks:
        callback()
    assert told == [job.pk]
    assert JobIdle.objects.get(job=job).phase == JobIdle.Phase.RELEASED
    assert steps(job) == ["warning"]


def test_checkpoint_policy_asks_for_a_checkpoint_then_releases_at_the_deadline(world):
    job = world.running("trainer", checkpoint=True)
    world.samples(job, start=60, end=HOUR + 2000, percent=0.0)
    idle_negotiations_scan(now=world.at(HOUR + 60))
    assert job_idle_notice(job, user=world.user).message.count("asked to checkpoint, then released") == 1
    report = idle_negotiations_scan(now=world.at(HOUR + 1860))
    assert report.checkpoint_requested == [job.pk]
    request = job.events.get(kind=JobEvent.Kind.CHECKPOINT_REQUESTED)
    assert "SIGUSR1" in request.message
    assert request.details["graceSeconds"] == 10
    assert Event.objects.filter(kind=Kind.IDLE, job=job).count() == 2  # the warning and the checkpoint request
    # the checkpoint may make the GPUs busy: that no longer withdraws anything
    world.samples(job, start=HOUR + 1865, end=HOUR + 1865, percent=90.0)
    assert idle_negotiations_scan(now=world.at(HOUR + 1865)).released == []
    assert idle_negotiations_scan(now=world.at(HOUR + 1870)).released == [job.pk]
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert "at its checkpoint deadline" in job.events.get(kind=JobEvent.Kind.CANCELLED).message
    assert steps(job) == ["warning", "checkpoint"]


def test_a_confirmed_checkpoint_releases_before_the_deadline(world):
    job = world.running("trainer", checkpoint=True)
    world.samples(job, start=60, end=HOUR + 2000, percent=0.0)
    idle_negotiations_scan(now=world.at(HOUR + 60))
    idle_negotiations_scan(now=world.at(HOUR + 1860))
    services.record_event(job, JobEvent.Kind.CHECKPOINT_DONE, "Checkpoint written.", at=world.at(HOUR + 1862))
    assert idle_negotiations_scan(now=world.at(HOUR + 1863)).released == [job.pk]
    assert "after its checkpoint was written" in job.events.get(kind=JobEvent.Kind.CANCELLED).message


def test_the_owner_snoozes_once_and_a_second_snooze_is_refused(world):
    job = world.running("notebook")
    world.samples(job, start=60, end=4 * HOUR, percent=0.0)
    with pytest.raises(Conflict, match="no idle warning"):
        job_idle_snooze(job=job, user=world.user, now=world.at(HOUR))
    idle_negotiations_scan(now=world.at(HOUR + 60))
    with pytest.raises(ValidationFailed, match="only the job's owner"):
        job_idle_snooze(job=job, user=UserFactory(), now=world.at(HOUR + 120))
    job_idle_snooze(job=job, user=world.user, now=world.at(HOUR + 120))
    # the old due time passes: no release; a new warning only after another whole window from the snooze
    assert idle_negotiations_scan(now=world.at(HOUR + 1900)).released == []
    assert idle_negotiations_scan(now=world.at(2 * HOUR + 60)).warned == []
    assert idle_negotiations_scan(now=world.at(2 * HOUR + 120)).warned == [job.pk]
    notice = job_idle_notice(job, user=world.user)
    assert not notice.can_snooze
    assert notice.snoozed
    with pytest.raises(Conflict, match="already snoozed once"):
        job_idle_snooze(job=job, user=world.user, now=world.at(2 * HOUR + 180))
    assert "cannot be snoozed again" in job.events.get(details__step="snoozed").message
    assert steps(job) == ["warning", "snoozed", "warning"]
    assert "can snooze this once" not in job.events.filter(details__step="warning").last().message


def test_a_requeued_job_starts_its_watch_again(world):
    job = world.running("notebook")
    world.samples(job, start=60, end=HOUR + 60, percent=0.0)
    idle_negotiations_scan(now=world.at(HOUR + 60))
    services.job_preempt(job, now=world.at(HOUR + 100), preemptor=None, reason="test", message="")
    services.job_requeue(job, now=world.at(HOUR + 100), reason="preempted", message="Evicted.", checkpointed=False)
    simulated_cluster_tick_run(cluster_id=world.cluster.pk, now=world.at(HOUR + 110))
    simulated_cluster_tick_run(cluster_id=world.cluster.pk, now=world.at(HOUR + 120))
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    report = idle_negotiations_scan(now=world.at(HOUR + 1900))
    assert (report.withdrawn, report.released) == ([job.pk], [])


def test_cards_idle_needs_every_card_scraped_and_under_the_threshold():
    assert not cards_idle({}, [], start=timezone.now(), end=timezone.now(), threshold=5)


def test_the_beat_task_is_declared_with_an_expiry_and_runs_the_scan(world, settings):

    [entry] = [e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "queues.idle_scan"]
    assert entry["options"]["expires"] > 0
    assert tasks.idle_scan.name == "queues.idle_scan"
    job = world.running("notebook")
    now = timezone.now()
    cards = list(job.allocations.values_list("device_id", flat=True))
    for minutes in range(0, 61, 5):
        utilisation_record([(c, 0.0) for c in cards], now=now - timedelta(minutes=minutes))
    tasks.idle_scan.delay()  # eager in tests
    assert steps(job) == ["warning"]


def test_a_scan_of_busy_jobs_reads_a_few_queries_and_writes_nothing(world, django_assert_max_num_queries):
    jobs = [world.running(f"busy-{i}") for i in range(4)]
    for job in jobs:
        world.samples(job, start=60, end=HOUR + 60, percent=60.0)
    # the running jobs, their negotiation rows, their cards, the samples of the one window they share
    with django_assert_max_num_queries(4):
        report = idle_negotiations_scan(now=world.at(HOUR + 60))
    assert report.warned == []
    assert not JobIdle.objects.exists()
