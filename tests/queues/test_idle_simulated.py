"""The simulated cluster's DCGM (clusters.simulated_dcgm): sessions left open go idle and are negotiated away."""

from __future__ import annotations

from datetime import timedelta

import pytest

from clusters import tasks as cluster_tasks
from clusters.simulated_dcgm import simulated_activity, simulated_dcgm_record
from pools.gpu_usage import GpuUtilSample
from pools.workload_kinds import WorkloadKind
from queues.idle import idle_negotiations_scan
from queues.models import Job
from tests.queues import idle_world
from tests.queues.idle_world import HOUR

pytestmark = pytest.mark.django_db

world = idle_world.world  # the fixture


def test_activity_rules_per_kind(world):
    since = world.t0
    later = since + timedelta(minutes=45)
    assert simulated_activity(job_id=3, kind=WorkloadKind.SESSION, held_since=since, at=since) >= 35  # warming up
    assert simulated_activity(job_id=3, kind=WorkloadKind.SESSION, held_since=since, at=later) < 1  # left open
    bursts = [
        simulated_activity(job_id=4, kind=WorkloadKind.SESSION, held_since=since, at=since + timedelta(minutes=m))
        for m in range(10, 100)
    ]
    assert all(max(bursts[i : i + 30]) >= 40 for i in range(60))  # busy at some point of every half hour
    assert simulated_activity(job_id=3, kind=WorkloadKind.INFERENCE, held_since=since, at=later) >= 20
    assert simulated_activity(job_id=3, kind=WorkloadKind.BATCH, held_since=since, at=later) >= 70
    assert simulated_activity(job_id=7, kind=WorkloadKind.BATCH, held_since=since, at=later) < 1  # hangs


def running_session(world, name: str, *, odd: bool) -> Job:
    """A running session whose id has the wanted parity (the rule picks idle ones by odd id)."""
    while True:
        job = world.running(name)
        if job.pk % 2 == int(odd):
            Job.objects.filter(pk=job.pk).update(kind=WorkloadKind.SESSION)
            job.refresh_from_db()
            return job
        Job.objects.filter(pk=job.pk).update(state=Job.State.CANCELLED)
        job.allocations.update(ended_at=world.at(1), end_reason="cancelled")


def test_a_forgotten_session_is_warned_then_released_a_bursty_one_is_not(world):
    forgotten = running_session(world, "forgotten", odd=True)
    bursty = running_session(world, "bursty", odd=False)
    written = simulated_dcgm_record(cluster=world.cluster, start=world.at(60), end=world.at(HOUR + 60),
                                    step=timedelta(minutes=1))  # fmt: skip
    assert written == 61 * 2
    # the first 10 minutes were busy (warming up): a whole idle hour only after them
    assert idle_negotiations_scan(now=world.at(HOUR + 60)).warned == []
    simulated_dcgm_record(cluster=world.cluster, start=world.at(HOUR + 120), end=world.at(HOUR + 2460),
                          step=timedelta(minutes=1))  # fmt: skip
    assert idle_negotiations_scan(now=world.at(HOUR + 660)).warned == [forgotten.pk]
    report = idle_negotiations_scan(now=world.at(HOUR + 2460))
    assert report.released == [forgotten.pk]
    forgotten.refresh_from_db()
    bursty.refresh_from_db()
    assert (forgotten.state, bursty.state) == (Job.State.CANCELLED, Job.State.RUNNING)


def test_the_beat_task_samples_each_held_card_once(world, settings):
    job = world.running("trainer", devices=2)
    cluster_tasks.simulated_dcgm_sample.delay()
    assert sorted(GpuUtilSample.objects.values_list("device_id", flat=True)) == sorted(
        job.allocations.values_list("device_id", flat=True)
    )
    [entry] = [e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "clusters.simulated_dcgm_sample"]
    assert entry["options"]["expires"] > 0
