"""Batch Jobs through real Kueue: admitted, run on KWOK nodes, finished, preempted, cancelled, followed by the
portal's sync, with the wait reasons Kueue's own messages give."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse

from pools.models import Allocation
from queues.models import JobEvent, PriorityClass
from queues.services import job_cancel

pytestmark = pytest.mark.django_db

LONG = ["sleep", "3600"]


def _kinds(job) -> list[str]:
    kinds = list(JobEvent.objects.filter(job=job).order_by("at", "id").values_list("kind", flat=True))
    return [k for i, k in enumerate(kinds) if k != "wait_reason" or kinds[i - 1] != "wait_reason"]


def _page(client, user, job) -> str:
    client.force_login(user)
    return html.unescape(client.get(reverse("queues:job_detail", args=[job.pk])).content.decode())


def test_a_batch_job_is_admitted_runs_and_succeeds(world, kubectl):
    job = world.submit("train", pods=2, gpus=4, command=["sleep", "3"])
    assert job.k8s_name
    assert job.k8s_uid
    live = kubectl.get("Job", job.k8s_name, job.k8s_namespace)
    assert live["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "main"

    job = world.until_state(job, "running", "succeeded")
    workload = world.workload(job)
    assert job.workload_name == workload["metadata"]["name"]
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == world.quota.cluster_queue_name
    assert admission["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] == world.flavor.name
    nodes = set(Allocation.objects.filter(job=job).values_list("device__node__name", flat=True))
    pods = kubectl.list("Pod", job.k8s_namespace, label_selector=f"batch.kubernetes.io/job-name={job.k8s_name}")
    assert nodes == {p["spec"]["nodeName"] for p in pods}
    assert Allocation.objects.filter(job=job).count() == 8

    job = world.until_state(job, "succeeded", timeout=90)
    assert job.admitted_at <= job.started_at < job.finished_at
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    assert _kinds(job)[0] == "submitted"
    assert [k for k in _kinds(job) if k in ("admitted", "started", "succeeded")] == ["admitted", "started", "succeeded"]


def test_preemption_by_a_higher_priority_job(world, kubectl, client):
    urgent = PriorityClass.objects.create(name=f"{world.prefix}-urgent", value=1000)
    world.quota.within_cluster_queue = "LowerPriority"
    world.quota.save()
    world.push()
    victims = [world.submit(f"low{i}", gpus=8, command=LONG) for i in range(2)]
    for victim in victims:
        world.until_state(victim, "running")
    boss = world.submit("boss", gpus=8, command=LONG, priority_class=urgent)
    boss = world.until_state(boss, "running", timeout=90)
    evicted = [v for v in (world.job(v) for v in victims) if v.preemption_count]
    assert len(evicted) == 1
    victim = evicted[0]
    assert victim.state == "pending"
    preempted = victim.events.get(kind="preempted")
    assert boss.name in preempted.message
    assert preempted.details["reason"] == "InClusterQueue"
    assert not Allocation.objects.filter(job=victim, ended_at__isnull=True).exists()
    assert kubectl.get("Job", victim.k8s_name, victim.k8s_namespace)["spec"]["suspend"] is True
    victim = world.until("the victim to wait again", lambda: (j := world.job(victim)).wait_reason and j)
    assert "boss" in _page(client, world.user, victim)


def test_cancel_deletes_the_job_and_its_workload(world, kubectl):
    job = world.submit("doomed", gpus=8, command=LONG)
    job = world.until_state(job, "running")
    with world.capture(execute=True):
        job_cancel(job=job, user=world.user)
    world.until("Job gone", lambda: kubectl.find("Job", job.k8s_name, job.k8s_namespace) is None)
    job = world.until_state(job, "cancelled")
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
