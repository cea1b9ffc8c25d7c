"""Protected work on the simulated cluster: what a job may ask within its class, the protection it runs under, the
engine keeping a protected job running (and saying so in the preemptor's wait and on the job page), and the
preemption timeline on the job page (checkpoint asked → written → evicted → requeued → resumed)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from pools.models import ResourceClass
from pools.services import ClassSpec, resource_class_check
from queues import services
from queues.job_spec import job_spec_errors
from queues.models import Job, JobEvent
from queues.protection import engine_protection, job_protection
from queues.services import JobSpec
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def sim():
    """One 8-GPU node of h100; vision's queue (8) preempts lower priority within itself; a class that protects 30 min
    of runtime (a job may ask up to 1 h), 10 min before the end (up to 20), and offers checkpoint alignment (2 min)."""
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100", node_labels={"gpu": "h100"})
    DeviceFactory.create_batch(8, node=NodeFactory(cluster=cluster, flavor=flavor, name="n0"))
    rc = ResourceClassFactory(
        name="H100",
        flavors=[flavor],
        allowed_counts=[1, 2, 4, 8],
        protect_min_runtime_seconds=1800,
        protect_min_runtime_max_seconds=3600,
        protect_finishing_seconds=600,
        protect_finishing_max_seconds=1200,
        protect_checkpoint_grace_seconds=120,
    )
    member = MembershipFactory(team__slug="vision", team__namespace="vision")
    quota = TeamQuotaFactory(team=member.team, cluster=cluster, within_cluster_queue="LowerPriority")
    QuotaLineFactory(team_quota=quota, flavor=flavor, nominal="8")
    low = PriorityClassFactory(name="low", value=10)
    high = PriorityClassFactory(name="high", value=1000)
    return type("Sim", (), {"cluster": cluster, "rc": rc, "member": member, "low": low, "high": high})


def spec(sim, name: str, **extra) -> JobSpec:
    return JobSpec(name=name, image="registry.example.org/t:1", resource_class=sim.rc, devices_per_pod=8, **extra)


def errors(sim, **extra) -> dict[str, str]:
    """The submission's errors, each field's messages joined."""
    found = job_spec_errors(spec(sim, "x", **extra), team=sim.member.team, cluster=sim.cluster)
    return {field: " ".join(messages) for field, messages in found.items()}


def submit(sim, name: str, *, at, **extra) -> Job:
    return services.job_submit(owner=sim.member.user, team=sim.member.team, spec=spec(sim, name, **extra), now=at)


def state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


# ------------------------------------------------------------------------------------- what a job may ask


def test_a_job_asks_for_protection_within_what_its_class_allows(sim):
    assert errors(sim, protect_min_runtime_seconds=3600) == {}
    assert "at most 1 hour" in errors(sim, protect_min_runtime_seconds=7200)["protect_min_runtime_seconds"]
    too_long = errors(sim, protect_finishing_seconds=1800, max_runtime_seconds=7200)
    assert "finishing-soon window of at most 20 minutes" in too_long["protect_finishing_seconds"]
    no_end = errors(sim, protect_finishing_seconds=600)
    assert "needs a maximum runtime" in no_end["protect_finishing_seconds"]
    no_interval = errors(sim, preempt_after_checkpoint=True)
    assert "give a checkpoint interval and path" in no_interval["preempt_after_checkpoint"]
    assert "whole number of seconds" in errors(sim, protect_min_runtime_seconds=-5)["protect_min_runtime_seconds"]


def test_a_class_without_checkpoint_alignment_refuses_it(sim):
    sim.rc.protect_checkpoint_grace_seconds = None
    sim.rc.save()
    asked = errors(sim, preempt_after_checkpoint=True, checkpoint_interval_seconds=1800, checkpoint_path="/ckpt")
    assert asked["preempt_after_checkpoint"] == "H100 does not offer preemption only after a checkpoint"


def test_a_class_checks_its_protection_bounds():
    check = resource_class_check(
        ClassSpec(
            name="x",
            slug="x",
            resource_name="nvidia.com/gpu",
            sharing=ResourceClass.Sharing.DEDICATED,
            flavors=[],
            allowed_counts=[1],
            protect_min_runtime_seconds=1800,
            protect_min_runtime_max_seconds=600,
            protect_checkpoint_grace_seconds=10,
            protect_checkpoint_default=False,
        )
    )
    assert "at least the class's own 1800 s" in " ".join(check.errors["protect_min_runtime_max_seconds"])
    assert "between 60 s and 7 days" in " ".join(check.errors["protect_checkpoint_grace_seconds"])


def test_the_protection_a_job_runs_under(sim):
    t0 = timezone.now()
    plain = submit(sim, "plain", at=t0)
    # the class's defaults; no finishing window without a maximum runtime, no alignment without an interval
    assert job_protection(plain) == job_protection(plain).__class__(min_runtime=1800, finishing=0)
    own = submit(
        sim,
        "own",
        at=t0,
        protect_min_runtime_seconds=3600,
        max_runtime_seconds=7200,
        checkpoint_path="/ckpt",
        checkpoint_signal="SIGUSR1",
        checkpoint_interval_seconds=900,
        preempt_after_checkpoint=True,
    )
    p = engine_protection(own)
    assert (p.min_runtime, p.max_runtime, p.finishing_window) == (3600.0, 7200.0, 600.0)
    assert (p.checkpoint_interval, p.checkpoint_grace, p.by_priority) == (900.0, 120.0, False)
    none = submit(sim, "none", at=t0, protect_min_runtime_seconds=0)
    assert engine_protection(none) is None


# ------------------------------------------------------------------------- the engine on the simulated cluster


def test_a_job_in_its_minimum_runtime_is_not_preempted_and_the_preemptor_is_told_until_when(sim, client):
    t0 = timezone.now() - timedelta(minutes=10)  # the job page reads the protection as of now
    victim = submit(sim, "victim", at=t0, priority_class=sim.low, sim_runtime_seconds=7200)
    simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t0)
    simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t0 + timedelta(seconds=1))
    assert state(victim) == Job.State.RUNNING
    # 10 minutes in: 20 of its 30 protected minutes are left
    t1 = t0 + timedelta(minutes=10)
    boss = submit(sim, "boss", at=t1, priority_class=sim.high)
    simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t1)
    assert state(victim) == Job.State.RUNNING
    assert state(boss) == Job.State.PENDING
    assert f"not preempting vision/victim-{victim.pk}: protected for 20 more minutes" in boss.wait_message, (
        boss.wait_message
    )
    assert "it has not yet run its minimum runtime" in boss.wait_message
    client.force_login(sim.member.user)
    page = client.get(f"/jobs/{victim.pk}/").content.decode()
    assert "Protected from preemption" in page
    assert "not preempted before it has run 30 minutes" in page
    # at 30 minutes the protection ends: the boss preempts it
    simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t0 + timedelta(minutes=30, seconds=1))
    assert state(victim) in (Job.State.PREEMPTING, Job.State.PENDING)
    assert victim.events.filter(kind=JobEvent.Kind.PREEMPTED).count() == 1


def test_a_job_that_is_finishing_is_not_preempted(sim):
    t0 = timezone.now() - timedelta(hours=2)
    victim = submit(sim, "victim", at=t0, priority_class=sim.low, sim_runtime_seconds=7200, max_runtime_seconds=3600)
    simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t0)
    simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t0 + timedelta(seconds=1))
    # 55 minutes into its hour: in the last 10 minutes, protected until its maximum runtime
    t1 = t0 + timedelta(minutes=55)
    boss = submit(sim, "boss", at=t1, priority_class=sim.high)
    simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t1)
    assert state(victim) == Job.State.RUNNING
    state(boss)
    assert "it is finishing" in boss.wait_message


def test_the_preemption_timeline_shows_each_step_with_a_checkpoint(sim, settings, client):
    settings.SIMULATED_CHECKPOINT_SECONDS = 30
    sim.rc.protect_min_runtime_seconds = None
    sim.rc.save()
    t0 = timezone.now() - timedelta(hours=2)
    victim = submit(sim, "victim", at=t0, priority_class=sim.low, sim_runtime_seconds=7200,
                    checkpoint_path="/ckpt", checkpoint_signal="SIGUSR1")  # fmt: skip
    simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t0)
    simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t0 + timedelta(seconds=1))
    t1 = t0 + timedelta(minutes=30)
    boss = submit(sim, "boss", at=t1, priority_class=sim.high, sim_runtime_seconds=600)
    for seconds in (0, 5, 40, 41):  # asked, then written after 30 s, evicted and requeued; the boss starts
        simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t1 + timedelta(seconds=seconds))
    assert state(boss) in (Job.State.ADMITTED, Job.State.RUNNING)
    for minutes in (12, 12.1, 12.2):  # the boss ends after 10 min; the victim runs again from its checkpoint
        simulated_cluster_tick_run(cluster_id=sim.cluster.pk, now=t1 + timedelta(minutes=minutes))
    assert state(victim) in (Job.State.ADMITTED, Job.State.RUNNING)
    client.force_login(sim.member.user)
    page = client.get(f"/jobs/{victim.pk}/").content.decode()
    for step in ("asked", "written", "evicted", "requeued", "resumed"):
        assert f'data-step="{step}" data-state="done"' in page, step
    assert "Resumed from it" in page
