"""A reservation's window on the simulated cluster: pushed ahead of its start through the audited push path, the
borrowers reclaimed with their checkpoints, the reserving team's queued job started, the quota back at the end."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from clusters.push import policy_push_run
from queues.engine_input import cluster_engine_input
from queues.models import Job, JobEvent, PolicyPush, Reservation
from queues.reservations.services import reservation_cancel, reservation_edges_apply
from queues.services import JobSpec, job_submit
from tests.browser.scenarios import occupy
from tests.reservations.world import approved, reservation_world

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"


def _nominal(cluster, queue: str, *, now) -> int:
    """The nominal H100 quota of a queue as the engine applies it at ``now``."""
    from queues.engine.scheduler import Engine

    engine = Engine(cluster_engine_input(cluster=cluster, now=now).state, now.timestamp())
    return engine.cqs[queue].spec.resource_groups[0].flavors[0].resources[0].nominal


@pytest.fixture
def world():
    """No cohort quota: speech's 8 reserved come from vision's 12 (→ 4, guaranteed 12 → 4)."""
    world = reservation_world(cohort_quota=None)
    pool = world.pool
    base = timezone.now()
    world.base = base
    # vision runs three 4-GPU jobs (all of its 12) that checkpoint; speech runs 4 of its own
    world.borrowers = [
        occupy(
            pool, node=pool.nodes[i], count=4, name=f"train-{i}", started=base - timedelta(minutes=30), runtime=86400
        )
        for i in range(3)
    ]
    Job.objects.filter(pk__in=[j.pk for j in world.borrowers]).update(
        checkpoint_path="/ckpt", checkpoint_signal="SIGUSR1"
    )
    occupy(pool, node=pool.nodes[3], count=4, team=world.speech, name="base", runtime=86400)
    world.reservation = approved(world, count=8, start=base + timedelta(hours=2), end=base + timedelta(hours=4))
    world.eval = job_submit(
        owner=world.pool.other_user,
        team=world.speech,
        spec=JobSpec(
            name="eval",
            image="registry.local/eval:1",
            resource_class=pool.rc,
            devices_per_pod=4,
            pod_count=2,
            sim_runtime_seconds=3600,
        ),
        now=base,
        notify_backend=False,
    )
    return world


def _job(job) -> Job:
    return Job.objects.get(pk=job.pk)


def test_the_window_opens_ahead_reclaims_with_checkpoints_starts_the_queued_job_and_returns_quota(world):
    cluster = world.pool.cluster
    start, end = world.reservation.starts_at, world.reservation.ends_at
    lead = timedelta(seconds=settings.RESERVATION_LEAD_SECONDS)

    # before the window: the engine applies no hold and speech's job waits for quota
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=world.base + timedelta(minutes=1))
    assert _job(world.eval).state == Job.State.PENDING
    assert _nominal(cluster, "speech", now=start - lead - timedelta(seconds=1)) == 4
    assert reservation_edges_apply(now=start - lead - timedelta(seconds=1)) == []
    assert not PolicyPush.objects.exists()

    # the edge is applied ahead of the start: recorded, what moved kept, and pushed through the audited path
    opened = start - lead
    changes = reservation_edges_apply(now=opened)
    assert [(c.reservation_id, c.edge) for c in changes] == [(world.reservation.pk, "opens")]
    row = Reservation.objects.get(pk=world.reservation.pk)
    assert row.opened_at == opened
    assert {(s["name"], s["delta"]) for s in row.shifts} == {("vision", -8), ("speech", 8)}
    push = PolicyPush.objects.get()
    assert push.reason.startswith(f"reservation #{row.pk} (Speech, 8 H100 GPUs, ")
    assert push.reason.endswith(" opens")
    assert reservation_edges_apply(now=opened + timedelta(seconds=30)) == []  # idempotent
    assert _nominal(cluster, "speech", now=opened) == 12
    assert _nominal(cluster, "vision", now=opened) == 4

    # the push runs a tick of the simulated cluster: two of vision's borrowers are asked to checkpoint
    done = policy_push_run(push_id=push.pk, now=opened)
    assert done.state == PolicyPush.State.SUCCEEDED
    victims = [j for j in map(_job, world.borrowers) if j.state == Job.State.PREEMPTING]
    assert len(victims) == 2
    preempted = [j.events.get(kind=JobEvent.Kind.PREEMPTED) for j in victims]
    assert {e.details["reason"] for e in preempted} == {"InCohortReclamation"}
    assert {e.details["preemptor"] for e in preempted} == {world.eval.pk}
    waiting = _job(world.eval)
    assert waiting.state == Job.State.PENDING
    assert waiting.wait_reason == "preemption_in_progress"

    # after their checkpoints they are evicted (the work banked) and speech's job is admitted, before the start
    after = opened + timedelta(seconds=settings.SIMULATED_CHECKPOINT_SECONDS + 1)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=after)
    for victim in map(_job, victims):
        assert victim.state == Job.State.PENDING
        assert victim.run_seconds_banked >= 1800
        kinds = list(victim.events.values_list("kind", flat=True))
        steps = [k for k in kinds if k != JobEvent.Kind.WAIT_REASON][-4:]
        assert steps == [
            JobEvent.Kind.PREEMPTED,
            JobEvent.Kind.CHECKPOINT_REQUESTED,
            JobEvent.Kind.CHECKPOINT_DONE,
            JobEvent.Kind.REQUEUED,
        ]
        assert "lostDeviceHours" not in victim.events.get(kind=JobEvent.Kind.REQUEUED).details  # nothing lost
    making_room = _job(world.eval).events.filter(kind=JobEvent.Kind.PREEMPTING)
    assert making_room.count() == 2
    assert "after a checkpoint" in making_room.first().message
    admitted = _job(world.eval)
    assert admitted.state == Job.State.ADMITTED
    assert admitted.admitted_at < start
    assert admitted.assignment["clusterQueue"] == "speech"
    # the evicted borrowers now wait and say why
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=after + timedelta(seconds=5))
    assert _job(world.eval).state == Job.State.RUNNING

    # the end: the window closes, quota returns and the waiting borrowers start again
    # eval ended: speech's own 4 (lendable as before) go to one borrower; the reserved 8 (4 of them idle) stay speech's,
    # so the other borrower waits, naming the reservation
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=start + timedelta(hours=1, minutes=1))
    assert _job(world.eval).state == Job.State.SUCCEEDED
    states = sorted(_job(v).state for v in victims)
    assert states == [Job.State.ADMITTED, Job.State.PENDING]
    still = next(v for v in map(_job, victims) if v.state == Job.State.PENDING)
    assert still.wait_reason == "capacity_reserved"
    assert f"8 H100 GPUs are reserved for Speech until {end:%H:%M}" in still.wait_message
    assert f"(reservation #{row.pk})" in still.wait_message
    closes = reservation_edges_apply(now=end)
    assert [(c.reservation_id, c.edge) for c in closes] == [(row.pk, "closes")]
    push = PolicyPush.objects.order_by("-pk").first()
    assert push.reason.endswith(" closes")
    policy_push_run(push_id=push.pk, now=end)
    assert _nominal(cluster, "vision", now=end) == 12
    assert _nominal(cluster, "speech", now=end) == 4
    assert _job(still).state == Job.State.ADMITTED


def test_a_cancelled_window_closes_at_once(world):
    start = world.reservation.starts_at
    lead = timedelta(seconds=settings.RESERVATION_LEAD_SECONDS)
    reservation_edges_apply(now=start - lead)
    row = reservation_cancel(reservation=world.reservation, user=world.frank, now=start + timedelta(minutes=10))
    assert row.closed_at == start + timedelta(minutes=10)
    assert PolicyPush.objects.order_by("-pk").first().reason.endswith(" closes")
    assert _nominal(world.pool.cluster, "speech", now=start + timedelta(minutes=11)) == 4


def test_a_reservation_cancelled_before_its_window_never_holds(world):
    row = reservation_cancel(reservation=world.reservation, user=world.frank, now=world.base)
    start = row.starts_at
    assert _nominal(world.pool.cluster, "speech", now=start) == 4
    assert reservation_edges_apply(now=start) == []
    assert Reservation.objects.get(pk=row.pk).closed_at == start
    assert not PolicyPush.objects.exists()
