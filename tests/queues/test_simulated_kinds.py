"""The simulated cluster and workload kinds: every pod set placed and metered, sessions and services run until
stopped, a distributed job submitted to fail fails as a whole."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from clusters.backends.simulated_run import simulated_job_logs
from pools.models import Allocation
from queues import services
from queues.models import Job, JobEvent
from queues.pod_sets import pod_names
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
    """One cluster, two 8-GPU nodes of flavor h100, one team with nominal 16 GPUs; a class allowing every kind."""
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100", node_labels={"gpu": "h100"})
    for i in range(2):
        DeviceFactory.create_batch(8, node=NodeFactory(cluster=cluster, flavor=flavor, name=f"n{i}"))
    rc = ResourceClassFactory(flavors=[flavor], allowed_counts=[1, 2, 4, 8])
    rc.allowed_kinds = ["batch", "jobset", "pytorchjob", "rayjob", "session", "inference", "inference-lws"]
    rc.save(update_fields=["allowed_kinds"])
    member = MembershipFactory(team__slug="vision", team__namespace="vision")
    quota = TeamQuotaFactory(team=member.team, cluster=cluster)
    QuotaLineFactory(team_quota=quota, flavor=flavor, nominal="16")
    return cluster, member, rc


def submit(member, rc, name, *, kind, devices=2, pods=2, at, runtime=600, **extra) -> Job:
    """Submit through the service, without the after-commit tick (tests drive the clock)."""
    spec = JobSpec(
        name=name,
        kind=kind,
        image="registry.example.org/t:1",
        resource_class=rc,
        devices_per_pod=devices,
        pod_count=pods,
        sim_runtime_seconds=runtime,
        **extra,
    )
    return services.job_submit(owner=member.user, team=member.team, spec=spec, now=at)


def test_pytorchjob_master_and_workers_hold_devices_with_pod_indexes_in_pod_set_order(sim):
    cluster, member, rc = sim
    t0 = timezone.now() - timedelta(hours=1)
    job = submit(member, rc, "ddp", kind="pytorchjob", at=t0)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=5))
    job.refresh_from_db()
    assert job.state == Job.State.ADMITTED
    assert [ps["name"] for ps in job.assignment["podSets"]] == ["master", "worker"]
    held = Allocation.objects.filter(job=job, ended_at__isnull=True)
    assert held.count() == job.total_devices == 6
    assert sorted({a.pod_index for a in held}) == [0, 1, 2]  # master = pod 0, the workers pods 1 and 2
    assert pod_names(job) == [f"{job.k8s_name}-master-0", f"{job.k8s_name}-worker-0", f"{job.k8s_name}-worker-1"]


def test_rayjob_head_without_devices_runs_beside_its_gpu_workers(sim):
    cluster, member, rc = sim
    t0 = timezone.now() - timedelta(hours=1)
    job = submit(member, rc, "tune", kind="rayjob", at=t0)
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=5))
    simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=10))
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    held = Allocation.objects.filter(job=job, ended_at__isnull=True)
    assert held.count() == 4
    assert sorted({a.pod_index for a in held}) == [1, 2]  # the head (pod 0) holds no device
    assert job.events.get(kind=JobEvent.Kind.STARTED).message == "All 3 pods of its 2 pod sets running."
    logs = simulated_job_logs(job, tail_lines=50, now=t0 + timedelta(seconds=20))
    assert [log.pod for log in logs] == pod_names(job)


@pytest.mark.parametrize("kind", ["session", "inference"])
def test_sessions_and_services_run_until_stopped_then_stop_through_cancel(sim, kind):
    cluster, member, rc = sim
    t0 = timezone.now() - timedelta(days=2)
    job = submit(member, rc, "svc", kind=kind, devices=1, pods=1, at=t0, runtime=60)
    for minutes in (1, 2, 60 * 24):  # far past its simulated runtime
        simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(minutes=minutes))
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    services.job_cancel(job=job, user=member.user, now=t0 + timedelta(days=1, minutes=1), notify_backend=False)
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert job.events.get(kind=JobEvent.Kind.CANCELLED).message == f"Stopped by {member.user.get_username()}."
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_distributed_job_submitted_to_fail_fails_as_a_whole_once(sim):
    cluster, member, rc = sim
    t0 = timezone.now() - timedelta(hours=1)
    job = submit(member, rc, "ddp", kind="jobset", at=t0, runtime=60, sim_fails=True)
    for seconds in (5, 10, 120, 240):
        simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=seconds))
    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    [failed] = job.events.filter(kind=JobEvent.Kind.FAILED)
    assert failed.message == (
        "Pod 0 of pod set workers exited with code 1 (simulated failure) beyond its backoff limit: the "
        "Distributed training (JobSet) failed as a whole and the pods of all 2 pod sets (launcher, workers) "
        "were stopped."
    )
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_batch_job_cancel_keeps_its_wording(sim):
    _cluster, member, rc = sim
    job = submit(member, rc, "plain", kind="batch", at=timezone.now())
    services.job_cancel(job=job, user=member.user, notify_backend=False)
    assert job.events.get(kind=JobEvent.Kind.CANCELLED).message.startswith("Cancelled by ")
