"""Fault injection over HTTP: 500s, timeouts, 409 conflicts, 410 Gone, dropped watches, the portal killed mid-sync.

Each fault hits a sync while jobs move through their lives in the cluster; afterwards every job must show each
transition exactly once, at the cluster's times, hold each device exactly once, and be metered exactly once.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from billing.models import UsageRecord
from billing.services.metering import metering_sync
from clusters.kube_sync.api import JOBS
from clusters.kube_sync.jobs import kube_job_delete
from clusters.kube_sync.sync import ClusterSync
from clusters.models import KubeJobState
from pools.models import Allocation, Cluster
from queues.models import Job, JobEvent
from queues.services import job_cancel
from tests.kube.cluster import at

pytestmark = pytest.mark.django_db
NS = "team-vision"
QUOTA = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"


class PortalKilled(BaseException):
    """The process died (a BaseException, so no ``except Exception`` in the sync can swallow it)."""


class KilledInAFlush(ClusterSync):
    """Dies inside the second flush of a pass, after the events were applied and before the commit."""

    flushes = 0

    def save_bookmark(self, kind: str, rv: str) -> None:
        type(self).flushes += 1
        if type(self).flushes == 2:
            raise PortalKilled
        super().save_bookmark(kind, rv)


class KilledBeforeEvaluating(ClusterSync):
    """Dies after every snapshot and bookmark was committed, before any job was evaluated."""

    def evaluate_dirty(self) -> int:
        raise PortalKilled


def _transitions(job: Job) -> list[tuple[str, object]]:
    kinds = ("admitted", "started", "succeeded", "failed", "cancelled", "preempted", "requeued")
    return list(
        JobEvent.objects.filter(job=job, kind__in=kinds).order_by("at", "id").values_list("kind", "at"),
    )


def _running(world, kube) -> Job:
    job = world.submit("runner")
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a2"], gpus_per_pod=8, when=at(1))
    kube.run_pods(job.k8s_name, NS, ["gpu-a2"], when=at(2))
    world.sync()
    return world.job(job)


def _allocs(job: Job) -> list[tuple]:
    return sorted(Allocation.objects.filter(job=job).values_list("device__node__name", "started_at", "ended_at"))


def test_every_fault_in_one_life_loses_no_transition_and_doubles_nothing(world, kube, emulator, settings):
    settings.KUBE_SYNC_IDLE_SECONDS = 0.5
    a, b, c = (world.submit(name) for name in ("alpha", "beta", "gamma"))
    for job in (a, b, c):
        kube.create_workload(job.k8s_name, NS)
    kube.pending(c.k8s_name, NS, QUOTA, when=at(1))
    for job, node in ((a, "gpu-a1"), (b, "gpu-a2")):
        kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=[node], gpus_per_pod=8, when=at(1))

    # 500s: the first watch of workloads fails twice (retried with backoff); the pods watch drops after one event
    emulator.fail("GET", r"/workloads\?.*watch=true", status=500, times=2)
    emulator.fail("GET", r"/pods\?.*watch=true", drop_after=1)
    world.sync()
    world.sync()  # the next pass resumes the dropped watch from the last version it processed
    assert [world.job(j).state for j in (a, b, c)] == ["admitted", "admitted", "pending"]

    # the portal is killed inside a flush (rolled back), then again after committing but before evaluating
    kube.run_pods(a.k8s_name, NS, ["gpu-a1"], when=at(2))
    kube.run_pods(b.k8s_name, NS, ["gpu-a2"], when=at(2))
    with pytest.raises(PortalKilled):
        world.sync(KilledInAFlush)
    with pytest.raises(PortalKilled):
        world.sync(KilledBeforeEvaluating)
    assert KubeJobState.objects.filter(dirty=True).exists()  # what the dead process stored waits for the next
    world.sync()
    assert [world.job(j).state for j in (a, b)] == ["running", "running"]

    # a timeout: the workloads watch answers after the client gave up (retried)
    kube.complete(a.k8s_name, NS, ["gpu-a1"], started=at(2), when=at(30))
    emulator.fail("GET", r"/workloads\?.*watch=true", delay=1.0, times=1)
    world.sync()
    assert world.job(a).state == "succeeded"

    # 410 Gone: the history the bookmarks point into is compacted away while gamma is admitted
    kube.admit(c.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(31))
    kube.run_pods(c.k8s_name, NS, ["gpu-a1"], when=at(32))
    emulator.compact()
    report = world.sync()
    assert {"jobs", "pods", "workloads"} <= set(report.relisted)
    assert world.job(c).state == "running"

    # the cluster goes away while beta finishes; nothing changes until it is back
    kube.complete(b.k8s_name, NS, ["gpu-a2"], started=at(2), when=at(40))
    emulator.fail("*", ".*", status=503, times=10_000)
    assert world.sync().unreachable
    assert world.job(b).state == "running"
    emulator.faults.clear()

    # and a watch dropped mid-stream while gamma finishes
    kube.complete(c.k8s_name, NS, ["gpu-a1"], started=at(32), when=at(50))
    emulator.fail("GET", r"/(workloads|jobs)\?.*watch=true", drop_after=1, times=2)
    world.sync()
    world.sync()
    world.sync(full=True)

    expected = {
        a: ([("admitted", at(1)), ("started", at(2)), ("succeeded", at(30))], [("gpu-a1", at(1), at(30))] * 8),
        b: ([("admitted", at(1)), ("started", at(2)), ("succeeded", at(40))], [("gpu-a2", at(1), at(40))] * 8),
        c: ([("admitted", at(31)), ("started", at(32)), ("succeeded", at(50))], [("gpu-a1", at(31), at(50))] * 8),
    }
    for job, (transitions, allocs) in expected.items():
        assert _transitions(job) == transitions, job.name
        assert _allocs(job) == allocs, job.name

    metering_sync(now=at(60))
    metering_sync(now=at(61))
    for job, minutes in ((a, 29), (b, 39), (c, 19)):
        rows = UsageRecord.objects.filter(job=job)
        assert not rows.filter(open=True).exists()
        assert sum(rows.values_list("duration_us", flat=True)) == 8 * minutes * 60 * 1_000_000, job.name
    assert emulator.rejected == []


def test_a_fault_storm_on_every_request_still_converges(world, kube, emulator, settings):
    settings.KUBE_API_RETRIES = 5  # five failures in a row, then an answer
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(1))
    kube.run_pods(job.k8s_name, NS, ["gpu-a1"], when=at(2))
    for status in (500, 502, 503, 504, 429):  # every kind of transient answer, once each, on any request
        emulator.fail("*", r"/api", status=status, times=1)
    world.sync()
    assert world.job(job).state == "running"
    assert JobEvent.objects.filter(job=job, kind="started").count() == 1


def test_a_partial_failure_keeps_what_was_read_and_resumes_from_there(world, kube, cluster, emulator, settings):
    settings.KUBE_API_RETRIES = 0
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(1))
    emulator.fail("GET", r"/events\?.*watch=true", status=500, times=1)  # the last kind of the pass fails
    report = world.sync()
    assert report.unreachable
    assert world.job(job).state == "admitted"  # the workloads read before the failure were applied
    marks = Cluster.objects.get(pk=cluster.pk).sync_bookmarks
    emulator.requests.clear()
    world.sync()
    watched = {
        r["path"].rsplit("/", 1)[-1]: r["query"]["resourceVersion"]
        for r in emulator.requests
        if r["query"].get("watch")
    }
    assert watched["workloads"] == marks["workloads"]


def test_cancel_of_a_job_whose_name_now_belongs_to_another_is_a_409_and_done(portal, cluster, api, emulator, world):
    job = world.submit()
    emulator.remove("Job", job.k8s_name, NS)
    emulator.put(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job.k8s_name, "namespace": NS},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}},
        }
    )
    assert kube_job_delete(job_id=job.pk, api=api) is False  # the uid precondition failed: ours is already gone
    assert emulator.get_obj("Job", job.k8s_name, NS) is not None  # the other one is left alone
    job_cancel(job=world.job(job), user=portal.user)
    assert world.job(job).state == "cancelled"


def test_submit_conflict_with_our_own_job_after_a_lost_response_creates_nothing_twice(world, api, emulator):
    job = world.submit()
    emulator.fail("POST", r"/jobs", status=500, times=1)  # a retry of a POST that may have landed
    Job.objects.filter(pk=job.pk).update(k8s_uid="")
    from clusters.kube_sync.jobs import kube_job_create

    assert kube_job_create(job_id=job.pk, api=api) == "created"
    assert len(emulator.all("Job")) == 1
    assert api.get(JOBS, name=job.k8s_name, namespace=NS)["metadata"]["uid"] == world.job(job).k8s_uid


def test_stale_data_says_as_of_when(world, kube, cluster, emulator, settings, client):
    settings.KUBE_API_RETRIES = 0
    settings.KUBE_STALE_AFTER_SECONDS = 0
    running = _running(world, kube)
    waiting = world.submit("waiting")
    last = Cluster.objects.get(pk=cluster.pk).last_synced_at
    emulator.fail("*", ".*", status=503, times=10_000)
    world.sync()
    waiting = world.job(waiting)
    assert waiting.wait_reason == "cluster_unreachable"
    assert f"as of {last:%Y-%m-%d %H:%M:%S}" in waiting.wait_message
    assert last - timedelta(seconds=1) <= Cluster.objects.get(pk=cluster.pk).last_synced_at
    client.force_login(running.owner)
    page = client.get(reverse("queues:job_detail", args=[running.pk])).content.decode()
    assert f"this job's state is as of {last:%Y-%m-%d %H:%M:%S}" in page
    assert 'data-state="running"' in page  # nothing lost meanwhile
