"""The periodic scans: "first in line" once per queueing, "GPUs idle" once per run, from the DCGM samples."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from notify.kinds import Kind
from notify.models import Event
from notify.scans import first_in_line_scan, idle_scan
from pools.gpu_usage import utilisation_record
from queues import services
from tests.factories import UserFactory
from tests.notify.conftest import run, submit

pytestmark = pytest.mark.django_db


def test_the_head_of_the_queue_is_told_once_and_again_after_a_requeue(world):
    ada, bob = UserFactory(username="ada"), UserFactory(username="bob")
    t0 = timezone.now() - timedelta(minutes=10)
    first = submit(world, ada, name="first", now=t0)
    submit(world, bob, name="second", now=t0 + timedelta(seconds=5))
    now = t0 + timedelta(minutes=5)
    assert first_in_line_scan(now=now) == 1
    assert first_in_line_scan(now=now + timedelta(minutes=1)) == 1  # offered again, recorded once
    [event] = Event.objects.filter(kind=Kind.FIRST_IN_LINE)
    assert (event.recipient, event.job_id) == (ada, first.pk)
    assert "first in line" in event.message
    # ada's job runs: bob's is now first
    run(world, first, now=now)
    first_in_line_scan(now=now + timedelta(minutes=2))
    assert list(Event.objects.filter(kind=Kind.FIRST_IN_LINE).values_list("recipient__username", flat=True)) == [
        "ada",
        "bob",
    ]


def test_a_job_that_waited_less_than_a_minute_is_not_told(world, settings):
    settings.NOTIFY_FIRST_IN_LINE_SECONDS = 60
    now = timezone.now()
    submit(world, UserFactory(username="ada"), now=now - timedelta(seconds=30))
    first_in_line_scan(now=now)
    assert not Event.objects.filter(kind=Kind.FIRST_IN_LINE).exists()


def test_a_job_whose_gpus_idle_for_the_window_is_warned_once(world, settings):
    settings.NOTIFY_IDLE_MINUTES, settings.NOTIFY_IDLE_PERCENT = 30, 5
    now = timezone.now()
    ada, bob = UserFactory(username="ada"), UserFactory(username="bob")
    idle = run(world, submit(world, ada, name="stuck", now=now - timedelta(hours=1)), now=now - timedelta(hours=1))
    busy = run(world, submit(world, bob, name="busy", now=now - timedelta(hours=1)), now=now - timedelta(hours=1))
    card = {j.pk: j.allocations.get().device_id for j in (idle, busy)}
    for minutes in (25, 15, 5):
        utilisation_record([(card[idle.pk], 1.0), (card[busy.pk], 90.0)], now=now - timedelta(minutes=minutes))
    assert idle_scan(now=now) == 1
    assert idle_scan(now=now + timedelta(minutes=1)) == 1  # offered again, recorded once
    [event] = Event.objects.filter(kind=Kind.IDLE)
    assert (event.recipient, event.job_id) == (ada, idle.pk)
    assert "at most 1 % busy" in event.message


def test_a_job_without_enough_samples_is_not_called_idle(world):
    now = timezone.now()
    job = run(world, submit(world, UserFactory(username="ada"), now=now - timedelta(hours=1)),
              now=now - timedelta(hours=1))  # fmt: skip
    utilisation_record([(job.allocations.get().device_id, 0.0)], now=now - timedelta(minutes=5))
    assert idle_scan(now=now) == 0
    services.job_finish(job, state="succeeded", now=now, message="Done.")
    assert idle_scan(now=now) == 0


def test_jobs_of_a_class_with_an_idle_window_are_negotiated_not_told_by_the_scan(world, settings):
    settings.NOTIFY_IDLE_MINUTES, settings.NOTIFY_IDLE_PERCENT = 30, 5
    now = timezone.now()
    job = run(world, submit(world, UserFactory(username="ada"), now=now - timedelta(hours=1)),
              now=now - timedelta(hours=1))  # fmt: skip
    job.resource_class.idle_window_seconds = 7200
    job.resource_class.save(update_fields=["idle_window_seconds"])
    for minutes in (25, 15, 5):
        utilisation_record([(job.allocations.get().device_id, 0.0)], now=now - timedelta(minutes=minutes))
    assert idle_scan(now=now) == 0
