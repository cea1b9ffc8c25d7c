"""Guarantees in a Kubernetes cluster, over HTTP against the API emulator (objects validated against Kueue's CRDs):
effective quotas pushed to Kueue per shortfall policy and restored; protected jobs' Kueue priority raised and
lowered."""

from __future__ import annotations

from datetime import timedelta

import pytest

from clusters.kube_sync.config import kube_config_push
from clusters.kube_sync.labels import PRIORITY_LABEL
from clusters.kube_sync.protection import kube_protection_sync
from clusters.models import KubeJobState
from clusters.push import policy_push_run
from pools.health.services import Actor, device_health_set
from pools.models import Device, HealthState
from queues.diagnosis import job_diagnosis
from queues.guarantees.services import effective_quota_refresh
from queues.models import Cohort, Job, JobEvent, QuotaLine, TeamQuota
from tests.factories import TeamFactory
from tests.kube.cluster import at

pytestmark = pytest.mark.django_db
NS = "team-vision"
GPU = "nvidia.com/gpu"
OPS = Actor(label="ops")


def gpu_quota(emulator, queue: str) -> str:
    """The nominal GPU quota of a ClusterQueue as Kueue holds it."""
    spec = emulator.get_obj("ClusterQueue", queue)["spec"]
    resources = spec["resourceGroups"][0]["flavors"][0]["resources"]
    return next(r["nominalQuota"] for r in resources if r["name"] == GPU)


@pytest.fixture
def org(world, portal, cluster):
    """Cohort org: vision 10 and nlp 6 guaranteed H100 GPUs on the 16 of gpu-a1 and gpu-a2."""
    cohort = Cohort.objects.create(name="org")
    portal.quota.cohort = cohort
    portal.quota.save()
    QuotaLine.objects.filter(team_quota=portal.quota, resource_name=GPU).update(nominal="10")
    nlp = TeamFactory(slug="nlp", namespace="team-nlp")
    quota = TeamQuota.objects.create(team=nlp, cluster=cluster, cluster_queue_name="nlp", cohort=cohort)
    QuotaLine.objects.create(team_quota=quota, flavor=portal.flavor, resource_name=GPU, nominal="6")
    return cohort


def _fail(n: int, when) -> list[Device]:
    devices = list(Device.objects.filter(node__name="gpu-a1", resource_name=GPU).order_by("index")[:n])
    for d in devices:
        device_health_set(d, to=HealthState.UNHEALTHY, reason="XID 79", now=when, actor=OPS)
        device_health_set(d, to=HealthState.QUARANTINED, reason="in repair", now=when, actor=OPS)
    return devices


def _back(devices: list[Device], when) -> None:
    for d in devices:
        d.refresh_from_db()
        device_health_set(d, to=HealthState.VALIDATING, reason="burn-in", now=when, actor=OPS)
        device_health_set(d, to=HealthState.HEALTHY, reason="validation passed", now=when, actor=OPS)


@pytest.mark.parametrize(
    ("policy", "spare", "vision", "nlp"),
    [
        (Cohort.ShortfallPolicy.PROPORTIONAL, False, "9", "5"),
        (Cohort.ShortfallPolicy.SPARE_FIRST, True, "10", "4"),
        (Cohort.ShortfallPolicy.WARN, False, "10", "6"),
    ],
)
def test_effective_quotas_reach_kueue_through_the_push_and_are_restored(
    org, cluster, api, emulator, policy, spare, vision, nlp
):
    org.shortfall_policy = policy
    org.spare_team = TeamQuota.objects.get(cluster_queue_name="nlp").team if spare else None
    org.save()
    assert kube_config_push(cluster=cluster, api=api).errors == []
    assert (gpu_quota(emulator, "vision"), gpu_quota(emulator, "nlp")) == ("10", "6")

    devices = _fail(2, at(10))
    report = effective_quota_refresh(cluster=cluster, now=at(11))
    assert len(report.opened) == 1
    if policy == Cohort.ShortfallPolicy.WARN:
        assert report.push_id is None  # warn only: Kueue's quotas stay
    else:
        push = policy_push_run(push_id=report.push_id, now=at(11))
        assert push.state == "succeeded", push.error
    assert (gpu_quota(emulator, "vision"), gpu_quota(emulator, "nlp")) == (vision, nlp)
    assert emulator.rejected == []

    _back(devices, at(60))
    restored = effective_quota_refresh(cluster=cluster, now=at(61))
    assert len(restored.closed) == 1
    if restored.push_id is not None:
        assert policy_push_run(push_id=restored.push_id, now=at(61)).state == "succeeded"
    assert (gpu_quota(emulator, "vision"), gpu_quota(emulator, "nlp")) == ("10", "6")


def test_lending_limit_above_the_reduced_quota_comes_down_with_it(org, portal, cluster, api, emulator):
    org.shortfall_policy = Cohort.ShortfallPolicy.PROPORTIONAL
    org.save()
    QuotaLine.objects.filter(team_quota=portal.quota, resource_name=GPU).update(lending_limit="10")
    _fail(8, at(10))  # 8 healthy for 16 guaranteed: vision 10 → 5, nlp 6 → 3
    assert kube_config_push(cluster=cluster, api=api).errors == []
    resources = emulator.get_obj("ClusterQueue", "vision")["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    gpu = next(r for r in resources if r["name"] == GPU)
    assert (gpu["nominalQuota"], gpu["lendingLimit"]) == ("5", "5")  # Kueue refuses a lendingLimit above nominal


def _running(world, kube, *, minute: float) -> Job:
    job = world.submit(minute=minute)
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8,
               when=at(minute + 1))  # fmt: skip
    kube.run_pods(job.k8s_name, NS, ["gpu-a1"], when=at(minute + 2))
    world.sync()
    job = world.job(job)
    assert job.state == Job.State.RUNNING
    return job


def test_protected_job_has_its_kueue_priority_raised_then_lowered(world, kube, emulator, portal, cluster, api):
    portal.rc.protect_min_runtime_seconds = 1800
    portal.rc.save()
    assert kube_config_push(cluster=cluster, api=api).errors == []
    protected = emulator.get_obj("WorkloadPriorityClass", "gpupool-protected")
    assert protected["value"] == 101  # one above every portal priority (normal: 100)
    job = _running(world, kube, minute=0)  # admitted at minute 1

    report = kube_protection_sync(cluster=cluster, api=api, now=at(10))
    assert report.raised == [job.pk]
    assert kube.job(job.k8s_name, NS)["metadata"]["labels"][PRIORITY_LABEL] == "gpupool-protected"
    state = KubeJobState.objects.get(job=job)
    assert state.protected_until == at(1) + timedelta(seconds=1800)
    assert kube_protection_sync(cluster=cluster, api=api, now=at(20)).raised == []  # idempotent

    lowered = kube_protection_sync(cluster=cluster, api=api, now=at(31))
    assert lowered.lowered == [job.pk]
    assert kube.job(job.k8s_name, NS)["metadata"]["labels"][PRIORITY_LABEL] == "normal"
    notes = list(job.events.filter(kind=JobEvent.Kind.NOTE).values_list("message", flat=True))
    assert any("its Kueue priority is raised to gpupool-protected" in n for n in notes)
    assert any("Protection from preemption ended" in n for n in notes)
    assert emulator.rejected == []


def test_no_protected_priority_class_while_no_class_offers_protection(world, emulator, cluster, api):
    assert kube_config_push(cluster=cluster, api=api).errors == []
    assert emulator.get_obj("WorkloadPriorityClass", "gpupool-protected") is None


QUOTA = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 2 more needed"


def test_a_wait_in_kueue_due_to_quota_reduced_by_repairs_says_so(org, world, kube, emulator, cluster, api):
    org.shortfall_policy = Cohort.ShortfallPolicy.PROPORTIONAL
    org.save()
    _fail(2, at(1))  # vision's quota in force: 9 of its 10
    assert kube_config_push(cluster=cluster, api=api).errors == []
    cq = emulator.get_obj("ClusterQueue", "vision")  # vision holds 8 of its 9
    cq["status"] = {
        "flavorsReservation": [{"name": "h100", "resources": [{"name": GPU, "total": "8", "borrowed": "0"}]}]
    }
    emulator.put(cq)
    job = world.submit(gpus=2, minute=2)
    kube.create_workload(job.k8s_name, NS)
    kube.pending(job.k8s_name, NS, QUOTA, when=at(3))
    world.sync()
    job = world.job(job)
    assert (job.state, job.wait_reason) == ("pending", "quota_exhausted"), job.wait_message
    # Kueue's stored reason does not know about the repairs; the diagnosis (job page, API, CLI) says so
    diagnosis = job_diagnosis(job, now=at(4))
    assert "guaranteed quota of 10 GPUs of H100 is reduced to 9 while 2 GPUs of H100 are out for repair" in (
        diagnosis.message
    )
    assert diagnosis.details["quotaReducedByRepair"]["applied"] == 9
