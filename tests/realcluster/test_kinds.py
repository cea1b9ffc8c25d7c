"""The workload kinds whose controllers the testbed runs, through real Kueue: distributed training as a JobSet (its
launcher and workers admitted together), a development session (a plain Pod, gated by Kueue's pod integration
until admitted) and an inference service (a Deployment whose replicas Kueue admits pod by pod). PyTorchJob, RayJob
and LeaderWorkerSet need controllers the testbed does not build."""

from __future__ import annotations

import pytest

from pools.models import Allocation
from pools.workload_kinds import WorkloadKind
from queues.services import job_cancel

pytestmark = pytest.mark.django_db


@pytest.fixture
def kinds(world):
    """The class allows sessions and inference services too."""
    world.rc.allowed_kinds = [WorkloadKind.BATCH, WorkloadKind.JOBSET, WorkloadKind.SESSION, WorkloadKind.INFERENCE]
    world.rc.save()
    report = world.push()
    assert report.errors == []
    assert not report.kueue_config.needs_attention, report.kueue_config.problem
    return world


def test_a_jobset_runs_its_launcher_and_workers_to_the_end(kinds, kubectl):
    world = kinds
    job = world.submit("ddp", pods=2, gpus=4, kind=WorkloadKind.JOBSET, command=["sleep", "3"])
    jobset = kubectl.get("JobSet", job.k8s_name, job.k8s_namespace)
    assert [rj["name"] for rj in jobset["spec"]["replicatedJobs"]] == ["launcher", "workers"]
    job = world.until_state(job, "running", "succeeded", timeout=90)
    workload = world.workload(job)
    assert [ps["name"] for ps in workload["status"]["admission"]["podSetAssignments"]] == ["launcher", "workers"]
    assert Allocation.objects.filter(job=job).count() == 8
    job = world.until_state(job, "succeeded", timeout=90)
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_a_development_session_is_gated_admitted_and_runs_until_stopped(kinds, kubectl):
    world = kinds
    job = world.submit("notebook", gpus=1, kind=WorkloadKind.SESSION)
    pod = kubectl.get("Pod", job.k8s_name, job.k8s_namespace)
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "main"
    job = world.until_state(job, "running")
    pod = kubectl.get("Pod", job.k8s_name, job.k8s_namespace)
    assert not pod["spec"].get("schedulingGates")  # Kueue's gate is lifted at admission
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 1
    with world.capture(execute=True):
        job_cancel(job=job, user=world.user)
    job = world.until_state(job, "cancelled")
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_an_inference_service_runs_its_replicas(kinds, kubectl):
    world = kinds
    job = world.submit("serve", pods=2, gpus=2, kind=WorkloadKind.INFERENCE)
    deployment = kubectl.get("Deployment", job.k8s_name, job.k8s_namespace)
    assert deployment["spec"]["replicas"] == 2
    job = world.until_state(job, "running", timeout=90)
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 4
    with world.capture(execute=True):
        job_cancel(job=job, user=world.user)
    job = world.until_state(job, "cancelled", timeout=90)
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
