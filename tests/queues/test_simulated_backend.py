"""The simulated cluster: jobs move pending → admitted → running → finished by ticks; devices always released."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from pools.models import Allocation, HealthState
from queues import services
from queues.models import Job, JobEvent, QuotaLine
from queues.services import JobSpec
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def sim():
    """One cluster, two 8-GPU nodes of flavor h100, one team with nominal 8 and a member."""
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100", node_labels={"gpu": "h100"})
    nodes = [NodeFactory(cluster=cluster, flavor=flavor, name=f"n{i}") for i in range(2)]
    for node in nodes:
        DeviceFactory.create_batch(8, node=node)
    rc = ResourceClassFactory(flavors=[flavor], allowed_counts=[1, 2, 4, 8])
    member = MembershipFactory(team__slug="vision", team__namespace="vision")
    quota = TeamQuotaFactory(team=member.team, cluster=cluster)
    QuotaLineFactory(team_quota=quota, flavor=flavor, nominal="8")
    return cluster, member, rc, nodes


def submit(member, rc, name, *, devices=4, pods=1, at, runtime=600, **extra) -> Job:
    """Submit through the service, without the after-commit tick (tests drive the clock)."""
    spec = JobSpec(
        name=name,
        image="registry.example.org/t:1",
        resource_class=rc,
        devices_per_pod=devices,
        pod_count=pods,
        sim_runtime_seconds=runtime,
        **extra,
    )
    return services.job_submit(owner=member.user, team=member.team, spec=spec, now=at)


def state(job: Job) -> str:
    """The job's state as stored."""
    job.refresh_from_db()
    return job.state


def test_simulated_tick_admits_within_quota_and_explains_the_rest(sim):
    cluster, member, rc, _ = sim
    t0 = timezone.now() - timedelta(hours=1)
    a = submit(member, rc, "a", at=t0)
    b = submit(member, rc, "b", at=t0 + timedelta(seconds=1))
    c = submit(member, rc, "c", at=t0 + timedelta(seconds=2))
    report = simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=5))
    assert sorted(report.admitted) == sorted([a.pk, b.pk])
    assert state(c) == Job.State.PENDING
    assert c.wait_reason == "quota_exhausted"
    assert "8" in c.wait_message
    assert c.kueue_message.startswith("couldn't assign flavors to pod set main: insufficient unused quota")
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 8


def test_simulated_lifecycle_to_success_frees_devices_for_the_next(sim):
    cluster, member, rc, _ = sim
    t0 = timezone.now() - timedelta(hours=1)
    a = submit(member, rc, "a", devices=8, at=t0, runtime=600)
    b = submit(member, rc, "b", devices=8, at=t0 + timedelta(seconds=1), runtime=600)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=5))
    assert state(a) == Job.State.ADMITTED
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=10))
    assert state(a) == Job.State.RUNNING
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=700))
    assert state(a) == Job.State.SUCCEEDED
    assert a.finished_at == t0 + timedelta(seconds=610)  # the true end, not the tick time
    assert state(b) == Job.State.ADMITTED
    kinds = list(a.events.values_list("kind", flat=True))
    assert kinds == ["submitted", "admitted", "started", "succeeded"]
    assert list(b.events.values_list("kind", flat=True))[:2] == ["submitted", "wait_reason"]
    ends = set(Allocation.objects.filter(job=a).values_list("ended_at", flat=True))
    assert ends == {t0 + timedelta(seconds=610)}


def test_simulated_max_runtime_times_out(sim):
    cluster, member, rc, _ = sim
    t0 = timezone.now() - timedelta(hours=2)
    job = submit(member, rc, "slow", at=t0, runtime=3600, max_runtime_seconds=600)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=1))
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(hours=1))
    assert state(job) == Job.State.TIMED_OUT
    assert job.finished_at == t0 + timedelta(seconds=601)
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_simulated_node_loss_requeues_and_releases(sim):
    cluster, member, rc, nodes = sim
    t0 = timezone.now() - timedelta(hours=1)
    job = submit(member, rc, "a", devices=8, at=t0)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=1))
    [node_name] = {a.device.node.name for a in Allocation.objects.filter(job=job)}
    lost = next(n for n in nodes if n.name == node_name)
    lost.gone_at = t0 + timedelta(minutes=5)
    lost.save()
    lost.devices.update(gone_at=t0 + timedelta(minutes=5))
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(minutes=6))
    job.refresh_from_db()
    assert job.events.filter(kind=JobEvent.Kind.REQUEUED).exists()
    assert not Allocation.objects.filter(job=job, device__node=lost, ended_at__isnull=True).exists()
    # Re-admitted in the same tick on the surviving node.
    assert job.state == Job.State.ADMITTED
    assert {a.device.node.name for a in Allocation.objects.filter(job=job, ended_at__isnull=True)} != {node_name}


def test_simulated_unhealthy_device_is_never_allocated(sim):
    cluster, member, rc, nodes = sim
    for node in nodes:
        node.devices.filter(index__in=[0, 1]).update(health=HealthState.UNHEALTHY)
    t0 = timezone.now()
    job = submit(member, rc, "a", devices=8, at=t0)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0)
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.wait_reason == "health_blocked"
    small = submit(member, rc, "b", devices=4, at=t0)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=1))
    assert state(small) == Job.State.ADMITTED
    held = Allocation.objects.filter(job=small, ended_at__isnull=True)
    assert held.count() == 4
    assert not held.exclude(device__health=HealthState.HEALTHY).exists()


def test_simulated_node_with_a_degraded_device_is_used_last(sim):
    cluster, member, rc, nodes = sim
    nodes[0].devices.filter(index=3).update(health=HealthState.DEGRADED)  # n0 would be the first pick (name order)
    t0 = timezone.now()
    first = submit(member, rc, "a", devices=4, at=t0)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0)
    assert {a.device.node.name for a in Allocation.objects.filter(job=first)} == {"n1"}
    # n1 has 4 left; a job of 8 fits only on n0 and still runs there, healthy devices first
    QuotaLine.objects.filter(team_quota__team=member.team).update(nominal="16")
    second = submit(member, rc, "b", devices=8, at=t0 + timedelta(seconds=1))
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=2))
    assert state(second) == Job.State.ADMITTED
    held = Allocation.objects.filter(job=second).select_related("device__node")
    assert {a.device.node.name for a in held} == {"n0"}
    assert held.filter(device__health=HealthState.DEGRADED).count() == 1


@pytest.mark.parametrize("checkpoint", [False, True])
def test_simulated_preemption_checkpoints_then_evicts_then_admits(sim, settings, checkpoint):
    from tests.factories import PriorityClassFactory

    settings.SIMULATED_CHECKPOINT_SECONDS = 30
    cluster, member, rc, _ = sim
    quota = member.team.quotas.get()
    quota.within_cluster_queue = "LowerPriority"
    quota.save()
    low = PriorityClassFactory(name="low", value=10)
    high = PriorityClassFactory(name="high", value=1000)
    t0 = timezone.now() - timedelta(hours=1)
    ckpt = {"checkpoint_path": "/ckpt", "checkpoint_signal": "SIGUSR1"} if checkpoint else {}
    victim = submit(member, rc, "victim", devices=8, at=t0, runtime=7200, priority_class=low, **ckpt)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=1))
    assert state(victim) == Job.State.RUNNING
    t1 = t0 + timedelta(minutes=30)
    boss = submit(member, rc, "boss", devices=8, at=t1, priority_class=high)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t1)
    assert state(victim) == Job.State.PREEMPTING
    assert state(boss) == Job.State.PENDING
    assert boss.wait_reason == "preemption_in_progress"
    assert boss.kueue_message.endswith("Pending the preemption of 1 workload(s)")
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t1 + timedelta(seconds=5))
    assert state(victim) == (Job.State.PREEMPTING if checkpoint else Job.State.PENDING)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t1 + timedelta(seconds=40))
    assert state(victim) == Job.State.PENDING
    assert state(boss) in (Job.State.ADMITTED, Job.State.RUNNING)
    assert victim.events.filter(kind=JobEvent.Kind.PREEMPTED).count() == 1
    requeued = victim.events.get(kind=JobEvent.Kind.REQUEUED)
    if checkpoint:
        assert victim.events.filter(kind=JobEvent.Kind.CHECKPOINT_DONE).exists()
        assert victim.run_seconds_banked >= 1800
        assert "lostDeviceHours" not in requeued.details
    else:
        assert requeued.details["lostDeviceHours"] == pytest.approx(8 * (30 * 60 + 4) / 3600, abs=0.01)
    assert boss.events.filter(kind=JobEvent.Kind.PREEMPTING).count() == 1
    # No device is ever held twice.
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 8


@pytest.mark.parametrize("checkpoint", [False, True])
def test_simulated_hold_and_drain_evicts_running_jobs_until_restarted(sim, settings, checkpoint):
    settings.SIMULATED_CHECKPOINT_SECONDS = 30
    cluster, member, rc, _ = sim
    quota = member.team.quotas.get()
    t0 = timezone.now() - timedelta(hours=1)
    ckpt = {"checkpoint_path": "/ckpt", "checkpoint_signal": "SIGUSR1"} if checkpoint else {}
    first = submit(member, rc, "first", devices=4, at=t0, runtime=7200, **ckpt)
    second = submit(member, rc, "second", devices=4, at=t0 + timedelta(seconds=1), runtime=7200)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=1))
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=2))
    assert (state(first), state(second)) == (Job.State.RUNNING, Job.State.RUNNING)

    quota.stop_policy = "Hold"
    quota.save()
    t1 = t0 + timedelta(minutes=30)
    report = simulated_cluster_tick_run(cluster_id=cluster.pk, now=t1)
    assert report.evicted == []
    assert (state(first), state(second)) == (Job.State.RUNNING, Job.State.RUNNING)

    quota.stop_policy = "HoldAndDrain"
    quota.save()
    report = simulated_cluster_tick_run(cluster_id=cluster.pk, now=t1 + timedelta(seconds=1))
    assert sorted(report.evicted) == sorted([first.pk, second.pk])
    assert report.preempted == []
    assert (state(first), state(second)) == (Job.State.PREEMPTING, Job.State.PREEMPTING)
    assert first.eviction_reason == "ClusterQueueStopped"
    evicted = first.events.get(kind=JobEvent.Kind.EVICTED)
    assert evicted.details == {"reason": "ClusterQueueStopped", "kueueMessage": "The ClusterQueue is stopped"}
    assert evicted.message.startswith("Evicted: an admin stopped the team's quota (ClusterQueue ")
    assert first.events.filter(kind=JobEvent.Kind.CHECKPOINT_REQUESTED).exists() == checkpoint

    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t1 + timedelta(seconds=5))
    assert state(second) == Job.State.PENDING
    assert state(first) == (Job.State.PREEMPTING if checkpoint else Job.State.PENDING)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t1 + timedelta(seconds=40))
    for job in (first, second):
        assert state(job) == Job.State.PENDING
        assert job.wait_reason == "misconfigured"
        assert job.kueue_message.startswith("ClusterQueue ")
        assert job.kueue_message.endswith(" is stopped")
        assert job.preemption_count == 0
        assert job.eviction_reason == ""
        requeued = job.events.get(kind=JobEvent.Kind.REQUEUED)
        assert requeued.details["reason"] == "queue_stopped"
        assert "waits until an admin restarts the queue" in requeued.message
    assert ("lostDeviceHours" in first.events.get(kind=JobEvent.Kind.REQUEUED).details) != checkpoint
    assert first.queued_at == first.submitted_at  # its place in the queue is kept
    assert not Allocation.objects.filter(ended_at__isnull=True).exists()

    quota.stop_policy = "None"
    quota.save()
    t2 = t1 + timedelta(minutes=5)
    report = simulated_cluster_tick_run(cluster_id=cluster.pk, now=t2)
    assert sorted(report.admitted) == sorted([first.pk, second.pk])
    assert report.evicted == []
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 8
    # A second tick changes nothing about the stop: no new eviction, the jobs start.
    report = simulated_cluster_tick_run(cluster_id=cluster.pk, now=t2 + timedelta(seconds=1))
    assert report.evicted == []
    assert (state(first), state(second)) == (Job.State.RUNNING, Job.State.RUNNING)
