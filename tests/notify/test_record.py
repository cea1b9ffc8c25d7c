"""The outbox is written with the job change, once per transition, and says what the user needs to know."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from notify.kinds import Kind, kind_for_event
from notify.models import Event
from queues import services
from queues.health_jobs import jobs_protect
from queues.models import Job, JobEvent
from tests.factories import UserFactory
from tests.notify.conftest import run, submit

pytestmark = pytest.mark.django_db


def kinds(user) -> list[str]:
    return list(Event.objects.filter(recipient=user).order_by("id").values_list("kind", flat=True))


def test_each_transition_is_recorded_once_for_the_owner(world, now):
    ada = UserFactory(username="ada")
    job = submit(world, ada, now=now)
    assert kinds(ada) == []  # a submission is the user's own act: nothing to tell
    run(world, job, now=now)
    services.job_finish(job, state=Job.State.SUCCEEDED, now=now + timedelta(minutes=5), message="Done.")
    services.job_finish(job, state=Job.State.SUCCEEDED, now=now + timedelta(minutes=6), message="Done again.")
    assert kinds(ada) == [Kind.ADMITTED, Kind.ADMITTED, Kind.FINISHED]  # admitted, started, finished
    titles = list(Event.objects.filter(recipient=ada).order_by("id").values_list("title", flat=True))
    assert titles == [f"{world.team.slug}/train: admitted", f"{world.team.slug}/train: started",
                      f"{world.team.slug}/train: finished"]  # fmt: skip
    keys = list(Event.objects.values_list("key", flat=True))
    assert len(set(keys)) == 3
    assert all(k.startswith(f"job:{job.pk}:") for k in keys)


def test_a_cluster_event_replayed_by_the_sync_is_recorded_once(world, now):
    ada = UserFactory(username="ada")
    job = submit(world, ada, now=now)
    for _ in range(3):  # the sync sees the same Kueue event on every pass
        services.record_event(job, JobEvent.Kind.FAILED, "Pod exited 1.", at=now, source_key="uid-1/failed")
    assert kinds(ada) == [Kind.FAILED]


def test_a_rolled_back_change_notifies_nobody(world, now):
    ada = UserFactory(username="ada")
    job = submit(world, ada, now=now)

    def failing_tick() -> None:
        with transaction.atomic():
            run(world, job, now=now)
            raise RuntimeError("the tick failed after admitting")

    with pytest.raises(RuntimeError):
        failing_tick()
    assert kinds(ada) == []
    assert Job.objects.get(pk=job.pk).state == Job.State.PENDING


def test_reclaiming_borrowed_gpus_says_checkpoint_now_with_the_grace(world, now, settings):
    settings.SIMULATED_CHECKPOINT_SECONDS = 90
    ada = UserFactory(username="ada")
    job = submit(world, ada, now=now, checkpoint_path="/ckpt", checkpoint_signal="SIGUSR1")
    run(world, job, now=now, borrowing=True)
    at = now + timedelta(minutes=10)
    services.job_preempt(job, now=at, preemptor=None, reason="InCohortReclamation", message="m")
    event = Event.objects.get(recipient=ada, kind=Kind.RECLAIM)
    assert "checkpoint now" in event.message
    assert "at the latest 90 s after" in event.message
    assert event.details == {"deadline": (at + timedelta(seconds=90)).isoformat(), "graceSeconds": 90}


def test_preemption_without_checkpoint_tells_the_work_lost(world, now):
    ada = UserFactory(username="ada")
    job = submit(world, ada, now=now)
    run(world, job, now=now, devices=2)
    at = now + timedelta(hours=1, seconds=1)
    services.job_preempt(job, now=at, preemptor=None, reason="InClusterQueue", message="m")
    services.job_requeue(job, now=at, reason="preempted", message="Evicted.", checkpointed=False)
    preempted = Event.objects.filter(recipient=ada, kind=Kind.PREEMPTED).order_by("id")
    assert [e.title.split(": ")[1] for e in preempted] == ["preempted", "preempted"]
    assert "2.00 device-hours of work lost" in preempted.last().message


def test_a_move_off_a_failing_gpu_is_one_notification(world, now):
    ada = UserFactory(username="ada")
    job = submit(world, ada, now=now)  # no checkpoint policy: moved at once, with an explanation line
    run(world, job, now=now)
    held = [a.device for a in job.allocations.select_related("device__node")]
    jobs_protect(devices=held, reason="XID 79", now=now + timedelta(minutes=1), evict_without_checkpoint=True)
    assert job.events.filter(details__reason="device_unhealthy").count() == 2  # the move and its explanation
    [event] = Event.objects.filter(recipient=ada, kind=Kind.HEALTH)
    assert "Moving off unhealthy hardware" in event.message


@pytest.mark.parametrize(
    ("event_kind", "details", "borrowing", "expected"),
    [
        ("wait_reason", {}, False, None),
        ("submitted", {}, False, None),
        ("preempted", {"reason": "InCohortReclamation"}, True, Kind.RECLAIM),
        ("preempted", {"reason": "InCohortReclamation"}, False, Kind.PREEMPTED),  # its own quota: no reclaim
        ("preempted", {"reason": "InClusterQueue"}, True, Kind.PREEMPTED),
        ("preempted", {"reason": "repair_drain"}, False, Kind.HEALTH),
        ("requeued", {"reason": "preempted"}, False, None),  # checkpointed: nothing lost, nothing new to say
        ("requeued", {"lostDeviceHours": 1.5}, False, Kind.PREEMPTED),
        ("timed_out", {}, False, Kind.FAILED),
        ("note", {}, False, None),
        # the idle-GPU negotiation (queues.idle): the warning and the checkpoint request are told, not the rest
        ("note", {"reason": "idle_gpus", "step": "warning"}, False, Kind.IDLE),
        ("checkpoint_requested", {"reason": "idle_gpus", "step": "checkpoint"}, False, Kind.IDLE),
        ("note", {"reason": "idle_gpus", "step": "withdrawn"}, False, None),
        ("note", {"reason": "idle_gpus", "step": "snoozed"}, False, None),
    ],
)
def test_kind_for_event(event_kind, details, borrowing, expected):
    assert kind_for_event(event_kind=event_kind, details=details, borrowing=borrowing) == expected
